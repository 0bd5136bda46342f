#!/bin/sh
# Tools some tests use: patchelf (a real Chromium and a real Playwright driver made to need a
# missing shared library, for the command line's start-up errors); Apache httpd with
# mod_rewrite and mod_proxy (the rules engine's ground truth, and the front-server recipes),
# nginx, Caddy and HAProxy (the front-server recipes); systemd-analyze and pg_isready (the
# deployment files' tests). Installed when root on Debian; without Apache the rules
# tests use their recorded table.
if ! command -v patchelf >/dev/null 2>&1 && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  echo "snapshotd: installing patchelf for the command-line tests" >&2
  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq patchelf >/dev/null) \
    || echo "snapshotd: patchelf could not be installed; the start-up error tests will fail" >&2
fi
missing=""
[ -x /usr/sbin/apache2 ] || missing="$missing apache2"
[ -x /usr/sbin/nginx ] || missing="$missing nginx"
[ -x /usr/bin/caddy ] || missing="$missing caddy"
[ -x /usr/sbin/haproxy ] || missing="$missing haproxy"
[ -x /usr/bin/systemd-analyze ] || missing="$missing systemd"
[ -x /usr/bin/pg_isready ] || missing="$missing postgresql-client"
if [ -z "$missing" ]; then exit 0; fi
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  echo "snapshotd: installing$missing for the tests that run them" >&2
  # shellcheck disable=SC2086
  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $missing >/dev/null) \
    || echo "snapshotd: $missing could not be installed; their tests will be skipped" >&2
fi
exit 0
