#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Runs tests/libspyre/host/mpi_remote_chip under mpirun and checks its outcome.

Usage: run_mpi_test.py BINARY NP MODE   (MODE: calls, stop-peer, kill-peer, hostile, controller-fails; l4, l4-trace: spyre-l4-examples)

Exit 77 (meson's skip) only when mpirun is missing, or when FUSE is unusable
(every rank starts a mock card) and SPYRE_REQUIRE_FUSE is not 1, as every
integration test of the project does. mpirun gets the options
this machine needs: run as root (CI), oversubscribe (3 ranks on 2 cores), and
loopback only (no other network; without it Open MPI may wait on
interfaces). Each rank's embedded mock mounts under a private TMPDIR, which is
unmounted and removed afterwards whatever happened (a SIGKILLed rank's mock
leaves its FUSE mount behind). A job still running at HARD_LIMIT_S is a hang:
every rank's stacks are printed (gdb) before it is killed, so that a hang
seen once in CI can be read.
"""
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

HARD_LIMIT_S = 45  # under meson's timeout (60 s): a hang is reported here, as a hang,
STACKS_S = 10      # with every rank's threads' stacks (gdb), when gdb is there
BOUND_MS = 3000    # the liveness bound the binary runs with
SLACK_MS = 4000    # a loaded 2-core machine: generous, but far from a hang


def fail(why, output=''):
    sys.stdout.write(output)
    print(f'FAIL: {why}')
    sys.exit(1)


def fuse_unavailable():
    if not os.access('/dev/fuse', os.R_OK | os.W_OK):
        return '/dev/fuse is missing or not accessible'
    if not shutil.which('fusermount3'):
        return 'fusermount3 is missing (fuse3)'
    return ''


def unmount_all_under(root):
    with open('/proc/mounts') as f:
        points = [line.split()[1] for line in f if line.split()[1].startswith(root)]
    for p in sorted(points, reverse=True):
        subprocess.run(['fusermount3', '-u', '-z', p], stderr=subprocess.DEVNULL, check=False)


def job_processes(mpirun_pid):
    """The job's ranks: mpirun's children (each in a process group of its own), not the mock daemons."""
    pids = []
    for entry in os.listdir('/proc'):
        if not entry.isdigit():
            continue
        try:
            with open(f'/proc/{entry}/stat') as f:
                fields = f.read().rsplit(')', 1)[1].split()
            with open(f'/proc/{entry}/comm') as f:
                comm = f.read().strip()
        except OSError:
            continue
        if int(fields[1]) == mpirun_pid and comm != 'spyre-mockdev':  # fields[1]: the parent
            pids.append((int(entry), comm))
    return sorted(pids)


def stacks_of(ranks):
    """Every thread's stack in every rank of a hung job (one gdb per rank, at
    once), so that a hang seen once can be read."""
    gdb = shutil.which('gdb')
    if not gdb:
        return 'no stacks: gdb is not installed\n'
    dumps = [(pid, comm, subprocess.Popen([gdb, '-batch', '-nx', '-p', str(pid), '-ex', 'thread apply all bt'],
                                          stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True))
             for pid, comm in ranks]
    deadline = time.monotonic() + STACKS_S
    out = []
    for pid, comm, dump in dumps:
        try:
            text, _ = dump.communicate(timeout=max(0.1, deadline - time.monotonic()))
            text = '\n'.join(l for l in text.splitlines() if l.startswith(('Thread', '#')))
        except subprocess.TimeoutExpired:
            dump.kill()  # the rank may stay stopped: it is killed next
            dump.communicate()
            text = f'gdb took longer than {STACKS_S} s'
        out.append(f'--- stacks of {comm} pid {pid}\n{text}\n')
    return ''.join(out)


def main():
    binary, np_, mode = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    mpirun = shutil.which('mpirun')
    if not mpirun:
        print('SKIP: mpirun not found (install openmpi-bin: scripts/install-deps.sh)')
        sys.exit(77)
    no_fuse = fuse_unavailable()
    if no_fuse:
        if os.environ.get('SPYRE_REQUIRE_FUSE') == '1':
            fail(f'{no_fuse} (SPYRE_REQUIRE_FUSE=1)')
        print(f'SKIP: {no_fuse}')
        sys.exit(77)
    tmp = tempfile.mkdtemp(prefix='spyre-mpi-')
    if mode == 'l4-trace':
        os.environ['SPYRE_TRACE'] = os.path.join(tmp, 'run-%r.json')  # every rank its own file
    env = dict(os.environ, TMPDIR=tmp, SPYRE_TEST_LIVENESS_MS=str(BOUND_MS),
               OMPI_ALLOW_RUN_AS_ROOT='1', OMPI_ALLOW_RUN_AS_ROOT_CONFIRM='1',
               OMPI_MCA_rmaps_base_oversubscribe='1')
    cmd = [mpirun, '-np', str(np_), '--oversubscribe',
           '--mca', 'btl', 'self,vader,tcp', '--mca', 'btl_tcp_if_include', 'lo',
           '--mca', 'oob_tcp_if_include', 'lo', binary]
    if not mode.startswith('l4'):  # spyre-l4-examples takes no mode (an unknown argument is a usage error)
        cmd.append(mode)
    start = time.monotonic()
    fault_at = None
    lines = []
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    # A job that prints nothing would keep readline() waiting past any check
    # in the loop: a timer kills it at the limit, and the loop then sees EOF.
    hung = threading.Event()

    def kill_at_limit():
        hung.set()
        ranks = job_processes(proc.pid)
        lines.append(stacks_of(ranks))
        # Each rank is in a process group of its own: killed one by one (a
        # rank gdb left stopped would otherwise outlive mpirun).
        for pid, _ in ranks:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass

    watchdog = threading.Timer(HARD_LIMIT_S, kill_at_limit)
    watchdog.start()
    try:
        os.set_blocking(proc.stdout.fileno(), True)
        while True:
            line = proc.stdout.readline()
            if not line:
                break
            lines.append(line)
            if line.startswith('RESULT fault-requested'):
                fault_at = time.monotonic()
        rc = proc.wait(timeout=max(1, HARD_LIMIT_S - (time.monotonic() - start)))
        if hung.is_set():
            fail(f'hang: mpirun still running after {HARD_LIMIT_S} s (killed)', ''.join(lines))
        traces = {}
        if mode == 'l4-trace':
            for r in range(np_):
                path = os.path.join(tmp, f'run-{r}.json')
                if os.path.exists(path):
                    with open(path) as f:
                        traces[r] = json.load(f)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        fail('hang: mpirun did not exit', ''.join(lines))
    finally:
        watchdog.cancel()
        try:
            os.killpg(proc.pid, signal.SIGKILL)  # whatever is left of the job (a stopped rank)
        except ProcessLookupError:
            pass
        unmount_all_under(tmp)
        shutil.rmtree(tmp, ignore_errors=True)
    ended = time.monotonic()
    out = ''.join(lines)
    sys.stdout.write(out)
    print(f'mpirun exit {rc} after {ended - start:.1f} s')

    if mode in ('calls', 'calls-waiters-poll'):
        if rc != 0 or f'RESULT calls-ok ranks={np_}' not in out:
            fail('the chip calls did not all come back right')
    elif mode == 'l4':
        if rc != 0 or f'RESULT l4-ok ranks={np_}' not in out:
            fail('the level-4 examples did not all pass')
    elif mode == 'l4-trace':
        if rc != 0 or f'RESULT l4-ok ranks={np_}' not in out:
            fail('the level-4 examples did not all pass')
        if sorted(traces) != list(range(np_)):
            fail(f'SPYRE_TRACE=run-%r.json wrote traces of ranks {sorted(traces)}, not 0..{np_ - 1}')
        pids = {r: {e.get('pid') for e in t['traceEvents']} for r, t in traces.items()}
        if any(pids[a] & pids[b] for a in pids for b in pids if a < b):
            fail(f'two ranks share a pid in their traces: {pids}')
        for r, t in traces.items():
            # A task's span is named for the task; its function is in args
            # (a serving rank's span, for a call, is named for the function).
            names = {e.get('name') for e in t['traceEvents']}
            names |= {e.get('args', {}).get('function') for e in t['traceEvents']}
            if 'chip_add' not in names:
                fail(f"rank {r}'s trace has no chip_add span")
        print(f'ok: {np_} traces, one per rank, each with its chip tasks')
    elif mode == 'stop-peer':
        m = re.search(r'RESULT peer-lost-reported rank=1 after_ms=(\d+) bound_ms=(\d+): .*rank 1 \(host ', out)
        if not m:
            fail('rank 0 did not report rank 1 lost')
        after = int(m.group(1))
        if after > BOUND_MS + SLACK_MS:
            fail(f'rank 1 was reported after {after} ms, past the bound {BOUND_MS} ms + slack {SLACK_MS} ms')
        if rc == 0:
            fail('mpirun exited 0 although a rank was lost')
        print(f'ok: rank 1 (stopped) reported lost by rank 0 after {after} ms (bound {BOUND_MS} ms)')
    elif mode == 'kill-peer':
        # Open MPI ends the whole job when a rank dies by a signal (unless
        # --enable-recovery); whichever comes first names rank 1: mpirun's
        # notice or rank 0's own report.
        if fault_at is None:
            fail('the fault was never requested')
        took_ms = (ended - fault_at) * 1000
        named = re.search(r'process rank 1 with PID \d+ on node \S+ exited on signal 9', out) or \
            'RESULT peer-lost-reported rank=1' in out
        if rc == 0 or not named:
            fail(f'the killed rank was not reported (exit {rc})')
        if took_ms > BOUND_MS + SLACK_MS:
            fail(f'the job ended {took_ms:.0f} ms after the kill, past the bound')
        print(f'ok: rank 1 (killed) reported, job ended {took_ms:.0f} ms after the kill (bound {BOUND_MS} ms)')
    elif mode == 'controller-fails':
        left = re.findall(r'RESULT controller-left rank=(\d+) kind=device lost: .*rank 0 \(host .*left the run', out)
        if sorted(int(r) for r in left) != list(range(1, np_)):
            fail(f'serving ranks {sorted(left)} reported rank 0 gone, not 1..{np_ - 1}')
        if rc == 0:
            fail('mpirun exited 0 although rank 0 failed')
        if ended - start > 20:
            fail(f'the job took {ended - start:.1f} s: the serving ranks waited for a controller that had left')
        print(f'ok: ranks 1..{np_ - 1} ended their Serve on rank 0 leaving; the job took {ended - start:.1f} s')
    elif mode == 'hostile':
        if 'RESULT hostile-ok' not in out:
            fail('rank 0 did not report every malformed stream as ProtocolError naming its rank, then DeviceLost')
        if rc == 0:
            fail('mpirun exited 0 although ranks were cut off')
        print(f'ok: garbage from ranks 1..{np_ - 1} became ProtocolError naming each, then DeviceLost')
    else:
        fail(f'unknown mode {mode}')


if __name__ == '__main__':
    main()
