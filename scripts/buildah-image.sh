#!/bin/sh
# Build the Dockerfile as it is with buildah (no Docker daemon: chroot isolation, vfs
# storage), then start the image's contents with `buildah run` and check them as a user
# would: --version, the HEALTHCHECK command, and a bot's request rendered by the Chromium
# inside the image.
#
#   sh scripts/buildah-image.sh [DEBOOTSTRAP_ROOT]
#
# Run as root, with buildah installed (apt-get install buildah). python:3.11-slim-bookworm
# is stood in for when it cannot be pulled: a Debian bookworm root (made by debootstrap, as
# scripts/check-image.py does; its default place is reused) with Debian's Python 3.11 as
# /usr/local's python, committed under that image's name. Everything started talks to
# loopback only. Takes minutes, so `make test` does not run it.
set -eu
cd "$(dirname "$0")/.."
ROOT=${1:-/var/tmp/snapshotd-image}
B="buildah --storage-driver vfs"
PY=${PYTHON:-.venv/bin/python}
say() { echo "buildah-image: $*"; }

if ! $B inspect --type image docker.io/library/python:3.11-slim-bookworm >/dev/null 2>&1; then
  [ -x "$ROOT/usr/bin/apt-get" ] || debootstrap --variant=minbase bookworm "$ROOT" \
    http://deb.debian.org/debian >/dev/null
  say "making the stand-in for python:3.11-slim-bookworm from $ROOT"
  base=$($B from scratch)
  mnt=$($B mount "$base")
  cp -a "$ROOT/." "$mnt/"
  # The build trusts what this host trusts (a proxy's CA for PyPI, say).
  if [ -d /usr/local/share/ca-certificates ]; then
    mkdir -p "$mnt/usr/local/share/ca-certificates"
    cp -a /usr/local/share/ca-certificates/. "$mnt/usr/local/share/ca-certificates/"
  fi
  $B umount "$base" >/dev/null
  $B config --env PATH=/usr/local/bin:/usr/local/sbin:/usr/sbin:/usr/bin:/sbin:/bin \
    --env LANG=C.UTF-8 --env PIP_CERT=/etc/ssl/certs/ca-certificates.crt \
    --cmd python3 "$base"
  $B run --isolation chroot "$base" -- sh -c "apt-get update -qq \
    && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
       python3 python3-venv ca-certificates >/dev/null \
    && update-ca-certificates >/dev/null 2>&1; python3 -m venv /usr/local \
    && /usr/local/bin/pip install -q --upgrade pip && rm -rf /var/lib/apt/lists/*"
  $B commit --rm "$base" docker.io/library/python:3.11-slim-bookworm >/dev/null
fi

say "buildah bud (chroot isolation) of ./Dockerfile"
$B bud --isolation chroot --pull-never --layers --format docker -t localhost/snapshotd:check -f Dockerfile . \
  > /var/tmp/buildah-image-build.log 2>&1 || {
  tail -20 /var/tmp/buildah-image-build.log; say "FAILED: the build"; exit 1; }
say "built localhost/snapshotd:check; layers: $($B inspect --format '{{len .OCIv1.RootFS.DiffIDs}}' localhost/snapshotd:check)"

ctr=$($B from localhost/snapshotd:check)
origin_port=$($PY -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
port=$($PY -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
$PY -m examples.spa --port "$origin_port" >/dev/null 2>&1 &
origin=$!
run() { $B run --isolation chroot --user snapshotd --env SNAPSHOTD_HOST=127.0.0.1 \
  --env SNAPSHOTD_PORT="$port" --env SNAPSHOTD_ORIGIN="http://127.0.0.1:$origin_port" \
  --env SNAPSHOTD_API_TOKEN=check-image "$ctr" -- "$@"; }
# Stop a process and every process started under it, by their ids (read from /proc), never
# by a name: other snapshotd processes may run on this host.
stop_tree() { $PY scripts/stop-tree.py "$1"; }
cleanup() {
  [ -n "${serve:-}" ] && stop_tree "$serve"
  kill "$origin" 2>/dev/null || true
  $B rm "$ctr" >/dev/null 2>&1 || true
}
trap cleanup EXIT
say "snapshotd --version in the image: $(run snapshotd --version)"
run /usr/bin/tini -s -- snapshotd serve > /var/tmp/buildah-image-serve.log 2>&1 &
serve=$!
healthcheck=$($B inspect --format '{{index .Docker.Config.Healthcheck.Test 1}}' localhost/snapshotd:check)
i=0
until run sh -c "$healthcheck" >/dev/null 2>&1; do
  i=$((i + 1)); [ $i -lt 60 ] || { cat /var/tmp/buildah-image-serve.log; say "FAILED: never healthy"; exit 1; }
  sleep 1
done
say "HEALTHCHECK command ($healthcheck): healthy"
answer=$($PY - "$port" <<'EOF'
import sys, urllib.request
req = urllib.request.Request(f"http://127.0.0.1:{sys.argv[1]}/items/3",
                             headers={"User-Agent": "Mozilla/5.0 (compatible; Googlebot/2.1)"})
with urllib.request.urlopen(req, timeout=90) as r:
    body = r.read().decode()
    print(r.headers.get("X-Snapshotd-Cache"), "Item 3" in body and "<script" not in body.lower())
EOF
)
say "bot request through the image's proxy: X-Snapshotd-Cache and rendered: $answer"
grep -m1 "launched chromium" /var/tmp/buildah-image-serve.log | sed 's/^/buildah-image: serve: /'
[ "$answer" = "MISS True" ] || [ "$answer" = "HIT True" ]
