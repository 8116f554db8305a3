#!/usr/bin/env bash
# The main job: install dependencies, build, and run seed 001's Workflow 5 end
# to end (A[4096,1024] x B[1024,1024] through LaunchKernel -> LaunchTiled on a
# [1024,1024] tile, checked against the host BLAS), then the two-stream
# overlap demo. Each app starts its own private spyre-mockdev and tears it
# down at exit. Arguments go to spyre-workflow5 ([M K N TILE]).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/build.sh
build/examples/spyre-workflow5 "$@"
echo
exec build/examples/spyre-overlap
