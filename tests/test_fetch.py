"""The process's own HTTP fetches (robots.txt, sitemaps) under the address policy.

Every server here is real and on loopback. The refused targets are sentinel servers that
count their hits: one on 127.0.0.2, one on another port of 127.0.0.1 named ``localhost``.
Private, link-local, metadata and public addresses appear only as data for the decision
function and are never contacted.
"""

from __future__ import annotations

import io
import logging
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager

import httpx
import pytest

from snapshotd.cli.crawl import run_crawl
from snapshotd.config.settings import Settings, SiteSettings
from snapshotd.net.egress import judge
from snapshotd.net.fetch import MAX_REDIRECTS, Fetcher, Refused, check_hop, describe
from snapshotd.render.renderer import CaptureResult
from tests.servers import serve_asgi

URLSET = (
    b'<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9"><url><loc>%s</loc></url></urlset>'
)
INDEX = (
    b'<sitemapindex xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">'
    b"<sitemap><loc>%s</loc></sitemap></sitemapindex>"
)


class Sentinel:
    """An ASGI app that answers everything 200 and counts what it was asked."""

    def __init__(self, body: bytes = b"User-agent: *\nDisallow: /\n") -> None:
        self.hits: list[str] = []
        self.body = body

    async def __call__(self, scope, receive, send):  # type: ignore[no-untyped-def]
        assert scope["type"] == "http"
        self.hits.append(scope["path"])
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": self.body})


class Origin:
    """The site: answers with whatever ``routes`` say, (status, headers, body) a path."""

    def __init__(self) -> None:
        self.routes: dict[str, tuple[int, dict[str, str], bytes]] = {}
        self.hits: list[str] = []

    async def __call__(self, scope, receive, send):  # type: ignore[no-untyped-def]
        assert scope["type"] == "http"
        self.hits.append(scope["path"])
        status, headers, body = self.routes.get(scope["path"], (404, {}, b""))
        raw = [(k.lower().encode(), v.encode()) for k, v in headers.items()]
        await send({"type": "http.response.start", "status": status, "headers": raw})
        await send({"type": "http.response.body", "body": body})


class NoRenderer:
    """Nothing is ever queued in these crawls; a capture would say so."""

    def __init__(self) -> None:
        self.captures: list[str] = []

    async def start(self) -> None:
        pass

    async def close(self) -> None:
        pass

    async def capture(
        self, url: str, site: SiteSettings, profile: str = "desktop"
    ) -> CaptureResult:
        self.captures.append(url)
        return CaptureResult(url=url, final_url=url, error="not expected")


@contextmanager
def servers() -> Iterator[tuple[Origin, str, Sentinel, int, Sentinel, int]]:
    """The origin, a sentinel on 127.0.0.2 and a sentinel on another port of 127.0.0.1."""
    origin, far, near = Origin(), Sentinel(), Sentinel()
    with ExitStack() as stack:
        base = stack.enter_context(serve_asgi(origin, lifespan="off"))
        far_base = stack.enter_context(serve_asgi(far, host="127.0.0.2", lifespan="off"))
        near_base = stack.enter_context(serve_asgi(near, lifespan="off"))
        yield (
            origin,
            base,
            far,
            int(far_base.rsplit(":", 1)[1]),
            near,
            int(near_base.rsplit(":", 1)[1]),
        )


async def test_the_crawler_follows_no_redirect_or_child_sitemap_off_its_origin(tmp_path, caplog):
    with servers() as (origin, base, far, far_port, near, near_port):
        elsewhere = f"http://127.0.0.2:{far_port}"
        origin.routes = {
            "/robots.txt": (302, {"Location": f"{elsewhere}/robots.txt"}, b""),
            "/sitemap.xml": (302, {"Location": f"{elsewhere}/sitemap.xml"}, b""),
            "/index.xml": (200, {}, INDEX % f"http://localhost:{near_port}/child.xml".encode()),
        }
        far.body = near.body = URLSET % f"{base}/planted".encode()
        site = SiteSettings(
            name="s",
            origin=base,
            hosts=("localhost",),  # the child sitemap's host is one of the site's names
            seeds=(),
            sitemaps=("/sitemap.xml", "/index.xml"),
        )
        settings = Settings(db=str(tmp_path / "s.db"), sites=(site,))
        caplog.set_level(logging.INFO, logger="snapshotd")
        renderer = NoRenderer()
        status = await run_crawl(
            settings, renderer=renderer, out=io.StringIO(), progress=io.StringIO(), tty=False
        )
    assert far.hits == [] and near.hits == []
    assert sorted(origin.hits) == ["/index.xml", "/robots.txt", "/sitemap.xml"]
    assert renderer.captures == [] and status == 1
    lines = [r.getMessage() for r in caplog.records]
    robots = [line for line in lines if line.startswith("robots.txt")]
    assert robots == [
        f"robots.txt unreachable site=s: refused redirect to {elsewhere}/robots.txt: "
        "loopback address 127.0.0.2"
    ]
    assert (
        f"sitemap site=s {base}/sitemap.xml: refused redirect to {elsewhere}/sitemap.xml: "
        "loopback address 127.0.0.2"
    ) in lines
    assert (
        f"sitemap site=s http://localhost:{near_port}/child.xml: refused: loopback name localhost"
    ) in lines
    assert not any(r.exc_info for r in caplog.records)


# ---------------------------------------------------------------------------- the decision


def _resolver(answers: dict[str, list[str]], asked: list[tuple[str, int]] | None = None):  # type: ignore[no-untyped-def]
    """Name resolution from a table: nothing here ever reaches a DNS server."""

    async def resolve(host: str, port: int) -> list[str]:
        if asked is not None:
            asked.append((host, port))
        if host not in answers:
            raise OSError("no such name")
        return answers[host]

    return resolve


async def test_judge_decides_on_data_alone():
    resolve = _resolver(
        {
            "private.example": ["10.0.0.7"],
            "linklocal.example": ["169.254.1.1"],
            "metadata.example": ["169.254.169.254"],
            "mixed.example": ["93.184.216.34", "fd00::1"],
            "public.example": ["93.184.216.34", "2606:2800:220:1::1"],
            "shop.internal": ["192.168.1.9"],
        }
    )
    origin = "https://shop.internal:8443"

    async def reason(host: str, port: int = 80) -> str | None:
        return (await judge(host, port, origin, resolve))[0]

    assert await reason("private.example") == "private.example resolves to private address 10.0.0.7"
    assert await reason("linklocal.example") == (
        "linklocal.example resolves to link-local address 169.254.1.1"
    )
    assert await reason("metadata.example") == (
        "metadata.example resolves to metadata address 169.254.169.254"
    )
    assert await reason("mixed.example") == "mixed.example resolves to private address fd00::1"
    assert await judge("public.example", 443, origin, resolve) == (
        None,
        ["93.184.216.34", "2606:2800:220:1::1"],
    )
    assert await reason("10.1.2.3") == "private address 10.1.2.3"
    assert await reason("0xa9.254.169.254") == "metadata address 169.254.169.254"
    assert await reason("[::ffff:127.0.0.1]") == "loopback address 127.0.0.1 (in ::ffff:7f00:1)"
    assert await reason("app.localhost") == "loopback name app.localhost"
    assert await reason("nowhere.example") == "cannot resolve nowhere.example: no such name"
    # The site's own origin may be private; another port of the same host is not the origin.
    assert await judge("shop.internal", 8443, origin, resolve) == (None, ["192.168.1.9"])
    assert (
        await reason("shop.internal", 22) == "shop.internal resolves to private address 192.168.1.9"
    )


@pytest.mark.parametrize(
    ("url", "reason"),
    [
        ("http://127.0.0.1:8000/robots.txt", None),  # the origin
        ("https://93.184.216.34/x", None),
        ("http://public.example/sitemap.xml", None),  # a name: judged where it is resolved
        ("http://127.0.0.1:8001/x", "loopback address 127.0.0.1"),
        ("http://2130706433:8000/x", None),  # the origin, written another way
        ("http://10.0.0.1/x", "private address 10.0.0.1"),
        ("http://169.254.169.254/latest/meta-data/", "metadata address 169.254.169.254"),
        ("http://[fe80::1]/x", "link-local address fe80::1"),
        ("http://localhost:8000/x", "loopback name localhost"),
        ("ftp://93.184.216.34/x", "scheme ftp"),
        ("data:text/plain,x", "scheme data"),
        ("javascript:alert(1)", "scheme javascript"),
        ("//93.184.216.34/x", "not an absolute URL"),
    ],
)
def test_each_hop_is_judged_by_the_policy_with_the_site_origin(url, reason):
    assert check_hop(url, "http://127.0.0.1:8000") == reason


# ---------------------------------------------------------------------------- over loopback


async def test_redirects_on_the_origin_are_followed_up_to_the_hop_limit():
    origin = Origin()
    origin.routes = {f"/r{n}": (302, {"Location": f"/r{n + 1}"}, b"") for n in range(10)}
    origin.routes["/r5"] = (200, {}, b"five")
    with serve_asgi(origin, lifespan="off") as base:
        async with Fetcher() as fetcher:
            assert fetcher.max_redirects == MAX_REDIRECTS == 5
            async with fetcher.stream(f"{base}/r0", origin=base) as response:
                assert response.status_code == 200 and await response.aread() == b"five"
            origin.routes["/r5"] = (302, {"Location": "/r6"}, b"")
            origin.hits.clear()
            with pytest.raises(httpx.TooManyRedirects, match="more than 5 redirects"):
                async with fetcher.stream(f"{base}/r0", origin=base):
                    pass
    assert origin.hits == [f"/r{n}" for n in range(6)]


async def test_a_name_is_resolved_once_and_its_judged_address_connected_to():
    asked: list[tuple[str, int]] = []
    seen: list[dict[str, str]] = []

    async def app(scope, receive, send):  # type: ignore[no-untyped-def]
        seen.append({k.decode(): v.decode() for k, v in scope["headers"]})
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})

    # The origin is named localhost, which only the table resolves to 127.0.0.3, where the
    # server listens: the fetch succeeds only by connecting to the address judged.
    with serve_asgi(app, host="127.0.0.3", lifespan="off") as base:
        port = int(base.rsplit(":", 1)[1])
        site = f"http://localhost:{port}"
        resolve = _resolver({"localhost": ["127.0.0.3"]}, asked)
        async with Fetcher(resolve=resolve, headers={"X-Snapshotd": "1"}) as fetcher:
            async with fetcher.stream(f"{site}/robots.txt", origin=site) as response:
                assert await response.aread() == b"ok"
    assert asked == [("localhost", port)]
    assert seen[0]["host"] == f"localhost:{port}" and seen[0]["x-snapshotd"] == "1"


async def test_a_name_resolving_to_a_refused_address_is_not_connected_to():
    with servers() as (origin, base, far, far_port, _near, _near_port):
        hidden = f"http://intranet.test:{far_port}/sitemap.xml"
        origin.routes = {"/sitemap.xml": (302, {"Location": hidden}, b"")}
        resolve = _resolver({"intranet.test": ["127.0.0.2"]})
        async with Fetcher(resolve=resolve) as fetcher:
            with pytest.raises(Refused) as refused:
                async with fetcher.stream(hidden, origin=base):
                    pass
            assert str(refused.value) == (
                "refused: intranet.test resolves to loopback address 127.0.0.2"
            )
            with pytest.raises(Refused) as refused:
                async with fetcher.stream(f"{base}/sitemap.xml", origin=base):
                    pass
            assert describe(refused.value) == (
                "refused: intranet.test resolves to loopback address 127.0.0.2"
            )
    assert far.hits == [] and origin.hits == ["/sitemap.xml"]


async def test_each_site_is_judged_with_its_own_origin():
    with servers() as (origin, base, far, far_port, _near, _near_port):
        # intranet.test:far_port is the origin of another site, at a private address: allowed
        # for that site only, even with a connection to it already open.
        other = f"http://intranet.test:{far_port}"
        resolve = _resolver({"intranet.test": ["127.0.0.2"]})
        async with Fetcher(resolve=resolve) as fetcher:
            async with fetcher.stream(f"{other}/robots.txt", origin=other) as response:
                assert response.status_code == 200
            with pytest.raises(Refused, match="^refused: intranet.test resolves to loopback"):
                async with fetcher.stream(f"{other}/robots.txt", origin=base):
                    pass
    assert far.hits == ["/robots.txt"] and origin.hits == []


async def test_a_refused_redirect_names_its_target_without_user_name_or_password():
    with servers() as (origin, base, far, far_port, _near, _near_port):
        target = f"http://user:s3cret@127.0.0.2:{far_port}/robots.txt"
        origin.routes = {"/robots.txt": (302, {"Location": target}, b"")}
        async with Fetcher() as fetcher:
            with pytest.raises(Refused) as refused:
                async with fetcher.stream(f"{base}/robots.txt", origin=base):
                    pass
    assert far.hits == []
    assert str(refused.value) == (
        f"refused redirect to http://127.0.0.2:{far_port}/robots.txt: loopback address 127.0.0.2"
    )
