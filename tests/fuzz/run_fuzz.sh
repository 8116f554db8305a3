#!/bin/sh
# Smoke run of one fuzz target: a bounded number of runs (SPYRE_FUZZ_RUNS,
# default 20000) or 20 s, whichever ends first, from the seed corpus. New
# inputs go to a scratch directory, not the corpus.
# Usage: run_fuzz.sh FUZZER CORPUS_DIR [MAX_LEN] (FUZZER "unavailable" when
# clang++ or libFuzzer is missing: skipped, but failed with
# SPYRE_REQUIRE_FUSE=1 as in CI, whose install script installs them).
fuzzer=$1
corpus=$2
max_len=${3:-4096}
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
# -timeout: one input running past 30 s is reported as a hang (a crash).
"$fuzzer" -runs="${SPYRE_FUZZ_RUNS:-20000}" -max_total_time=20 -timeout=30 -max_len="$max_len" \
  -print_final_stats=1 -artifact_prefix="$work/" "$work" "$corpus"
status=$?
# Keep a crash's reproducer where the run's log says, in the build's log dir.
for f in "$work"/crash-* "$work"/leak-* "$work"/timeout-* "$work"/oom-*; do
  [ -e "$f" ] || continue
  mkdir -p "${MESON_BUILD_ROOT:-.}/fuzz-artifacts" && cp "$f" "${MESON_BUILD_ROOT:-.}/fuzz-artifacts/" &&
    echo "reproducer kept: ${MESON_BUILD_ROOT:-.}/fuzz-artifacts/$(basename "$f")"
done
exit $status
