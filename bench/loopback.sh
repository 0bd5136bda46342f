#!/bin/sh
# Run a command in a network namespace of its own whose only interface is loopback, so that
# what a bench starts (servers, Chromium, snapshotd and its egress guard, prerender) reaches
# 127.0.0.0/8 and ::1 alone, and a name anything resolves fails at once instead of asking
# the machine's resolver:
#   sh bench/loopback.sh .venv/bin/python bench/bench_apps.py --rounds 1
# As root it needs util-linux's unshare and iproute2's ip; as another user, a kernel that
# lets it map itself to root in a new user namespace (unshare -r).
set -e
[ $# -gt 0 ] || { echo "usage: sh bench/loopback.sh COMMAND [ARG...]" >&2; exit 2; }
if [ "$(id -u)" = 0 ]; then as_root=; else as_root=-r; fi
if ! unshare $as_root --net true 2>/dev/null; then
    echo "bench/loopback.sh: cannot make a network namespace here (unshare $as_root --net);" \
        "run the bench directly, on a machine whose network you may use" >&2
    exit 1
fi
exec unshare $as_root --net -- sh -c 'ip link set lo up && exec "$@"' sh "$@"
