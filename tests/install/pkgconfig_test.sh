#!/usr/bin/env bash
# Installs the build into a scratch prefix and builds an example against it
# with `pkg-config --cflags --libs libspyre`, then runs it.
set -euo pipefail
build_dir=$1
example_src=$2
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT

meson install -C "$build_dir" --destdir "$stage" --quiet >/dev/null
pc=$(find "$stage" -name libspyre.pc | head -n1)
[ -n "$pc" ] || { echo "libspyre.pc was not installed" >&2; exit 1; }
export PKG_CONFIG_PATH=$(dirname "$pc")
export PKG_CONFIG_SYSROOT_DIR=$stage
flags=$(pkg-config --cflags --libs libspyre)
echo "pkg-config --cflags --libs libspyre: $flags"
c++ -std=c++20 -o "$stage/example" "$example_src" $flags
libdir=$(dirname "$(find "$stage" -name 'libspyre.so' | head -n1)")
out=$(LD_LIBRARY_PATH=$libdir "$stage/example")
echo "$out"
grep -q "libspyre $(pkg-config --modversion libspyre)" <<<"$out"
grep -q "contract 1.0" <<<"$out"
# The installed headers and udev rules are where users expect them.
[ -f "$(find "$stage" -path '*include/spyre/uapi/spyre_cb.h' | head -n1)" ]
[ -n "$(find "$stage" -name '70-spyre.rules' | head -n1)" ]
echo "pkg-config build OK"
