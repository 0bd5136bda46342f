#!/bin/sh
# Run a command in a network namespace of its own whose only interface is loopback, so that
# no connection of what a bench starts (servers, Chromium, snapshotd and its egress guard,
# prerender) leaves 127.0.0.0/8 and ::1, and a name resolved through DNS fails at once (a
# resolver reached through a local socket, such as systemd-resolved or nscd, is still asked):
#   sh bench/loopback.sh .venv/bin/python bench/bench_apps.py --rounds 1
# It needs util-linux's unshare (2.38 or later) and iproute2's ip. As another user than root
# it makes a user namespace too (unshare -r, where the kernel allows that), and runs the
# command as that same user inside it, so what a bench decides by its user (Chromium's
# sandbox, nginx's user) is decided as outside. BENCH_NETWORK=host runs the command as it is,
# on the machine's network, for a machine that cannot make the namespace.
set -e
[ $# -gt 0 ] || { echo "usage: sh bench/loopback.sh COMMAND [ARG...]" >&2; exit 2; }
if [ "${BENCH_NETWORK:-}" = host ]; then
    echo "bench/loopback.sh: BENCH_NETWORK=host: on the machine's network" >&2
    exec "$@"
fi
uid=$(id -u) gid=$(id -g)
if [ "$uid" = 0 ]; then
    as_root= as_user=
else
    as_root=-r as_user="unshare --map-user=$uid --map-group=$gid --"
fi
if ! unshare $as_root --net -- sh -c "ip link set lo up && $as_user true" 2>/dev/null; then
    echo "bench/loopback.sh: cannot make a loopback-only network namespace here (unshare" \
        "$as_root --net, ip link set lo up); BENCH_NETWORK=host runs the bench on the" \
        "machine's network, where it then must not reach past loopback" >&2
    exit 1
fi
exec unshare $as_root --net -- sh -c "ip link set lo up && exec $as_user \"\$@\"" sh "$@"
