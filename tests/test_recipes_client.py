"""The recipes' X-Forwarded-For, through Debian's nginx, Apache httpd, Caddy and HAProxy on
loopback ports: snapshotd, run as each recipe says (its `snapshotd serve` line, trusting the
front server's address), judges a crawler by the address of the client that reached the
front server (each client binds its own 127.0.0.x), never by what the client wrote in the
header; run without trusting it, snapshotd says so once in its log.

snapshotd runs on uvicorn with real SQLite, a renderer that serves a fixed page, and a table
resolver: 127.0.0.7 is a verified Googlebot, 127.0.0.8 a spoofer.
"""

from __future__ import annotations

import logging
import shlex
from collections.abc import Iterator

import httpx
import pytest

from snapshotd.cli.common import settings_of
from snapshotd.cli.parser import build_parser
from snapshotd.recipes import RECIPE_FILES
from tests.chromium import wait_until
from tests.front import apache, caddy, free_port, haproxy, nginx, recipe
from tests.servers import serve_asgi
from tests.test_verified_bots import SPOOFER, VERIFIED, _origin, verified_env

HOST = "shop.test"


def _hostport(url: str) -> str:
    return url.split("://", 1)[1]


def documented_trust(kind: str, app: str) -> tuple[str, ...]:
    """``trusted_proxies`` as the recipe's own ``snapshotd serve`` line sets it."""
    text = recipe(RECIPE_FILES[kind], LISTEN="-", SERVER_NAME=HOST, APP=app, SNAPSHOTD="-")
    (line,) = [x for x in text.splitlines() if x.lstrip("# ").startswith("snapshotd serve")]
    argv = shlex.split(line.lstrip("# "))[1:]
    return settings_of(build_parser().parse_args(argv)).trusted_proxies


def _front(kind: str, port: int, app: str, snapshotd: str):  # type: ignore[no-untyped-def]
    values = {"SERVER_NAME": HOST, "APP": _hostport(app), "SNAPSHOTD": _hostport(snapshotd)}
    if kind == "nginx":
        return nginx(recipe("nginx.conf", LISTEN=f"127.0.0.1:{port}", **values), port)
    if kind == "caddy":
        return caddy(recipe("Caddyfile", LISTEN=f"http://{HOST}:{port}", **values), port)
    if kind == "haproxy":
        return haproxy(recipe("haproxy.cfg", LISTEN=f"127.0.0.1:{port}", **values), port)
    vhost = recipe("apache.conf", LISTEN=f"127.0.0.1:{port}", **values)
    return apache(f"Listen 127.0.0.1:{port}\n{vhost}", port)


@pytest.fixture(params=sorted(RECIPE_FILES))
def through_front(request, tmp_path) -> Iterator[tuple[str, object]]:
    kind = request.param
    with serve_asgi(_origin()) as app:
        trusted = documented_trust(kind, _hostport(app))
        assert trusted == ("127.0.0.1",), (kind, trusted)
        with verified_env(
            tmp_path, crawler=False, new_paths_per_minute=1, trusted_proxies=trusted,
            hosts=(HOST,),
        ) as env:
            port = free_port()
            with _front(kind, port, app, env.base):
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
        # Access lines are written at the end of the server's event-loop turn, which on a
        # loaded machine may come after the client has its answer.
        def access() -> list[str]:
            return [r.getMessage() for r in caplog.records if r.name == "snapshotd.access"]

        wait_until(lambda: len(access()) >= 5, 30)
    assert results == ["MISS"] * 3
    assert spoofed == ["MISS", "BYPASS"]
    lines = access()
    assert [line.rsplit(" ", 2)[1:] for line in lines] == [
        ["verified", VERIFIED]] * 3 + [["unverified", SPOOFER], ["refused", SPOOFER]]


def test_serve_says_once_that_it_does_not_trust_the_front_server_that_forwards(
    tmp_path, caplog
) -> None:
    """Run without --trusted-proxies behind a recipe: every crawler seems to be the front
    server; the log says why, once."""
    with serve_asgi(_origin()) as app, verified_env(
        tmp_path, crawler=False, hosts=(HOST,)
    ) as env:
        port = free_port()
        with _front("haproxy", port, app, env.base), caplog.at_level(
            logging.INFO, logger="snapshotd"
        ):
            with _client(f"http://127.0.0.1:{port}", VERIFIED) as client:
                for i in range(3):
                    client.get(f"/u{i}")
    told = [r for r in caplog.records if "not in trusted_proxies" in r.getMessage()]
    assert len(told) == 1, [r.getMessage() for r in caplog.records]
    assert "127.0.0.1" in told[0].getMessage() and told[0].levelno == logging.WARNING
    lines = [r.getMessage() for r in caplog.records if r.name == "snapshotd.access"]
    assert lines and all(line.endswith("unverified 127.0.0.1") for line in lines), lines
