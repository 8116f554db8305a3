#!/usr/bin/env bash
# Configures (once) and builds spyre in ./build. Extra arguments go to meson setup.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ ! -f build/build.ninja ]; then
  meson setup build "$@"
fi
ninja -C build
