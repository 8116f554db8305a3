#!/bin/sh
# meson install script: refresh the dynamic loader's cache after a real
# `meson install` as root, so binaries that link libspyre without an rpath
# find it at once when LIBDIR is one of the loader's directories (Debian's
# /usr/local/lib/x86_64-linux-gnu is). Skipped for staged installs (DESTDIR
# set, e.g. `meson install --destdir`) and when not root: then the rpath in
# libspyre.pc's Libs and in the installed binaries is what finds libspyre.
[ -n "${DESTDIR:-}" ] && exit 0
[ "$(id -u)" = 0 ] || { echo "ldconfig-after-install: not root, skipped (rpaths find libspyre)"; exit 0; }
command -v ldconfig >/dev/null 2>&1 || PATH=$PATH:/sbin:/usr/sbin
ldconfig && echo "ldconfig-after-install: ran ldconfig for $1"
exit 0
