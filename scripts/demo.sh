#!/usr/bin/env bash
# The main job: install dependencies, build, and run the bring-up demo. The
# demo starts its own private spyre-mockdev and tears it down at exit.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/build.sh
exec build/examples/spyre-bringup "$@"
