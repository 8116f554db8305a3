#!/usr/bin/env bash
# The daemon under ThreadSanitizer. Builds spyre-mockdev and the device
# model's unit tests with -fsanitize=thread in build-tsan/ (only those
# targets: no libspyre), runs those unit tests (suite mockdev-model), then
# runs the suites of build/ that start a daemon with every test's daemon
# replaced by the TSan one (SPYRE_MOCKDEV, set by a wrapper so that it wins
# over the tests' own setting). Fails when a test fails or anything prints a
# ThreadSanitizer report; the reports are in build/meson-logs/tsan-reports/
# and on stderr.
# Usage: scripts/tsan.sh [meson test arguments for build/; default: every
# suite that starts a daemon: integration, stream, stress, python, mpi]
set -euo pipefail
cd "$(dirname "$0")/.."
[ -f build/build.ninja ] || scripts/build.sh  # the tests that run against the TSan daemon
if [ ! -f build-tsan/build.ninja ]; then
  meson setup build-tsan -Db_sanitize=thread -Db_lundef=false -Dexamples=false -Dbenchmarks=false \
    -Dpython=disabled -Dmpi=disabled
fi
ninja -C build-tsan mockdev/spyre-mockdev mockdev-model
reports=$PWD/build/meson-logs/tsan-reports
rm -rf "$reports" build/meson-logs/tsan*.json build/meson-logs/tsan*.txt
mkdir -p "$reports"
# halt_on_error=0: every report of a run is collected and the daemon goes on
# (a test then fails only for what it checks).
export TSAN_OPTIONS="log_path=$reports/tsan halt_on_error=0 second_deadlock_stack=1"
if [ $# -eq 0 ]; then
  present=$(meson test -C build --list 2>/dev/null | sed -n 's/^spyre:\([a-z-]*\) \/ .*/\1/p' | sort -u)
  for suite in integration stream stress python mpi; do
    grep -qx "$suite" <<<"$present" && set -- "$@" --suite "$suite"
  done
fi
status=0
meson test -C build-tsan --no-rebuild --suite mockdev-model --logbase tsan-model --print-errorlogs \
  --num-processes 2 || status=$?
cp build-tsan/meson-logs/tsan-model.json build/meson-logs/  # beside the others, for .ci/run
# TSan slows the daemon several times: the tests' own time limits grow too.
meson test -C build --logbase tsan --print-errorlogs --num-processes 2 --timeout-multiplier 3 \
  --wrapper "env SPYRE_MOCKDEV=$PWD/build-tsan/mockdev/spyre-mockdev" "$@" || status=$?
if compgen -G "$reports/tsan.*" >/dev/null; then
  cat "$reports"/tsan.* >&2
  n=$(cat "$reports"/tsan.* | grep -c '^WARNING: ThreadSanitizer' || true)
  echo "ThreadSanitizer: $n reports (build/meson-logs/tsan-reports)" >&2
  status=1
else
  echo "ThreadSanitizer: no reports from spyre-mockdev or the device model's unit tests"
fi
exit $status
