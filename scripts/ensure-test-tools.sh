#!/bin/sh
# Tools some tests use: patchelf (a real Chromium and a real Playwright driver made to need a
# missing shared library, for the command line's start-up errors); Apache httpd with
# mod_rewrite (the rules engine's ground truth; without it those tests use their recorded
# table). Installed when root on Debian.
if ! command -v patchelf >/dev/null 2>&1 && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  echo "snapshotd: installing patchelf for the command-line tests" >&2
  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq patchelf >/dev/null) \
    || echo "snapshotd: patchelf could not be installed; the start-up error tests will fail" >&2
fi
if [ -x /usr/sbin/apache2 ]; then exit 0; fi
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  echo "snapshotd: installing apache2 for the rules comparison tests" >&2
  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq apache2 >/dev/null) \
    || echo "snapshotd: apache2 could not be installed; its live comparison will be skipped" >&2
fi
exit 0
