"""Where a connection made for a site may go: a name resolved once, every address judged.

Both ways snapshotd reaches the network use :func:`judge` before they connect: the browser's
egress guard (:mod:`snapshotd.render.guard`) and the process's own HTTP fetches
(:mod:`snapshotd.net.fetch`). Invariants:

- the host is judged by :func:`snapshotd.net.address_policy.check_host` with the site's origin;
- a name is resolved here, once, and refused when any address it resolves to is refused by
  :func:`snapshotd.net.address_policy.check_address`, unless ``host:port`` is the site's origin
  itself (which may live at a private address);
- the caller connects only to the addresses returned, so nothing resolves the name again
  between the judgment and the connection.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from collections.abc import Awaitable, Callable

from snapshotd.net.address_policy import check_address, check_host, is_origin, parse_host

__all__ = ["Resolver", "judge", "resolve_host"]

Resolver = Callable[[str, int], Awaitable[list[str]]]


async def resolve_host(host: str, port: int) -> list[str]:
    """Addresses of ``host`` from the system resolver."""
    loop = asyncio.get_running_loop()
    infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return list(dict.fromkeys(str(info[4][0]) for info in infos))


async def judge(
    host: str, port: int, origin: str, resolve: Resolver = resolve_host
) -> tuple[str | None, list[str]]:
    """(reason refused or None, addresses to connect to) for ``host:port`` of a site at
    ``origin``."""
    reason = check_host(host, port, origin)
    if reason is not None:
        return reason, []
    parsed = parse_host(host)
    if not isinstance(parsed, str):
        return None, [str(parsed)]
    # The origin's own name may resolve to a private address: that is the point of it.
    own = is_origin(host, port, origin)
    try:
        addresses = await resolve(parsed, port)
    except OSError as exc:
        return f"cannot resolve {parsed}: {exc.strerror or exc}", []
    if not addresses:
        return f"cannot resolve {parsed}", []
    if not own:
        for address in addresses:
            why = check_address(ipaddress.ip_address(address.split("%")[0]))
            if why is not None:
                return f"{parsed} resolves to {why}", []
    return None, addresses
