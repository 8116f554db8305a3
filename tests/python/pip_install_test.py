# SPDX-License-Identifier: Apache-2.0
"""The README's install, as a user runs it: a venv of this interpreter with
--system-site-packages, `pip install --no-build-isolation --no-index` of the
checkout (meson-python), then the installed package on its own: imported
from the venv, with the venv's libspyre and spyre-mockdev, a byte round trip
and a tensor round trip through a private mock, and a typed error.

Usage: pip_install_test.py SOURCE_DIR BUILD_DIR
BUILD_DIR is meson-python's build directory, kept between runs so that a
rerun only rebuilds what changed; the venv is BUILD_DIR-venv, made anew.
"""
import os
import shutil
import subprocess
import sys
import tempfile

# Runs inside the venv, from a directory outside the checkout, with no
# PYTHONPATH or SPYRE_MOCKDEV: only what pip installed can be found.
CHECK = r"""
import os, sys, numpy as np, spyre
venv = os.path.realpath(sys.prefix)
assert sys.prefix != sys.base_prefix, "not running in the venv"
assert os.path.realpath(spyre.__file__).startswith(venv + "/"), spyre.__file__
mockdev = os.environ.get("SPYRE_MOCKDEV", "")
assert mockdev == os.path.join(venv, "bin", "spyre-mockdev"), "SPYRE_MOCKDEV=" + mockdev
libs = {line.split()[-1] for line in open("/proc/self/maps") if "libspyre" in line}
assert libs and all(p.startswith(venv + "/") for p in libs), "libspyre loaded from " + repr(libs)

with spyre.Host.embedded_mock(cards=1, vfs=0, mem="256M") as host, host.open("0") as dev:
    rng = np.random.default_rng(7)
    src = rng.integers(0, 256, 1 << 20, dtype=np.uint8)
    back = np.zeros_like(src)
    buf = dev.alloc(src.nbytes)
    stream = dev.create_stream()
    stream.copy_to_device(src, buf, 0, src.nbytes)
    stream.copy_from_device(buf, back, 0, src.nbytes)
    stream.synchronize()
    assert np.array_equal(src, back), "bytes differ after the device round trip"

    a = rng.standard_normal((64, 96)).astype(np.float32)
    assert np.array_equal(spyre.SpyreTensor.from_numpy(dev, a).to_numpy(), a), "tensor differs"

    try:
        spyre.SpyreTensor.from_numpy(dev, np.zeros(4, np.float64))
    except spyre.InvalidArgument as e:
        assert "float64" in str(e), str(e)
    else:
        raise AssertionError("float64 was accepted")
print("installed spyre", spyre.__version__, "from", os.path.dirname(spyre.__file__), "round trips OK")
"""


def run(cmd, **kw):
    print("+", " ".join(cmd), flush=True)
    subprocess.run(cmd, check=True, **kw)


def main():
    source, build = sys.argv[1], sys.argv[2]
    venv = build + "-venv"
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "SPYRE_MOCKDEV", "VIRTUAL_ENV")}
    # meson-python 0.12 reconfigures `builddir` when the interpreter it wrote
    # into .mesonpy-native-file.ini last time is the same one, and then fails
    # on a directory that holds no build; with another interpreter it skips
    # the setup of a configured one and keeps the old interpreter. So the venv
    # has the same path every run (made anew), and a stale file goes when the
    # build dir is not configured.
    if not os.path.exists(os.path.join(build, "meson-private", "coredata.dat")):
        try:
            os.remove(os.path.join(source, ".mesonpy-native-file.ini"))
        except FileNotFoundError:
            pass
    shutil.rmtree(venv, ignore_errors=True)
    run([sys.executable, "-m", "venv", "--system-site-packages", venv], env=env)
    # -Ddebug=true (with pyproject's -O2): the compile flags of the default
    # build type, so ccache serves what the main build compiled.
    run([os.path.join(venv, "bin", "pip"), "install", "--no-build-isolation", "--no-index",
         "--config-settings=builddir=" + build, "--config-settings=setup-args=-Ddebug=true", source],
        env=env, cwd=source)
    with tempfile.TemporaryDirectory(prefix="spyre-pip-") as tmp:
        run([os.path.join(venv, "bin", "python"), "-c", CHECK], env=env, cwd=tmp)
    shutil.rmtree(venv, ignore_errors=True)


if __name__ == "__main__":
    main()
