#!/bin/sh
# Make sure a Chromium exists, in the order SPEC.md section 1 gives.
set -e
if [ -n "$SNAPSHOTD_CHROMIUM" ] && [ -x "$SNAPSHOTD_CHROMIUM" ]; then exit 0; fi
for b in chromium-headless-shell chromium chromium-browser; do
  if command -v "$b" >/dev/null 2>&1; then exit 0; fi
done
if python -c 'from playwright.sync_api import sync_playwright
with sync_playwright() as p:
    import os, sys; sys.exit(0 if os.path.exists(p.chromium.executable_path) else 1)' 2>/dev/null; then
  exit 0
fi
echo "snapshotd: no Chromium found; trying Playwright's own browser" >&2
if python -m playwright install chromium >/dev/null 2>&1; then exit 0; fi
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  echo "snapshotd: installing Debian's chromium-headless-shell with apt-get" >&2
  apt-get update -qq
  # The headless shell is packaged from Debian 12's security updates on; chromium otherwise.
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium-headless-shell >/dev/null 2>&1 \
    || DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
  exit 0
fi
echo "snapshotd: no Chromium; set SNAPSHOTD_CHROMIUM or install chromium" >&2
exit 1
