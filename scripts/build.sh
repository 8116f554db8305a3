#!/usr/bin/env bash
# Configures (once) and builds spyre in ./build. Extra arguments go to meson setup.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ ! -f build/build.ninja ]; then
  meson setup build "$@"
else
  # A build/ configured before libspyre.pc became relocatable keeps its old
  # value (project defaults apply at setup only): set it.
  meson configure build -Dpkgconfig.relocatable=true
fi
ninja -C build
