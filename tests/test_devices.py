"""Rendering as the crawler renders: device profiles, the tall viewport and the crawler's user
agent, in real Chromium against an origin on loopback."""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
import sys
import threading
from collections.abc import AsyncIterator, Iterator
from dataclasses import replace

import pytest
import pytest_asyncio
from pytest_httpserver import HTTPServer
from werkzeug.wrappers import Request, Response

from snapshotd.config.loading import site_from_mapping
from snapshotd.config.settings import BrowserSettings, SiteSettings
from snapshotd.config.values import ConfigError
from snapshotd.crawlers.devices import PROFILES, profile_for_agent, profiles_served, served_profile
from snapshotd.render import BrowserPool
from tests.chromium import page_handler, recording, require_chromium

# The user agents the crawlers document for themselves.
GOOGLEBOT_SMARTPHONE = (
    "Mozilla/5.0 (Linux; Android 6.0.1; Nexus 5X Build/MMB29P) AppleWebKit/537.36 (KHTML, "
    "like Gecko) Chrome/131.0.6778.85 Mobile Safari/537.36 (compatible; Googlebot/2.1; "
    "+http://www.google.com/bot.html)"
)
GOOGLEBOT_DESKTOP = (
    "Mozilla/5.0 AppleWebKit/537.36 (KHTML, like Gecko; compatible; Googlebot/2.1; "
    "+http://www.google.com/bot.html) Chrome/131.0.6778.85 Safari/537.36"
)
BINGBOT_MOBILE = (
    "Mozilla/5.0 (iPhone; CPU iPhone OS 7_0 like Mac OS X) AppleWebKit/537.51.1 (KHTML, like "
    "Gecko) Version/7.0 Mobile/11A465 Safari/9537.53 (compatible; bingbot/2.0; "
    "+http://www.bing.com/bingbot.htm)"
)
BINGBOT_DESKTOP = (
    "Mozilla/5.0 AppleWebKit/537.36 (KHTML, like Gecko; compatible; bingbot/2.0; "
    "+http://www.bing.com/bingbot.htm) Chrome/116.0.1938.76 Safari/537.36"
)
FACEBOOK = "facebookexternalhit/1.1 (+http://www.facebook.com/externalhit_uatext.php)"
SLACK = "Slackbot-LinkExpanding 1.0 (+https://api.slack.com/robots)"


@pytest.mark.parametrize(
    ("agent", "profile"),
    [
        (GOOGLEBOT_SMARTPHONE, "mobile"),
        (BINGBOT_MOBILE, "mobile"),
        (GOOGLEBOT_DESKTOP, "desktop"),
        (BINGBOT_DESKTOP, "desktop"),
        (FACEBOOK, "desktop"),
        (SLACK, "desktop"),
    ],
)
def test_a_bot_gets_the_profile_its_user_agent_presents(agent: str, profile: str) -> None:
    assert profile_for_agent(agent) == profile
    assert served_profile("per_bot", agent) == profile
    assert served_profile("desktop", agent) == "desktop"
    assert served_profile("mobile", agent) == "mobile"


def test_a_site_keeps_both_profiles_per_bot_or_the_one_it_serves_all() -> None:
    assert profiles_served("per_bot") == ("mobile", "desktop")
    assert profiles_served("mobile") == ("mobile",)
    assert profiles_served("desktop") == ("desktop",)


def test_device_settings_are_checked() -> None:
    site = site_from_mapping({"origin": "http://127.0.0.1:1", "devices": "mobile"})
    assert (site.devices, site.viewport_height_mobile, site.viewport_height_desktop) == (
        "mobile", 12000, 9000,
    )
    with pytest.raises(ConfigError, match="devices"):
        site_from_mapping({"origin": "http://127.0.0.1:1", "devices": "tablet"})
    with pytest.raises(ConfigError, match="viewport_height_mobile"):
        site_from_mapping({"origin": "http://127.0.0.1:1", "viewport_height_mobile": 10})
    with pytest.raises(ConfigError, match="user_agent_desktop"):
        site_from_mapping({"origin": "http://127.0.0.1:1", "user_agent_desktop": "a\nb"})


# ------------------------------------------------------------------------ in Chromium

SETTINGS = BrowserSettings(
    concurrency=1, javascript_timeout=1.0, render_timeout=60.0, recycle_after=500,
    block_resources=("media", "font"),
)


class Origin:
    """tests/pages at /p/<name>, lazy data at /data/<name>, images at /img/<name>; every
    request's path and headers recorded."""

    def __init__(self) -> None:
        self.server = HTTPServer(host="127.0.0.1", port=0, threaded=True)
        self.requests: list[tuple[str, dict[str, str]]] = []
        self._lock = threading.Lock()
        pages = page_handler({})

        def record(handler):  # type: ignore[no-untyped-def]
            def handle(request: Request) -> Response:
                with self._lock:
                    self.requests.append((request.path, dict(request.headers)))
                return handler(request)

            return handle

        self.server.expect_request(re.compile(r"^/p/.*")).respond_with_handler(record(pages))
        self.server.expect_request(re.compile(r"^/data/.*")).respond_with_handler(
            record(lambda r: Response(f"{r.path.rsplit('/', 1)[-1]} block loaded"))
        )
        self.server.expect_request(re.compile(r"^/img/.*")).respond_with_handler(
            record(lambda r: Response(b"", content_type="image/png"))
        )

    @property
    def origin(self) -> str:
        return f"http://127.0.0.1:{self.server.port}"

    def paths(self) -> list[str]:
        with self._lock:
            return [p for p, _ in self.requests]

    def headers(self, path: str) -> list[dict[str, str]]:
        with self._lock:
            return [h for p, h in self.requests if p == path]


@pytest.fixture(scope="module")
def origin() -> Iterator[Origin]:
    require_chromium()
    served = Origin()
    served.server.start()
    yield served
    served.server.clear()
    served.server.stop()


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def pool(origin: Origin) -> AsyncIterator[BrowserPool]:
    pool = BrowserPool(SETTINGS, spares=0)
    await pool.start()
    yield pool
    await pool.close()


def _seen(html: str) -> dict[str, object]:
    found = re.search(r'<pre id="seen">(.*?)</pre>', html)
    assert found, html[:2000]
    return json.loads(found.group(1).replace("&quot;", '"').replace("&amp;", "&"))


@pytest.mark.browser
@pytest.mark.asyncio(loop_scope="module")
@pytest.mark.parametrize("profile", ["mobile", "desktop"])
async def test_the_page_sees_the_crawler_of_the_profile_and_its_origin_the_browser(
    pool: BrowserPool, origin: Origin, profile: str
) -> None:
    site = SiteSettings(origin=origin.origin)
    result = await pool.capture(f"{origin.origin}/p/devices_probe?{profile}", site, profile)
    assert result.ok, result
    seen = _seen(result.html)
    expected = PROFILES[profile]
    agent = str(seen["agent"])
    assert "Googlebot/2.1" in agent and "HeadlessChrome" not in agent
    assert ("Mobile" in agent) is (profile == "mobile")
    assert seen["width"] == expected.width
    assert seen["dpr"] == expected.device_scale_factor
    assert seen["coarse"] is expected.has_touch
    assert seen["touch"] is expected.has_touch
    # The origin sees the device's browser, without the crawler's name, and the marks.
    browser = expected.header_agent(pool_version(agent), crawler=False)
    document = origin.headers("/p/devices_probe")[-1]
    assert document["User-Agent"] == browser and "bot" not in browser.lower()
    assert document["X-Snapshotd"] == "1" and document["X-Prerender"] == "1"
    assert origin.headers("/data/near")[-1]["User-Agent"] == browser
    # A site that wants the crawler's user agent at its origin gets it, in the same slot.
    crawler = replace(site, origin_user_agent="crawler")
    result = await pool.capture(f"{origin.origin}/p/devices_probe?{profile}", crawler, profile)
    assert result.ok, result
    assert origin.headers("/p/devices_probe")[-1]["User-Agent"] == agent
    assert origin.headers("/data/near")[-1]["User-Agent"] == agent


def pool_version(agent: str) -> str:
    """The Chromium version a profile's user agent names."""
    found = re.search(r"Chrome/([0-9.]+)", agent)
    assert found, agent
    return found.group(1)


@pytest.mark.browser
@pytest.mark.asyncio(loop_scope="module")
@pytest.mark.parametrize("profile", ["mobile", "desktop"])
async def test_what_the_tall_viewport_shows_loads_and_what_lies_beyond_it_does_not(
    pool: BrowserPool, origin: Origin, profile: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    site = SiteSettings(origin=origin.origin)
    before = len(origin.paths())
    kept = recording(monkeypatch)
    result = await pool.capture(f"{origin.origin}/p/devices_probe", site, profile)
    assert result.ok, result
    # The page said when it drew its first frame, at the normal height, and when it drew two
    # in the tall viewport: the capture waited for the page, not for a bound to run out.
    signals = kept[-1][1]
    assert signals.painted.result() == PROFILES[profile].height and signals.grown.done()
    asked = origin.paths()[before:]
    # Laid out first at the normal height, then in the crawler's tall viewport.
    assert f"first layout height {PROFILES[profile].height}" in result.html
    assert "near block loaded" in result.html
    assert "/img/near.png" in asked
    assert "far block not loaded" in result.html
    assert "/data/far" not in asked and "/img/far.png" not in asked
    seen = _seen(result.html)
    assert seen["scrolls"] == 0 and seen["scrollY"] == 0
    assert seen["height"] == getattr(site, PROFILES[profile].tall_setting)


@pytest.mark.browser
@pytest.mark.asyncio(loop_scope="module")
async def test_a_shorter_site_viewport_leaves_the_block_beyond_it_unloaded(
    pool: BrowserPool, origin: Origin
) -> None:
    site = SiteSettings(origin=origin.origin, viewport_height_mobile=1000)
    result = await pool.capture(f"{origin.origin}/p/devices_probe?short", site, "mobile")
    assert result.ok, result
    assert "near block not loaded" in result.html
    # At or below the normal height: the page stays in its normal viewport.
    normal = replace(site, viewport_height_mobile=320)
    result = await pool.capture(f"{origin.origin}/p/devices_probe?normal", normal, "mobile")
    assert result.ok, result
    assert "near block not loaded" in result.html
    assert _seen(result.html)["height"] == PROFILES["mobile"].height
    # The next capture of the same slot is tall again.
    tall = replace(site, viewport_height_mobile=12000)
    result = await pool.capture(f"{origin.origin}/p/devices_probe?tall", tall, "mobile")
    assert "near block loaded" in result.html


@pytest.mark.browser
@pytest.mark.asyncio(loop_scope="module")
async def test_a_site_overrides_the_user_agent_of_a_profile(
    pool: BrowserPool, origin: Origin
) -> None:
    site = SiteSettings(origin=origin.origin, user_agent_mobile="ExampleBot/1.0 Mobile")
    result = await pool.capture(f"{origin.origin}/p/devices_probe?own", site, "mobile")
    assert result.ok, result
    assert _seen(result.html)["agent"] == "ExampleBot/1.0 Mobile"
    assert _seen(result.html)["width"] == 412
    assert origin.headers("/p/devices_probe")[-1]["User-Agent"] == "ExampleBot/1.0 Mobile"
    # The same one-slot pool renders the other profile right after, with its own agent.
    result = await pool.capture(f"{origin.origin}/p/devices_probe?back", site, "desktop")
    assert _seen(result.html)["width"] == 1024
    assert "Googlebot" in str(_seen(result.html)["agent"])


def test_capture_refuses_a_device_it_does_not_know_in_one_line() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "snapshotd", "capture", "--device", "tablet", "http://127.0.0.1:9/"],
        capture_output=True, text=True, timeout=60,
    )
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "--device" in proc.stderr and "'tablet'" in proc.stderr


@pytest.mark.browser
@pytest.mark.asyncio(loop_scope="module")
async def test_snapshotd_capture_renders_as_the_device_asked_for(origin: Origin) -> None:
    for device, width in (("mobile", 412), ("desktop", 1024)):
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "snapshotd", "capture", "--device", device,
            f"{origin.origin}/p/devices_probe?cli", stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        out, err = await asyncio.wait_for(proc.communicate(), 60)
        assert proc.returncode == 0, err
        assert _seen(out.decode())["width"] == width
        assert err.decode().rstrip().endswith(f", device {device}")


@pytest.mark.browser
@pytest.mark.asyncio(loop_scope="module")
async def test_a_site_that_opts_in_is_scrolled_to_its_end(
    pool: BrowserPool, origin: Origin
) -> None:
    site = SiteSettings(origin=origin.origin, scroll=True)
    result = await pool.capture(f"{origin.origin}/p/devices_probe?scrolled", site, "mobile")
    assert result.ok, result
    assert "far block loaded" in result.html and "near block loaded" in result.html
    seen = _seen(result.html)
    assert seen["scrolls"] > 0 and seen["scrollY"] > 0


def test_the_origin_sees_the_devices_browser_unless_the_site_says_otherwise() -> None:
    for profile in PROFILES.values():
        page = profile.agent("120.0.1.2")
        header = profile.header_agent("120.0.1.2", crawler=False)
        assert "Googlebot" in page and "bot" not in header.lower()
        assert "Chrome/120.0.1.2" in header
        assert ("Mobile" in header) == profile.is_mobile
        assert profile.header_agent("120.0.1.2", crawler=True) == page
        # A site's own user agent is what the page and the origin see, either way.
        assert profile.header_agent("1", "Mine/1", crawler=False) == "Mine/1"
    assert site_from_mapping({"origin": "http://a.test"}).origin_user_agent == "browser"
    with pytest.raises(ConfigError, match="origin_user_agent"):
        site_from_mapping({"origin": "http://a.test", "origin_user_agent": "bot"})
