#!/usr/bin/env bash
# Install dependencies, build, and run the test suites; with no arguments,
# then the ThreadSanitizer job on the daemon (scripts/tsan.sh; SPYRE_TSAN=0
# skips it).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
# The pip install test builds the sources again in build-wheel/: ccache
# serves them from this build's objects when the directory is not hashed.
export CCACHE_NOHASHDIR=1 CCACHE_BASEDIR=$PWD
scripts/build.sh
export SPYRE_REQUIRE_FUSE=${SPYRE_REQUIRE_FUSE:-1}
rm -rf build/meson-logs/tsan*  # no stale TSan results for .ci/run to count
status=0
meson test -C build --print-errorlogs --num-processes 2 "$@" || status=$?
if [ $# -eq 0 ] && [ "${SPYRE_TSAN:-1}" != 0 ]; then
  scripts/tsan.sh || status=$?
fi
exit $status
