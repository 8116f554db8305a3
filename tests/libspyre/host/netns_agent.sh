#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# mpirun's launch agent (plm_rsh_agent) for tests/libspyre/host/run_netns_test.py:
# where mpirun would ssh to a host, the "host" is a network namespace of this
# machine, and the daemon (orted) is started inside it. Called as
#   netns_agent.sh [options] HOST COMMAND...
# with COMMAND one string for a remote shell, as ssh would get it.
while [ "${1#-}" != "$1" ]; do shift; done
ns=$1
shift
case "$ns" in
    spyre-nt-*) ;;
    *) echo "netns_agent.sh: '$ns' is not a namespace of the netns tests" >&2; exit 2 ;;
esac
[ -e "/run/netns/$ns" ] || { echo "netns_agent.sh: no network namespace $ns" >&2; exit 2; }
# Only the network namespace changes: mounts (the mock cards' FUSE mounts,
# /dev/shm) stay the machine's, where the wrapper cleans them up.
exec nsenter --net="/run/netns/$ns" sh -c "$*"
