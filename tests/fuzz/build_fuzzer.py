#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Builds one libFuzzer target with one clang command and writes its
depfile: the headers of every source it compiles.

clang's -MD -MF with several sources in one command keeps only the last
source's headers, so a change to a header that only the others include
rebuilt nothing: incremental builds kept a fuzzer that a clean build could
not compile.

Usage: build_fuzzer.py DEPFILE OUTPUT CLANG ARG... (the flags, sources and
link options of the command, without -o).
"""
import subprocess
import sys

SOURCE_SUFFIXES = (".c", ".cc", ".cpp")


def main() -> int:
    depfile, output, clang, args = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]
    sources = [a for a in args if a.endswith(SOURCE_SUFFIXES)]
    # What the preprocessor needs: everything but the sources and the libraries.
    flags = [a for a in args if a not in sources and not a.startswith("-l")]
    headers: dict[str, None] = {}  # in order, each once
    for source in sources:
        listed = subprocess.run([clang, *flags, "-MM", "-MT", output, source], check=True,
                                capture_output=True, text=True).stdout
        for token in listed.replace("\\\n", " ").split(":", 1)[1].split():
            headers.setdefault(token)
    built = subprocess.run([clang, *args, "-o", output])
    if built.returncode != 0:
        return built.returncode
    with open(depfile, "w", encoding="utf-8") as f:
        f.write(output + ": " + " \\\n  ".join(headers) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
