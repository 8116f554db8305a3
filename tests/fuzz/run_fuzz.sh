#!/bin/sh
# Smoke run of the program-decoder fuzz target: a bounded number of runs from
# the seed corpus. New inputs go to a scratch directory, not the corpus.
# Usage: run_fuzz.sh FUZZER CORPUS_DIR (FUZZER "unavailable" when clang++ or
# libFuzzer is missing: skipped, but failed with SPYRE_REQUIRE_FUSE=1 as in CI,
# whose install script installs them).
fuzzer=$1
corpus=$2
if [ ! -x "$fuzzer" ]; then
  msg="clang++ with libFuzzer is not available (apt-get install clang libclang-rt-14-dev, then reconfigure)"
  if [ "${SPYRE_REQUIRE_FUSE:-}" = 1 ]; then
    echo "$msg (SPYRE_REQUIRE_FUSE=1)"
    exit 1
  fi
  echo "$msg: skipped"
  exit 77
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$fuzzer" -runs="${SPYRE_FUZZ_RUNS:-20000}" -max_total_time=20 -max_len=4096 -print_final_stats=1 "$work" "$corpus"
