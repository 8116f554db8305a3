#!/usr/bin/env bash
# Installs spyre's build and test dependencies from Debian 12 packages.
# Skips apt entirely when everything is already present.
set -euo pipefail

packages=(
  meson ninja-build pkgconf g++            # build
  ccache                                    # a second build of the same sources (the pip install test's) from cache
  libfuse3-dev fuse3                        # spyre-mockdev's FUSE tree (and fusermount3)
  liburing-dev                              # io_uring DMA engine
  libboost-dev                              # Boost.Interprocess shared memory
  libcli11-dev                              # command lines of the tools
  nlohmann-json3-dev                        # ExecutionPlan manifests
  libxxhash-dev                             # XXH3-128: the host level's check of kept device copies
  libgtest-dev libgmock-dev                 # tests
  libbenchmark-dev                          # bench/
  libconcurrentqueue-dev                    # bench/ring_bench: moodycamel's queue beside the hand-written rings
  libopenblas-dev                           # the mock device's matmul (sgemm)
  libstarpu-dev                             # bench/orchestration_bench: StarPU baseline (optional)
  openmpi-bin libopenmpi-dev                # level 4 across hosts: libspyre-mpi, the mpirun tests, bench/mpi_bench
  iproute2                                  # ip netns: the mpi_netns_* tests put each rank in a network namespace
  clang libclang-rt-14-dev                  # libFuzzer for the program-decoder fuzz target
  pybind11-dev python3-pybind11 python3-dev # the Python package spyre (python/)
  python3-numpy libdlpack-dev               # its numpy arrays and DLPack (dlpack/dlpack.h)
  python3-pytest                            # its tests (tests/python/)
  chromium                                  # spyre-trace's HTML timeline checked in a browser (tests/tools)
  python3-mesonpy patchelf python3-venv python3-pip  # pip install . of it into a venv (pyproject.toml)
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi
sudo_cmd=()
[ "$(id -u)" -eq 0 ] || sudo_cmd=(sudo)
echo "installing: ${missing[*]}"
"${sudo_cmd[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -qq
"${sudo_cmd[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}"
