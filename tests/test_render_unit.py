"""Renderer parts that need no browser: finding Chromium, the egress guard, site lookup."""

from __future__ import annotations

import asyncio
import stat
import struct
from pathlib import Path

import pytest

from snapshotd.cli.capture import site_for_url
from snapshotd.config.settings import BrowserSettings, Settings, SiteSettings
from snapshotd.render import ChromiumNotFound, find_chromium
from snapshotd.render.guard import EgressGuard
from snapshotd.render.pauses import Pauses

# ------------------------------------------------------------------------ finding Chromium


def fake_binary(path: Path) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/sh\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return str(path)


def test_discovery_order(tmp_path: Path) -> None:
    configured = fake_binary(tmp_path / "configured" / "chrome")
    from_env = fake_binary(tmp_path / "env" / "chrome")
    on_path = fake_binary(tmp_path / "bin" / "chromium-browser")
    home = tmp_path / "home"
    own = fake_binary(home / ".cache/ms-playwright/chromium-1200/chrome-linux64/chrome")
    fake_binary(home / ".cache/ms-playwright/chromium-999/chrome-linux/chrome")
    env = {"SNAPSHOTD_CHROMIUM": from_env, "PATH": str(tmp_path / "bin"), "HOME": str(home)}
    assert find_chromium(BrowserSettings(executable=configured), env) == configured
    assert find_chromium(BrowserSettings(), env) == from_env
    del env["SNAPSHOTD_CHROMIUM"]
    assert find_chromium(BrowserSettings(), env) == on_path
    fake_binary(tmp_path / "bin" / "chromium")
    shell = fake_binary(tmp_path / "bin" / "chromium-headless-shell")
    assert find_chromium(BrowserSettings(), env) == shell
    env["PATH"] = str(tmp_path / "nothing")
    assert find_chromium(BrowserSettings(), env) == own


def test_missing_chromium_is_one_clear_line(tmp_path: Path) -> None:
    env = {"PATH": str(tmp_path), "HOME": str(tmp_path)}
    with pytest.raises(ChromiumNotFound) as info:
        find_chromium(BrowserSettings(), env)
    assert "\n" not in str(info.value) and "SNAPSHOTD_CHROMIUM" in str(info.value)
    with pytest.raises(ChromiumNotFound, match="browser.executable: /no/such/chromium"):
        find_chromium(BrowserSettings(executable="/no/such/chromium"), env)
    env["SNAPSHOTD_CHROMIUM"] = str(tmp_path / "missing")
    with pytest.raises(ChromiumNotFound, match="SNAPSHOTD_CHROMIUM"):
        find_chromium(BrowserSettings(), env)


# ------------------------------------------------------------------------ site lookup


def test_site_for_url() -> None:
    shop = SiteSettings(name="shop", origin="http://127.0.0.1:3000")
    settings = Settings(sites=(shop,))
    assert site_for_url("http://127.0.0.1:3000/items/1", settings) is shop
    other = site_for_url("http://127.0.0.1:3001/x", settings)
    assert other.origin == "http://127.0.0.1:3001" and other is not shop
    assert site_for_url("HTTP://Example.COM:80/", settings).origin == "http://example.com"


def test_site_for_url_takes_a_site_only_on_its_origin() -> None:
    """A capture may reach its site's origin: a URL on one of the site's host names, or on
    its host with another scheme, is captured as an ad-hoc site of its own origin."""
    shop = SiteSettings(name="shop", origin="http://127.0.0.1:3000", hosts=("shop.test",))
    settings = Settings(sites=(shop,))
    assert settings.site_for_url("http://shop.test/x") is shop
    assert site_for_url("http://shop.test/x", settings).origin == "http://shop.test"
    assert site_for_url("https://127.0.0.1:3000/x", settings).name == "adhoc"
    assert site_for_url("http://user@127.0.0.1:3000/x", settings) is shop


# ------------------------------------------------------------------------ the egress guard


async def socks_connect(
    proxy: str, host: str, port: int
) -> tuple[int, asyncio.StreamReader, asyncio.StreamWriter]:
    """Open a SOCKS5 CONNECT through ``proxy``; the reply code and the open streams."""
    proxy_port = int(proxy.rsplit(":", 1)[1])
    reader, writer = await asyncio.open_connection("127.0.0.1", proxy_port)
    writer.write(b"\x05\x01\x00")
    assert await reader.readexactly(2) == b"\x05\x00"
    name = host.encode()
    writer.write(b"\x05\x01\x00\x03" + bytes([len(name)]) + name + struct.pack("!H", port))
    reply = await reader.readexactly(10)
    return reply[1], reader, writer


@pytest.fixture
async def echo_servers():
    async def echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(await reader.read(100))
        await writer.drain()
        writer.close()

    servers = [await asyncio.start_server(echo, "127.0.0.1", 0) for _ in range(2)]
    yield [s.sockets[0].getsockname()[1] for s in servers]
    for s in servers:
        s.close()
        await s.wait_closed()


async def test_guard_relays_to_the_origin_only(echo_servers: list[int]) -> None:
    own, other = echo_servers
    guard = EgressGuard(f"http://127.0.0.1:{own}")
    await guard.start()
    try:
        code, reader, writer = await socks_connect(guard.proxy_server, "127.0.0.1", own)
        assert code == 0
        writer.write(b"ping")
        assert await reader.read(100) == b"ping"
        writer.close()
        for host, port in (("127.0.0.1", other), ("127.0.0.2", own), ("localhost", own)):
            code, _, writer = await socks_connect(guard.proxy_server, host, port)
            assert code == 2  # connection not allowed by ruleset
            writer.close()
        assert len(guard.refused) == 3
    finally:
        await guard.close()


async def test_guard_judges_what_a_name_resolves_to() -> None:
    answers = {
        "internal.example": ["10.0.0.7"],
        "mixed.example": ["93.184.216.34", "::1"],
        "public.example": ["93.184.216.34"],
        "shop.internal": ["192.168.1.9"],
    }

    async def resolve(host: str, port: int) -> list[str]:
        if host not in answers:
            raise OSError("no such name")
        return answers[host]

    guard = EgressGuard("http://shop.internal:8080", resolve=resolve)
    reason, _ = await guard.judge("internal.example", 80)
    assert reason == "internal.example resolves to private address 10.0.0.7"
    reason, _ = await guard.judge("mixed.example", 443)
    assert reason is not None and "loopback" in reason
    assert await guard.judge("public.example", 443) == (None, ["93.184.216.34"])
    # the site's own origin may live at a private address; its other ports may not
    assert await guard.judge("shop.internal", 8080) == (None, ["192.168.1.9"])
    reason, _ = await guard.judge("shop.internal", 22)
    assert reason is not None and "private" in reason
    reason, _ = await guard.judge("nowhere.example", 80)
    assert reason is not None and reason.startswith("cannot resolve")
    reason, _ = await guard.judge("169.254.169.254", 80)
    assert reason is not None and "metadata" in reason


@pytest.mark.parametrize("loop", ["asyncio", "uvloop"])
def test_guard_pump_stops_quietly_when_the_other_side_closed_first(loop: str) -> None:
    """``serve`` runs on uvloop, whose transports raise on writing to a closed connection
    where asyncio's only warn: a copy whose far side already closed ends without an error."""
    import uvloop

    from snapshotd.render.guard import _pump

    async def scenario() -> None:
        accepted: asyncio.Queue[tuple[asyncio.StreamReader, asyncio.StreamWriter]]
        accepted = asyncio.Queue()
        server = await asyncio.start_server(
            lambda r, w: accepted.put_nowait((r, w)), "127.0.0.1", 0
        )
        port = server.sockets[0].getsockname()[1]
        source_writer = (await asyncio.open_connection("127.0.0.1", port))[1]
        source_reader, source_end = await accepted.get()
        _, far_writer = await asyncio.open_connection("127.0.0.1", port)
        _, far_end = await accepted.get()
        far_writer.close()  # the far side went away while data is still coming
        source_writer.write(b"late bytes")
        source_writer.write_eof()
        try:
            await asyncio.wait_for(_pump(source_reader, far_writer), 5)
        finally:
            for writer in (source_writer, source_end, far_end):
                writer.close()
            server.close()
            await server.wait_closed()

    factory = uvloop.new_event_loop if loop == "uvloop" else asyncio.new_event_loop
    with asyncio.Runner(loop_factory=factory) as runner:
        runner.run(scenario())


def _paused(kind: str, url: str, headers: dict[str, str] | None = None) -> dict[str, object]:
    return {"requestId": "r1", "resourceType": kind,
            "request": {"url": url, "headers": headers or {"Accept": "*/*"}}}


def test_pauses_name_only_what_the_cache_could_answer_and_what_is_blocked() -> None:
    pauses = Pauses(("image", "media"))
    assert pauses.patterns() == [
        {"urlPattern": "*", "resourceType": k, "requestStage": "Request"}
        for k in ("Image", "Media")
    ]
    pauses.remember("http://a.test/items/1#!/x", "document")
    pauses.remember("http://a.test/api?q=*", "fetch")
    pauses.remember("http://a.test/app.js", "script")
    pauses.remember("http://a.test/logo.png", "image")  # blocked: never in the cache
    pauses.remember("http://a.test/clip.mp4", "media")  # blocked too
    urls = {p["urlPattern"]: p.get("resourceType") for p in pauses.patterns()[2:]}
    assert urls["http://a.test/items/1"] is None  # a document: whatever it is asked for as
    assert urls[r"http://a.test/api\?q=\*"] is None
    script = [p for p in pauses.patterns() if p["urlPattern"] == "http://a.test/app.js"]
    assert {p["resourceType"] for p in script} >= {"Document", "XHR", "Fetch"}
    assert "Script" not in {p["resourceType"] for p in script}
    assert not any("logo" in p["urlPattern"] or "clip" in p["urlPattern"]
                   for p in pauses.patterns())
    pauses.forget()
    assert len(pauses.patterns()) == 2


def test_pauses_answer_marks_documents_and_data_and_adds_custom_headers_on_the_origin() -> None:
    pauses = Pauses(("image",))
    pauses.origin, pauses.headers = "http://a.test", {"X-Token": "t"}
    command, params = pauses.answer(_paused("Image", "http://a.test/x.png"))
    assert (command, params) == (
        "Fetch.failRequest", {"requestId": "r1", "errorReason": "BlockedByClient"}
    )
    command, params = pauses.answer(_paused("XHR", "http://a.test/api", {"cache-control": "x"}))
    assert command == "Fetch.continueRequest"
    assert {(h["name"], h["value"]) for h in params["headers"]} == {
        ("X-Token", "t"), ("Cache-Control", "no-cache"), ("Pragma", "no-cache")
    }
    _, params = pauses.answer(_paused("Script", "http://other.test/lib.js"))
    assert params["headers"] == [{"name": "Accept", "value": "*/*"}]
    assert pauses.patterns()[-1] == {"urlPattern": "http://a.test/*", "requestStage": "Request"}


def test_pauses_put_the_header_agent_on_what_chromium_sends_with_the_pages() -> None:
    pauses = Pauses(())
    assert pauses.patterns() == []
    pauses.origin, pauses.agent = "http://a.test", "Browser/1"
    assert pauses.patterns() == [
        {"urlPattern": "*", "resourceType": k, "requestStage": "Request"}
        for k in ("Document", "Other")
    ]
    for url in ("http://a.test/", "http://other.test/frame"):
        _, params = pauses.answer(_paused("Document", url, {"User-Agent": "Googlebot/2.1"}))
        agents = [h["value"] for h in params["headers"] if h["name"].lower() == "user-agent"]
        assert agents == ["Browser/1"]
    # A site's own custom header wins on its origin.
    pauses.headers = {"user-agent": "Mine/1"}
    _, params = pauses.answer(_paused("Other", "http://a.test/w.js", {"User-Agent": "G"}))
    assert [h["value"] for h in params["headers"] if h["name"].lower() == "user-agent"] == [
        "Mine/1"
    ]
