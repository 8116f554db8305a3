#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Runs level-4 jobs with each rank in a network namespace of its own, Open
MPI's TCP transport between them over a veth pair (docs/multihost.md).

Usage: run_netns_test.py MODE BINARY [L4_EXAMPLES]
  l4         BINARY is spyre-l4-examples: every example right (RESULT l4-ok)
  calls      BINARY is mpi_remote_chip: chip calls byte for byte (RESULT calls-ok)
  cut-cable  BINARY is mpi_cut_cable: the link goes down while a chip task runs
             on rank 1; rank 0 must name rank 1 and the task within the bound
             and not hang; the link comes back, the old job stays failed, and
             a new job (L4_EXAMPLES) over the same link gives right results.

Two namespaces spyre-nt-<pid>-<random>-{a,b} and a veth pair spy0 (in a,
10.250.36.1/30) <-> spy1 (in b, 10.250.36.2/30) are made for the run and
removed on every way out (failure, meson's SIGTERM at its timeout); the
names are this run's own, and namespaces left by a run that was SIGKILLed
are removed by the next one (their pid is gone). mpirun itself runs in
namespace a (rank 0 is its child there); rank 1 runs under an orted that
netns_agent.sh starts in namespace b, as ssh would on another host. Open
MPI's TCP BTL and its out-of-band channel use only the veth subnet, PMIx
each namespace's own loopback: no traffic leaves the two namespaces.

Exit 77 (skip) with the reason when namespaces cannot be had (not root,
`ip netns add` refused, ip or nsenter missing), when mpirun is missing, or
when FUSE is unusable and SPYRE_REQUIRE_FUSE is not 1.
"""
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from run_mpi_test import fuse_unavailable, stacks_of, unmount_all_under  # noqa: E402

JOB_LIMIT_S = 40     # one mpirun job; meson's timeout covers two of them
BOUND_MS = 3000      # the liveness bound the cut-cable binary runs with
SLACK_MS = 4000      # a loaded 2-core machine: generous, but far from a hang
SUBNET = '10.250.36.0/30'
ADDR = {'a': '10.250.36.1/30', 'b': '10.250.36.2/30'}
DEV = {'a': 'spy0', 'b': 'spy1'}
PREFIX = 'spyre-nt-'
AGENT = os.path.join(os.path.dirname(os.path.abspath(__file__)), 'netns_agent.sh')


def fail(why, output=''):
    sys.stdout.write(output)
    print(f'FAIL: {why}')
    sys.exit(1)


def skip(why):
    print(f'SKIP: {why}')
    sys.exit(77)


def ip(*args, check=True):
    r = subprocess.run(['ip', *args], capture_output=True, text=True, timeout=20)
    if check and r.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)}: {r.stderr.strip()}")
    return r


def kill_pids_in(ns):
    r = ip('netns', 'pids', ns, check=False)
    for pid in r.stdout.split():
        try:
            os.kill(int(pid), signal.SIGKILL)
        except (ProcessLookupError, ValueError):
            pass


def remove_namespace(ns):
    kill_pids_in(ns)
    ip('netns', 'del', ns, check=False)  # its end of the veth pair goes with it


def sweep_abandoned():
    """Namespaces of runs whose wrapper is gone (SIGKILLed: no cleanup ran)."""
    r = ip('netns', 'list', check=False)
    for line in r.stdout.splitlines():
        name = line.split()[0] if line.split() else ''
        parts = name[len(PREFIX):].split('-')
        if name.startswith(PREFIX) and parts[0].isdigit() and not os.path.exists(f'/proc/{parts[0]}'):
            remove_namespace(name)


class Namespaces:
    """Two namespaces joined by a veth pair, removed on every way out."""

    def __init__(self):
        base = f'{PREFIX}{os.getpid()}-{secrets.token_hex(3)}'
        self.ns = {'a': base + '-a', 'b': base + '-b'}
        self.made = []

    def __enter__(self):
        sweep_abandoned()
        for side in 'ab':
            r = ip('netns', 'add', self.ns[side], check=False)
            if r.returncode != 0:
                self.__exit__()
                skip(f'network namespaces are unavailable: ip netns add: {r.stderr.strip()}')
            self.made.append(self.ns[side])
        try:
            # Made inside the namespaces: the pair never appears in the machine's own.
            ip('link', 'add', DEV['a'], 'netns', self.ns['a'], 'type', 'veth', 'peer', 'name', DEV['b'], 'netns', self.ns['b'])
            for side in 'ab':
                ip('-n', self.ns[side], 'addr', 'add', ADDR[side], 'dev', DEV[side])
                ip('-n', self.ns[side], 'link', 'set', 'lo', 'up')
                ip('-n', self.ns[side], 'link', 'set', DEV[side], 'up')
        except (RuntimeError, subprocess.TimeoutExpired) as e:
            self.__exit__()
            fail(f'setting up the namespaces: {e}')
        return self

    def link(self, state):
        ip('-n', self.ns['a'], 'link', 'set', DEV['a'], state)

    def __exit__(self, *exc):
        for ns in self.made:
            remove_namespace(ns)
        self.made = []


class Job:
    """One mpirun job over the two namespaces; its output is read as it comes."""

    def __init__(self, ns, tmp, binary, args=(), env=None):
        hostfile = os.path.join(tmp, 'hosts')
        with open(hostfile, 'w') as f:
            f.write(f"localhost slots=1\n{ns.ns['b']} slots=1\n")
        cmd = ['nsenter', f"--net=/run/netns/{ns.ns['a']}", shutil.which('mpirun'), '-np', '2',
               '--hostfile', hostfile, '--mca', 'plm_rsh_agent', AGENT,
               '--mca', 'btl', 'tcp,self', '--mca', 'btl_tcp_if_include', SUBNET,
               '--mca', 'oob_tcp_if_include', SUBNET, binary, *args]
        self.ns = ns
        self.lines = []
        self.cv = threading.Condition()
        self.done = False
        self.start = time.monotonic()
        self.proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                     start_new_session=True)
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self):
        for line in self.proc.stdout:
            with self.cv:
                self.lines.append(line)
                self.cv.notify_all()
        with self.cv:
            self.done = True
            self.cv.notify_all()

    def output(self):
        with self.cv:
            return ''.join(self.lines)

    def wait_for(self, *prefixes):
        """The first line starting with one of `prefixes`, or None (the job ended or hit its limit)."""
        deadline = self.start + JOB_LIMIT_S
        with self.cv:
            seen = 0
            while True:
                for line in self.lines[seen:]:
                    if line.startswith(prefixes):
                        return line
                seen = len(self.lines)
                left = deadline - time.monotonic()
                if self.done or left <= 0:
                    return None
                self.cv.wait(min(left, 0.5))

    def finish(self):
        """The exit code; a job still running at its limit is a hang (stacks printed, everything killed)."""
        try:
            rc = self.proc.wait(timeout=max(0.1, self.start + JOB_LIMIT_S - time.monotonic()))
        except subprocess.TimeoutExpired:
            ranks = []
            for ns in self.ns.ns.values():
                for pid in ip('netns', 'pids', ns, check=False).stdout.split():
                    try:
                        with open(f'/proc/{pid}/comm') as f:
                            comm = f.read().strip()
                    except OSError:
                        continue
                    if comm not in ('spyre-mockdev', 'mpirun', 'orted', 'sh', 'nsenter'):
                        ranks.append((int(pid), comm))
            stacks = stacks_of(ranks)
            self.kill()
            self.reader.join(5)
            fail(f'hang: mpirun still running after {JOB_LIMIT_S} s (killed)', self.output() + stacks)
        self.reader.join(5)
        return rc

    def kill(self):
        for ns in self.ns.ns.values():
            kill_pids_in(ns)
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def run_to_end(ns, tmp, binary, args, env, want):
    job = Job(ns, tmp, binary, args, env)
    rc = job.finish()
    out = job.output()
    sys.stdout.write(out)
    print(f'mpirun exit {rc} after {time.monotonic() - job.start:.1f} s')
    if rc != 0 or want not in out:
        fail(f'expected "{want}" and exit 0')


def cut_cable(ns, tmp, binary, l4_binary, env):
    link_back = os.path.join(tmp, 'link-back')
    job = Job(ns, tmp, binary, (), dict(env, SPYRE_TEST_LINK_BACK=link_back, SPYRE_TEST_LIVENESS_MS=str(BOUND_MS)))
    try:
        if not job.wait_for('RESULT hold-in-flight'):
            job.kill()
            fail('the held task never started on rank 1', job.output())
        ns.link('down')
        cut_at = time.monotonic()
        print(f'link {DEV["a"]} set down {cut_at - job.start:.1f} s into the job')
        reported = job.wait_for('RESULT cut-reported', 'RESULT wrong')
        reported_at = time.monotonic()
    finally:
        ns.link('up')  # the cable comes back, whatever happened
        open(link_back, 'w').close()
    rc = job.finish()
    out = job.output()
    sys.stdout.write(out)
    print(f'mpirun exit {rc} after {time.monotonic() - job.start:.1f} s')
    if not reported or not reported.startswith('RESULT cut-reported'):
        fail('rank 0 did not report rank 1 and the task lost')
    if "'held_add'" not in reported or 'rank 1 (host ' not in reported:
        fail(f'the report does not name both the task and the rank: {reported}')
    took_ms = (reported_at - cut_at) * 1000
    if took_ms > BOUND_MS + SLACK_MS:
        fail(f'reported {took_ms:.0f} ms after the cut, past the bound {BOUND_MS} ms + slack {SLACK_MS} ms')
    if 'RESULT old-run-stays-failed' not in out:
        fail('after the link came back, the old job heard rank 1 again')
    if rc == 0:
        fail('mpirun exited 0 although a rank was lost')
    print(f'ok: rank 1 and task held_add reported lost {took_ms:.0f} ms after the cut (bound {BOUND_MS} ms); '
          'the old job stayed failed')
    # A new job over the restored link starts clean and computes right.
    run_to_end(ns, tmp, l4_binary, (), env, 'RESULT l4-ok ranks=2')
    print('ok: a new job over the restored link passed the level-4 examples')


def main():
    mode, binary = sys.argv[1], sys.argv[2]
    if not shutil.which('mpirun'):
        skip('mpirun not found (install openmpi-bin: scripts/install-deps.sh)')
    if os.geteuid() != 0:
        skip('network namespaces need root (CI runs as root)')
    for tool in ('ip', 'nsenter'):
        if not shutil.which(tool):
            skip(f'{tool} not found (iproute2, util-linux)')
    no_fuse = fuse_unavailable()
    if no_fuse:
        if os.environ.get('SPYRE_REQUIRE_FUSE') == '1':
            fail(f'{no_fuse} (SPYRE_REQUIRE_FUSE=1)')
        skip(no_fuse)
    # meson's timeout sends SIGTERM: leave through the cleanup below.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit('killed by SIGTERM (meson timeout?)'))
    tmp = tempfile.mkdtemp(prefix='spyre-netns-')
    env = dict(os.environ, TMPDIR=tmp, OMPI_ALLOW_RUN_AS_ROOT='1', OMPI_ALLOW_RUN_AS_ROOT_CONFIRM='1')
    try:
        with Namespaces() as ns:
            if mode == 'l4':
                run_to_end(ns, tmp, binary, (), env, 'RESULT l4-ok ranks=2')
            elif mode == 'calls':
                run_to_end(ns, tmp, binary, ('calls',), env, 'RESULT calls-ok ranks=2')
            elif mode == 'cut-cable':
                cut_cable(ns, tmp, binary, sys.argv[3], env)
            else:
                fail(f'unknown mode {mode}')
    finally:
        unmount_all_under(tmp)
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == '__main__':
    main()
