"""A page that rendered alike in both device profiles is captured again in one, while its
main text stays what it was: the second render is made only when it can tell something new
(both engines, the capture service over a renderer that counts its renders)."""

from __future__ import annotations

from collections import Counter

from snapshotd.capture.service import CaptureService
from snapshotd.config.settings import Settings, SiteSettings
from snapshotd.render.base import CaptureResult


class Pages:
    """A renderer answering each profile with the page it is told to show."""

    def __init__(self) -> None:
        self.text = {"mobile": "<p>the same words on every screen</p>"}
        self.rendered: Counter[str] = Counter()

    async def capture(
        self, url: str, site: SiteSettings, profile: str = "desktop"
    ) -> CaptureResult:
        self.rendered[profile] += 1
        html = self.text.get(profile, self.text["mobile"])
        return CaptureResult(url=url, final_url=url, status=200, html=f"<body>{html}</body>")


async def _capture(service: CaptureService, store, site: SiteSettings) -> Counter[str]:  # type: ignore[no-untyped-def]
    renderer = service.renderer
    assert isinstance(renderer, Pages)
    before = renderer.rendered.copy()
    await store.enqueue(site.name, "/p", 1, force=True)
    record = await store.claim_path(site.name, "/p", service.owner, 60)
    assert record is not None
    outcome = await service.run(site, record)
    assert outcome.stored
    return renderer.rendered - before


async def test_a_page_alike_in_both_profiles_is_recaptured_in_one_while_its_text_stays(store):  # type: ignore[no-untyped-def]
    site = SiteSettings(name="site", origin="http://127.0.0.1:1")
    pages = Pages()
    service = CaptureService(Settings(sites=(site,)), store, pages)
    # First capture: both profiles, alike, one copy kept.
    assert await _capture(service, store, site) == Counter(mobile=1, desktop=1)
    assert (await store.own_profiles("site", ["/p"]))["/p"] == ("mobile",)
    # Again, the page unchanged: the first profile alone.
    assert await _capture(service, store, site) == Counter(mobile=1)
    # Its main text changed: both again, in case the profiles part now.
    pages.text["mobile"] = "<p>new words, and the desktop page may differ now</p>"
    assert await _capture(service, store, site) == Counter(mobile=1, desktop=1)
    # The desktop page differs: kept apart, and from then on both are rendered every time.
    pages.text["desktop"] = "<p>a wide table of other words</p>"
    pages.text["mobile"] = "<p>a narrow list of words</p>"
    assert await _capture(service, store, site) == Counter(mobile=1, desktop=1)
    assert (await store.own_profiles("site", ["/p"]))["/p"] == ("mobile", "desktop")
    assert await _capture(service, store, site) == Counter(mobile=1, desktop=1)
    desktop = await store.get_snapshot("site", "/p", "desktop")
    assert desktop is not None and "wide table" in desktop.html


async def test_a_site_served_one_profile_renders_it_alone(store):  # type: ignore[no-untyped-def]
    site = SiteSettings(name="site", origin="http://127.0.0.1:1", devices="desktop")
    service = CaptureService(Settings(sites=(site,)), store, Pages())
    assert await _capture(service, store, site) == Counter(desktop=1)
    assert await _capture(service, store, site) == Counter(desktop=1)
