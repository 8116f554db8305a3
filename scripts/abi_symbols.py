#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""The symbols a shared library exports, as a reviewable list (docs/building.md).

libspyre.so is built with hidden visibility and exports what its installed
headers declare (spyre/export.h). This lists what it defines and exports
(`nm -D --defined-only`, demangled), one `KIND name` per line, sorted:
functions and data of namespace spyre and the C API, and the typeinfo and
vtables of its polymorphic classes. Weak definitions of inline functions and
templates are left out: whether the compiler emits one depends on inlining
and on the build type, not on the API.

Usage:
  scripts/abi_symbols.py LIB.so                 print the list
  scripts/abi_symbols.py LIB.so --check LIST    exit 1 with a diff when LIB.so differs from LIST
  scripts/abi_symbols.py LIB.so --update LIST   rewrite LIST from LIB.so (then review `git diff LIST`)
"""
import argparse
import difflib
import pathlib
import re
import subprocess
import sys

# Strong text, data, bss, read-only data; V/u: weak or unique objects
# (typeinfo and vtables of classes without a key function).
KEPT = set('TDBRVu')
OWN = re.compile(r'^(?:(?:typeinfo|typeinfo name|vtable|VTT|construction vtable) for )?spyre::')
C_NAME = re.compile(r'^(?:pto_|spyre_)\w*$')


def exported(lib: str):
    out = subprocess.run(['nm', '-D', '--defined-only', '-C', lib], check=True, capture_output=True, text=True).stdout
    symbols = set()
    for line in out.splitlines():
        parts = line.split(' ', 2)
        if len(parts) != 3 or parts[1] not in KEPT:
            continue
        kind, name = parts[1], parts[2]
        if OWN.match(name) or C_NAME.match(name):
            symbols.add(f'{kind} {name}')
    return sorted(symbols)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('lib')
    group = ap.add_mutually_exclusive_group()
    group.add_argument('--check', metavar='LIST')
    group.add_argument('--update', metavar='LIST')
    args = ap.parse_args()
    symbols = exported(args.lib)
    if args.update:
        pathlib.Path(args.update).write_text(''.join(s + '\n' for s in symbols))
        print(f'{args.update}: {len(symbols)} symbols; review the change with git diff {args.update}')
        return 0
    if not args.check:
        print(''.join(s + '\n' for s in symbols), end='')
        return 0
    want = pathlib.Path(args.check).read_text().splitlines()
    if want == symbols:
        print(f'{args.lib}: the {len(symbols)} exported symbols match {args.check}')
        return 0
    sys.stdout.writelines(difflib.unified_diff([w + '\n' for w in want], [s + '\n' for s in symbols],
                                               args.check, args.lib))
    print(f'\n{args.lib} exports a different API than {args.check} lists (- listed, + exported).\n'
          'If the change is meant (a public header changed), regenerate the list and review it:\n'
          f'  scripts/abi_symbols.py {args.lib} --update {args.check} && git diff {args.check}\n'
          'An internal symbol in the + lines means an installed header declares something of the\n'
          "library's inside: move it to a private header, or mark its forward declaration SPYRE_INTERNAL.")
    return 1


if __name__ == '__main__':
    sys.exit(main())
