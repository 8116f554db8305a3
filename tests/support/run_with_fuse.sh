#!/usr/bin/env bash
# Runs a command that needs FUSE. Where /dev/fuse is unusable it reports a
# skip (exit 77, meson's skip code), unless SPYRE_REQUIRE_FUSE=1 makes that a
# failure.
if ! { exec 3<>/dev/fuse; } 2>/dev/null; then
  if [ "${SPYRE_REQUIRE_FUSE:-0}" = 1 ]; then
    echo "/dev/fuse is not usable (SPYRE_REQUIRE_FUSE=1)" >&2
    exit 1
  fi
  echo "skipped: /dev/fuse is not usable" >&2
  exit 77
fi
exec 3>&-
exec "$@"
