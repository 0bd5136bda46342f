#!/bin/sh
# Tools some tests compare against: Apache httpd with mod_rewrite (the rules engine's ground
# truth). Installed when root on Debian; without it those tests use their recorded table.
if [ -x /usr/sbin/apache2 ]; then exit 0; fi
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  echo "snapshotd: installing apache2 for the rules comparison tests" >&2
  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq apache2 >/dev/null) \
    || echo "snapshotd: apache2 could not be installed; its live comparison will be skipped" >&2
fi
exit 0
