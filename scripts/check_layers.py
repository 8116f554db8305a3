#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Fails when an #include points the wrong way (docs/architecture.md).

Every source file belongs to a layer; it may include files of its own layer
and of layers below it. Two components stand apart: spyre-mockdev sees only
the hardware contract (uapi), the mock transport (include/spyre/mock/, which
only mockdev and driver/ include) and the header-only common helpers, and nothing
outside mockdev (but its tests, fuzz targets and benchmarks) includes mockdev.
Private headers of driver/ and libspyre/ are for their own folder and tests.
Above the driver, only a Device (libspyre/device and the scheduler it owns,
libspyre/stream) opens a device queue: the runtime's other parts, the tools
and the Python module reach the CB ring and the task queues through it.

In libspyre/ and include/spyre/, a thread sleeps until another made
progress only through spyre::EventCount (include/spyre/common/eventcount.hpp):
no std::condition_variable, semaphore, latch, barrier, std::atomic wait,
pthread condition or futex call of its own (eventcount.hpp and futex.hpp are
where those live). The driver's threads follow the same rule; its futex
calls on the device's doorbell and interrupt words are the hardware
contract's, not a sleep between threads.

The app tier's headers (spyre/spyre.hpp, host.hpp, orchestration.hpp)
include nothing of the driver tier (spyre/driver/), directly or through
another header (docs/building.md, "What an app includes").

Usage: scripts/check_layers.py [source root]   (exit 1 and one line per
violation: file:line: <layer> includes <layer> "<path>")
"""
import pathlib
import re
import sys

# Lowest first. Files of one rank may include each other (a Device owns its
# scheduler and default stream; a stream belongs to a device).
RANKS = {
    'uapi': 0, 'common': 0, 'base': 0,
    'mock': 0,  # the mock transport (include/spyre/mock/): mockdev and the driver's MockBackend only
    'driver': 1,
    'memory': 2, 'trace': 2, 'dependency': 2,
    'stream': 3, 'device': 3,
    'tensor': 4,
    'plan': 5,
    'launch': 6,
    'compiler': 7,
    'orchestration': 8,
    'host': 9,
    'app': 99,  # tools, examples, python, tests, benchmarks
}
INCLUDE = re.compile(r'^\s*#\s*include\s*([<"])([^>"]+)[>"]', re.M)
# The driver's queue classes, and what opens one: their headers, a
# construction (a declaration of one by value, or make_unique/shared), or
# taking a core group's queue behind the Device (DeviceInternals).
QUEUE_HEADERS = ('spyre/driver/command_ring.hpp', 'spyre/driver/task_queue.hpp', 'spyre/driver/device_queue.hpp')
QUEUE_OPEN = re.compile(r'make_(?:unique|shared)<\s*(?:spyre::)?(?:driver::)?(?:CommandRing|TaskQueue|DeviceQueue)\s*>'
                        r'|\bTakeTaskQueue\s*\('
                        r'|(?:^|[^:\w<&*])(?:spyre::)?(?:driver::)?(?:CommandRing|TaskQueue|DeviceQueue)\s+\w+\s*[({]',
                        re.M)
# Who may: the Device and the scheduler it owns.
QUEUE_OWNERS = ('libspyre/device/', 'libspyre/stream/')
QUEUE_CHECKED = ('libspyre/', 'tools/', 'python/')

# Sleep and wake: one primitive. What hand-rolls it instead, outside the
# eventcount and the futex helpers it stands on.
SLEEP_WAKE = re.compile(r'\bcondition_variable(?:_any)?\b|\bpthread_cond_\w+|\bFutexWa(?:it|ke)\s*\('
                        r'|\bSYS_futex\b|\bfutex_waitv\b|\bFUTEX_WA(?:IT|KE)\w*'
                        r'|\b(?:counting|binary)_semaphore\b|\bstd::(?:latch|barrier)\b'
                        r'|\.wait\s*\(|\bnotify_(?:one|all)\s*\(')  # std::atomic's wait and notify too
SLEEP_WAKE_CHECKED = ('libspyre/', 'include/spyre/')
SLEEP_WAKE_HOME = ('include/spyre/common/eventcount.hpp', 'include/spyre/common/futex.hpp')
# The driver rings doorbells and sleeps on interrupt words with futex calls
# (the hardware contract's); between its own threads it uses EventCount too.
DRIVER_SLEEP_WAKE = re.compile(r'\bcondition_variable(?:_any)?\b|\bpthread_cond_\w+'
                               r'|\b(?:counting|binary)_semaphore\b|\bstd::(?:latch|barrier)\b'
                               r'|\.wait\s*\(|\bnotify_(?:one|all)\s*\(')
COMMENT = re.compile(r'//[^\n]*|/\*.*?\*/', re.S)


def without_comments(text: str) -> str:
    """`text` with its comments blanked, lines kept (a comment may name a futex)."""
    return COMMENT.sub(lambda m: re.sub(r'[^\n]', ' ', m.group(0)), text)


def check_sleep_wake(rel: str, text: str):
    if rel.startswith(SLEEP_WAKE_CHECKED) and rel not in SLEEP_WAKE_HOME:
        pattern = SLEEP_WAKE
    elif rel.startswith('driver/'):
        pattern = DRIVER_SLEEP_WAKE
    else:
        return []
    code = without_comments(text)
    return [f'{rel}:{code.count(chr(10), 0, m.start()) + 1}: sleeps or wakes with "{m.group(0).strip()}" '
            '(use spyre::EventCount, include/spyre/common/eventcount.hpp: waiter loops '
            'SleepUnless(ready, bound), producer changes the state then Notify)'
            for m in pattern.finditer(code)]


def layer_of(rel: str):
    """(component, layer) of a path relative to the source root."""
    p = rel.split('/')
    if p[0] == 'include' and len(p) > 2 and p[1] == 'spyre':
        if len(p) == 3:  # error.hpp, version.hpp: the one error family; spyre.hpp: umbrella
            if p[2] == 'export.h':  # what the .so exports: marks every public header, mockdev's common ones too
                return ('public', 'common')
            # orchestration.hpp and pto.h: the orchestration runtime's C++ and C faces
            if p[2] in ('orchestration.hpp', 'pto.h'):
                return ('public', 'orchestration')
            if p[2] == 'host.hpp':  # host-level orchestration (seed 003), level 3
                return ('public', 'host')
            return ('public', 'app' if p[2] == 'spyre.hpp' else 'base')
        return ('public', p[2])
    if p[0] == 'libspyre':
        return ('libspyre', p[1] if len(p) > 2 else 'base')
    if p[0] == 'driver':
        return ('driver', 'driver')
    if p[0] == 'mockdev':
        return ('mockdev', 'mockdev')
    if p[0] in ('tests', 'bench'):
        return ('tests', 'app')
    return (p[0], 'app')


def resolve(root: pathlib.Path, src: pathlib.Path, kind: str, name: str):
    """The repository path an include names, or None (system headers)."""
    candidates = []
    if kind == '"':
        candidates.append(src.parent / name)
    candidates += [root / 'include' / name, root / 'libspyre' / name, root / 'mockdev' / name]
    for c in candidates:
        if c.is_file():
            return c.resolve().relative_to(root).as_posix()
    return None


def check(root: pathlib.Path):
    errors = []
    dirs = ['include', 'libspyre', 'driver', 'mockdev', 'tools', 'examples', 'python']
    for d in dirs:
        for src in sorted((root / d).rglob('*')):
            if src.suffix not in ('.h', '.hpp', '.cpp', '.c', '.cc') or not src.is_file():
                continue
            rel = src.relative_to(root).as_posix()
            comp, layer = layer_of(rel)
            text = src.read_text(encoding='utf-8', errors='replace')
            for m in INCLUDE.finditer(text):
                target = resolve(root, src, m.group(1), m.group(2))
                if target is None:
                    continue
                tcomp, tlayer = layer_of(target)
                line = text.count('\n', 0, m.start()) + 1
                why = None
                if comp == 'mockdev':
                    if tcomp != 'mockdev' and tlayer not in ('uapi', 'common', 'mock'):
                        why = 'mockdev sees only uapi, common and the mock transport'
                elif tlayer == 'mock' and comp not in ('driver', 'tests') and layer != 'mock':
                    why = 'only mockdev and the driver speak the mock transport'
                elif tcomp == 'mockdev':
                    why = 'only mockdev and its tests include mockdev'
                elif tcomp in ('driver', 'libspyre') and tcomp != comp:
                    why = 'private header of another component'
                elif RANKS[tlayer] > RANKS[layer]:
                    why = 'points up'
                elif (m.group(2) in QUEUE_HEADERS and rel.startswith(QUEUE_CHECKED)
                      and not rel.startswith(QUEUE_OWNERS)):
                    why = 'a device queue is reached through Device'
                if why:
                    errors.append(f'{rel}:{line}: {layer} includes {tlayer} "{m.group(2)}" ({why})')
            errors += check_sleep_wake(rel, text)
            if rel.startswith(QUEUE_CHECKED) and not rel.startswith(QUEUE_OWNERS):
                code = without_comments(text)
                for m in QUEUE_OPEN.finditer(code):
                    line = code.count('\n', 0, m.end()) + 1
                    errors.append(f'{rel}:{line}: {layer} opens a device queue "{m.group(0).strip()}" '
                                  '(a device queue is reached through Device)')
    return errors


# The app tier (docs/building.md): what an app includes pulls in nothing of
# the driver tier, through any header.
APP_HEADERS = ('include/spyre/spyre.hpp', 'include/spyre/host.hpp', 'include/spyre/orchestration.hpp')
DRIVER_TIER = 'include/spyre/driver/'


def check_app_tier(root: pathlib.Path):
    errors = []
    for top in APP_HEADERS:
        seen, todo = {top: None}, [top]
        while todo:
            rel = todo.pop()
            src = root / rel
            for m in INCLUDE.finditer(src.read_text(encoding='utf-8', errors='replace')):
                target = resolve(root, src, m.group(1), m.group(2))
                if target is None or target in seen:
                    continue
                seen[target] = rel
                if target.startswith(DRIVER_TIER):
                    chain = [target]
                    while seen[chain[-1]] is not None:
                        chain.append(seen[chain[-1]])
                    errors.append(f'{top}: includes the driver tier "{target}" '
                                  f'(through {" <- ".join(chain[1:])}); apps include spyre/driver/ themselves')
                else:
                    todo.append(target)
    return errors


def main():
    root = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else pathlib.Path(__file__).parent.parent).resolve()
    errors = check(root) + check_app_tier(root)
    for e in errors:
        print(e)
    print(f'check_layers: {len(errors)} violation(s)', file=sys.stderr)
    return 1 if errors else 0


if __name__ == '__main__':
    sys.exit(main())
