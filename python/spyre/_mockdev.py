# SPDX-License-Identifier: Apache-2.0
"""Points libspyre at the spyre-mockdev installed with this package.

pip puts the wheel's spyre-mockdev into the environment's scripts directory
(``.venv/bin``), which libspyre's own search (``$SPYRE_MOCKDEV``, the build
tree, the install prefix, ``PATH``) misses unless the venv is activated; an
embedded mock would then fail with NotFound, or start another build's daemon.
"""
import os
from importlib import metadata


def installed_mockdev():
    """The spyre-mockdev of the installed distribution this package was imported from, else None."""
    try:
        dist = metadata.distribution("spyre")
    except metadata.PackageNotFoundError:
        return None  # a build tree (PYTHONPATH=build/python) or `meson install`
    files = dist.files or []
    here = os.path.realpath(os.path.join(os.path.dirname(__file__), "__init__.py"))
    if not any(f.name == "__init__.py" and os.path.realpath(dist.locate_file(f)) == here for f in files):
        return None  # another copy of spyre shadows the installed one
    for f in files:
        path = os.path.realpath(dist.locate_file(f))
        if f.name == "spyre-mockdev" and os.access(path, os.X_OK):
            return path
    return None


def use_installed_mockdev():
    """Sets SPYRE_MOCKDEV for libspyre unless the caller already chose one."""
    if not os.environ.get("SPYRE_MOCKDEV"):
        path = installed_mockdev()
        if path:
            os.environ["SPYRE_MOCKDEV"] = path
