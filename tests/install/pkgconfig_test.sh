#!/usr/bin/env bash
# docs/building.md's "Building an app against an installed libspyre", end to end:
#  1. its app block is examples/pkgconfig_example.cpp, byte for byte;
#  2. `meson install --destdir STAGE` into a scratch directory;
#  3. with PKG_CONFIG_PATH pointed at the staged libspyre.pc (nothing else:
#     no PKG_CONFIG_SYSROOT_DIR, no LD_LIBRARY_PATH, no -std flag), the
#     doc's build command, taken from the doc, builds app.cpp with
#     the default c++ and its default language standard;
#  4. the doc's run command runs it (bounded by timeout), and it prints
#     the version and the typed error it promises;
#  5. the doc's C program (examples/pto_c_example.c, seed 004's Example 1
#     from C alone) builds with cc from the .pc file without a warning and
#     runs on a private mock;
#  6. where Open MPI was found, the doc's level-4 program
#     (examples/mpi_pkgconfig_example.cpp) builds from libspyre-mpi.pc and
#     runs under the doc's mpirun line, two ranks, each on a private mock.
# Usage: pkgconfig_test.sh BUILD_DIR SOURCE_ROOT
set -euo pipefail
build_dir=$(realpath "$1")
src=$(realpath "$2")
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
unset LD_LIBRARY_PATH PKG_CONFIG_SYSROOT_DIR CXXFLAGS CPPFLAGS LDFLAGS

# 1. The doc's blocks.
python3 - "$src/docs/building.md" "$src/examples" "$stage" <<'PY'
import os, re, sys
doc, examples, stage = sys.argv[1], sys.argv[2], sys.argv[3]
text = open(doc).read()

def take(example, lang, marker, command, out_dir):
    """The doc's copy of examples/<example> (checked identical) and the
    build and run commands after <!-- marker -->, written to out_dir."""
    m = re.search(r"<!-- begin examples/%s -->\n```%s\n(.*?)```\n<!-- end examples/%s -->" % (example, lang, example),
                  text, re.S)
    if not m:
        sys.exit("docs/building.md has no block between the examples/%s markers" % example)
    if m.group(1) != open(os.path.join(examples, example)).read():
        sys.exit("docs/building.md's block differs from examples/%s: keep them identical" % example)
    c = re.search(r"<!-- %s -->\n```sh\n(.*?)```" % marker, text, re.S)
    lines = c.group(1).strip().splitlines() if c else []
    if len(lines) != 2 or not lines[0].startswith(command):
        sys.exit("docs/building.md's block after <!-- %s --> must be the build and the run command: %r" % (marker, lines))
    os.makedirs(out_dir, exist_ok=True)
    open(os.path.join(out_dir, "app." + ("cpp" if lang == "cpp" else "c")), "w").write(m.group(1))
    open(os.path.join(out_dir, "build_cmd"), "w").write(lines[0] + "\n")
    open(os.path.join(out_dir, "run_cmd"), "w").write(lines[1] + "\n")

take("pkgconfig_example.cpp", "cpp", "build command", "c++ app.cpp", stage)
take("pto_c_example.c", "c", "c build command", "cc app.c", stage + "/c")  # seed 004's Example 1 from C alone
take("mpi_pkgconfig_example.cpp", "cpp", "mpi build command", "c++ app.cpp", stage + "/mpi")  # level 4
PY
echo "docs/building.md app block == examples/pkgconfig_example.cpp, C block == examples/pto_c_example.c"

# 2. A staged install.
meson install -C "$build_dir" --destdir "$stage/root" --quiet >/dev/null
pc=$(find "$stage/root" -name libspyre.pc | head -n1)
[ -n "$pc" ] || { echo "libspyre.pc was not installed" >&2; exit 1; }
grep -q '^prefix=${pcfiledir}' "$pc" || {
  echo "libspyre.pc is not relocatable (prefix=$(sed -n 's/^prefix=//p' "$pc")): reconfigure with" \
       "meson configure $build_dir -Dpkgconfig.relocatable=true (scripts/build.sh does)" >&2
  exit 1
}
export PKG_CONFIG_PATH=$(dirname "$pc")
echo "PKG_CONFIG_PATH=$PKG_CONFIG_PATH"
echo "pkg-config --cflags --libs libspyre: $(pkg-config --cflags --libs libspyre)"
grep -Eq -- '-std=(c|gnu)\+\+20' <<<"$(pkg-config --cflags libspyre)" || { echo "Cflags lack -std=c++20" >&2; exit 1; }

# 3. The doc's command, as written, in the directory holding app.cpp.
cd "$stage"
build_cmd=$(cat build_cmd)
run_cmd=$(cat run_cmd)
echo "\$ $build_cmd"
bash -euo pipefail -c "$build_cmd"

# The binary finds the staged libspyre through its rpath, not the loader cache.
# (ldd's output is taken whole first: with pipefail, grep -q closing the pipe
# early would fail the pipeline on ldd's SIGPIPE.)
linked=$(ldd ./a.out)
echo "$linked" | grep libspyre
case "$linked" in
  *"libspyre.so"*" => $stage/root/"*) ;;
  *) echo "a.out does not resolve libspyre in the staged tree" >&2; exit 1 ;;
esac

# 4. Run it, bounded (the examples' hang bound; this one cannot include the
# build tree's hang_watchdog.hpp, since it must build from the .pc alone).
echo "\$ $run_cmd"
out=$(timeout 60 bash -c "$run_cmd")
echo "$out"
grep -q "libspyre $(pkg-config --modversion libspyre)" <<<"$out"
grep -q "contract 3.4" <<<"$out"  # 3.4: the daemon's pid namespace; 3.3: heartbeat; 3.2: OVERLAP; 3.1: a task may wait for earlier tasks on the card
grep -q "typed error ok: not found" <<<"$out"
# 4b. Every installed C++ header alone, as an app would include it, with
# common warnings as errors (the project's own -Wno-missing-field-initializers
# hid a designated initializer in driver/device_queue.hpp from us).
inc=$(find "$stage/root" -type d -path '*/include/spyre' | head -n1)
[ -n "$inc" ] || { echo "no installed include/spyre" >&2; exit 1; }
# Headers of libspyre-mpi (they include <mpi.h>) with its flags, where it was built.
find "$inc" -name '*.hpp' | sort > "$stage/headers.all"
grep -l '<mpi.h>' $(cat "$stage/headers.all") > "$stage/headers.mpi" || true
grep -vxF -f "$stage/headers.mpi" "$stage/headers.all" > "$stage/headers" || true
mpi_pc_dir=$(dirname "$(find "$stage/root" -name libspyre-mpi.pc | head -n1)" 2>/dev/null || true)
compile_alone() {  # list-file cflags
  echo "$(wc -l < "$1") installed headers, each alone with -Wall -Wextra -Werror"
  # shellcheck disable=SC2016
  xargs -P 2 -I{} bash -c 'echo "#include \"$1\"" | c++ $2 -Wall -Wextra -Werror -fsyntax-only -x c++ - ||
    { echo "the installed header $1 does not compile alone" >&2; exit 255; }' _ {} "$2" < "$1"
}
compile_alone "$stage/headers" "$(pkg-config --cflags libspyre)"
if [ -s "$stage/headers.mpi" ] && [ -f "$mpi_pc_dir/libspyre-mpi.pc" ]; then
  compile_alone "$stage/headers.mpi" "$(PKG_CONFIG_PATH=$mpi_pc_dir pkg-config --cflags libspyre-mpi)"
fi
# 5. The C program, built with cc as the doc says, run on a private mock
# (this build's spyre-mockdev: the staged prefix is not where it looks).
cd "$stage/c"
c_build_cmd=$(cat build_cmd)
echo "\$ $c_build_cmd"
bash -euo pipefail -c "$c_build_cmd" 2>cc.err || { cat cc.err >&2; exit 1; }
if [ -s cc.err ]; then echo "cc printed warnings:" >&2; cat cc.err >&2; exit 1; fi
echo "\$ $(cat run_cmd)"
out=$(SPYRE_MOCKDEV="$build_dir/mockdev/spyre-mockdev" FLEX_DEVICE=MOCK timeout 60 bash -c "$(cat run_cmd)")
echo "$out"
grep -q "example 1 from C: OK" <<<"$out"
# 6. The level-4 app against libspyre-mpi.pc, where Open MPI was found:
# built with the doc's command, run under its mpirun line (two ranks, each
# with a private mock), bounded.
mpi_pc=$(find "$stage/root" -name libspyre-mpi.pc | head -n1)
if [ -n "$mpi_pc" ]; then
  cd "$stage/mpi"
  echo "\$ $(cat build_cmd)"
  bash -euo pipefail -c "$(cat build_cmd)"
  linked=$(ldd ./a.out)
  case "$linked" in
    *"libspyre-mpi.so"*" => $stage/root/"*) ;;
    *) echo "a.out does not resolve libspyre-mpi in the staged tree" >&2; exit 1 ;;
  esac
  echo "\$ $(cat run_cmd)"
  out=$(SPYRE_MOCKDEV="$build_dir/mockdev/spyre-mockdev" timeout 120 bash -c "$(cat run_cmd)" </dev/null)
  echo "$out"
  grep -q "libspyre-mpi, 2 ranks, a chip task on rank 1 .*: OK" <<<"$out"
elif [ -e "$build_dir/libspyre/libspyre-mpi.so" ]; then
  echo "libspyre-mpi.so was built but libspyre-mpi.pc was not installed" >&2
  exit 1
else
  echo "no libspyre-mpi in this build (Open MPI not found): level-4 app skipped"
fi
# 7. The same app against the build tree, uninstalled: the doc's build
# command with PKG_CONFIG_PATH at build/meson-uninstalled and the
# package named libspyre-uninstalled; the binary finds libspyre in the
# build tree through its rpath.
mkdir -p "$stage/uninstalled"
cd "$stage/uninstalled"
cp "$stage/app.cpp" .
unset_cmd=$(sed 's/libspyre\b/libspyre-uninstalled/g' "$stage/build_cmd")
echo "\$ PKG_CONFIG_PATH=$build_dir/meson-uninstalled $unset_cmd"
PKG_CONFIG_PATH="$build_dir/meson-uninstalled" bash -euo pipefail -c "$unset_cmd"
linked=$(ldd ./a.out)
case "$linked" in
  *"libspyre.so"*" => $build_dir/libspyre/"*) ;;
  *) echo "a.out built from libspyre-uninstalled.pc does not resolve libspyre in $build_dir/libspyre" >&2; exit 1 ;;
esac
out=$(timeout 60 bash -c "$(cat "$stage/run_cmd")")
grep -q "typed error ok: not found" <<<"$out"
echo "built and ran against libspyre-uninstalled.pc"
cd "$stage"
# The installed headers and udev rules are where users expect them.
[ -f "$(find "$stage/root" -path '*include/spyre/uapi/spyre_cb.h' | head -n1)" ]
[ -n "$(find "$stage/root" -name '70-spyre.rules' | head -n1)" ]
echo "pkg-config build OK"
