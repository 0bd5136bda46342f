"""The recipes' X-Forwarded-For, through Debian's nginx and Apache httpd on loopback ports:
snapshotd, trusting the front server's address, judges a crawler by the address of the
client that reached the front server (each client binds its own 127.0.0.x), never by what
the client wrote in the header.

snapshotd runs on uvicorn with real SQLite, a renderer that serves a fixed page, and a table
resolver: 127.0.0.7 is a verified Googlebot, 127.0.0.8 a spoofer.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator

import httpx
import pytest

from tests.front import apache, free_port, nginx, recipe
from tests.servers import serve_asgi
from tests.test_verified_bots import SPOOFER, VERIFIED, _origin, verified_env

HOST = "shop.test"


def _hostport(url: str) -> str:
    return url.split("://", 1)[1]


@pytest.fixture(params=["nginx", "apache"])
def through_front(request, tmp_path) -> Iterator[tuple[str, object]]:
    kind = request.param
    with serve_asgi(_origin()) as app, verified_env(
        tmp_path, crawler=False, new_paths_per_minute=1, trusted_proxies=("127.0.0.1",),
        hosts=(HOST,),
    ) as env:
        port = free_port()
        values = {
            "LISTEN": f"127.0.0.1:{port}", "SERVER_NAME": HOST, "APP": _hostport(app),
            "SNAPSHOTD": _hostport(env.base),
        }
        if kind == "nginx":
            front = nginx(recipe("nginx.conf", **values), port)
        else:
            front = apache(f"Listen 127.0.0.1:{port}\n{recipe('apache.conf', **values)}", port)
        with front:
            yield f"http://127.0.0.1:{port}", env


def _client(base: str, source: str) -> httpx.Client:
    return httpx.Client(
        base_url=base, timeout=30, trust_env=False,
        transport=httpx.HTTPTransport(local_address=source),
        headers={"Host": HOST, "User-Agent": "Mozilla/5.0 (compatible; Googlebot/2.1)"},
    )


def test_the_recipes_forward_the_clients_address_and_a_forged_header_is_not_believed(
    through_front, caplog
):
    front, env = through_front
    with caplog.at_level(logging.INFO, logger="snapshotd.access"):
        with _client(front, VERIFIED) as client:
            # Past new_paths_per_minute (1): only a verified crawler gets every page.
            results = [client.get(f"/v{i}").headers.get("x-snapshotd-cache") for i in range(3)]
        with _client(front, SPOOFER) as client:
            forged = {"X-Forwarded-For": VERIFIED}
            spoofed = [
                client.get(f"/s{i}", headers=forged).headers.get("x-snapshotd-cache")
                for i in range(2)
            ]
    assert results == ["MISS"] * 3
    assert spoofed == ["MISS", "BYPASS"]
    lines = [r.getMessage() for r in caplog.records if r.name == "snapshotd.access"]
    assert [line.rsplit(" ", 2)[1:] for line in lines] == [
        ["verified", VERIFIED]] * 3 + [["unverified", SPOOFER], ["refused", SPOOFER]]
