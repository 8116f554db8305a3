#!/usr/bin/env bash
# Install dependencies, build, and run the unit and integration suites.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/build.sh
export SPYRE_REQUIRE_FUSE=${SPYRE_REQUIRE_FUSE:-1}
meson test -C build --print-errorlogs --num-processes 2 "$@"
