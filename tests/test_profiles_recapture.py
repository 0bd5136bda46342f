"""Which device profiles a capture renders (capture/profiles): a page that read nothing of its
device is rendered once, some of them checked in both; a page that read something of it
and rendered alike in both is captured again in one while its main text stays what it was
(both engines, the capture service over a renderer that counts its renders and says what
each page read of its device, as the real probe does: tests/test_device_probe.py)."""

from __future__ import annotations

import asyncio
from collections import Counter

from snapshotd.capture.profiles import CHECK_ONE_IN, LEARN_AFTER, kind_key, kind_of
from snapshotd.capture.service import CaptureService
from snapshotd.config.settings import Settings, SiteSettings
from snapshotd.render.renderer import CaptureResult
from snapshotd.store.device_kinds import KINDS_KEPT_FOR
from snapshotd.store.interface import Snapshot


class Pages:
    """A renderer answering each profile with the page it is told to show."""

    def __init__(
        self, device: frozenset[str] = frozenset({"matchMedia"}), seconds: float = 0.0
    ) -> None:
        self.text = {"mobile": "<p>the same words on every screen</p>"}
        self.device = device  # what the page reads of its device
        self.seconds = seconds  # a render's time
        self.rendered: Counter[str] = Counter()
        self.rendering = self.most_at_once = 0

    async def capture(
        self, url: str, site: SiteSettings, profile: str = "desktop"
    ) -> CaptureResult:
        self.rendering += 1
        self.most_at_once = max(self.most_at_once, self.rendering)
        try:
            await asyncio.sleep(self.seconds)
        finally:
            self.rendering -= 1
        self.rendered[profile] += 1
        html = self.text.get(profile, self.text["mobile"])
        return CaptureResult(
            url=url, final_url=url, status=200, html=f"<body><h1>{url}</h1>{html}</body>",
            device=self.device,
        )


async def _capture(  # type: ignore[no-untyped-def]
    service: CaptureService, store, site: SiteSettings, path: str = "/p"
) -> Counter[str]:
    renderer = service.renderer
    assert isinstance(renderer, Pages)
    before = renderer.rendered.copy()
    await store.enqueue(site.name, path, 1, force=True)
    record = await store.claim_path(site.name, path, service.owner, 60)
    assert record is not None
    outcome = await service.run(site, record, follow_links=True)  # the crawler's
    assert outcome.stored
    await _settled(service)
    return renderer.rendered - before


async def _desktop_asks(service: CaptureService, site: SiteSettings, path: str) -> Snapshot:
    """What a desktop crawler asking for ``path``, whose snapshot owes desktop, is served."""
    fill = service.owed.start(site, path, "desktop")
    assert fill is not None
    served = await fill
    assert served is not None
    return served


async def _settled(service: CaptureService) -> None:
    """Once the owed renders the service started itself after a capture are done."""
    await asyncio.gather(*service.owed.under_way())


async def test_a_page_alike_in_both_profiles_is_recaptured_in_one_while_its_text_stays(store):  # type: ignore[no-untyped-def]
    site = SiteSettings(name="site", origin="http://127.0.0.1:1", soft_404="off")
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
    site = SiteSettings(name="site", origin="http://127.0.0.1:1", soft_404="off", devices="desktop")
    service = CaptureService(Settings(sites=(site,)), store, Pages())
    assert await _capture(service, store, site) == Counter(desktop=1)
    assert await _capture(service, store, site) == Counter(desktop=1)


async def test_a_page_that_reads_nothing_of_its_device_is_rendered_once_and_some_checked(store):  # type: ignore[no-untyped-def]
    site = SiteSettings(name="site", origin="http://127.0.0.1:1", soft_404="off")
    pages = Pages(device=frozenset())
    service = CaptureService(Settings(sites=(site,)), store, pages)
    draws = iter([0.5] * 12 + [0.05])  # which later pages are checked, one in CHECK_ONE_IN
    service.profiles.chance = lambda: next(draws)
    # The site's first such page is checked in both profiles; it renders alike.
    assert await _capture(service, store, site, "/0") == Counter(mobile=1, desktop=1)
    # The next ones, new pages all, take one render each, until one is drawn for a check.
    for n in range(1, 13):
        assert await _capture(service, store, site, f"/{n}") == Counter(mobile=1), n
        assert (await store.own_profiles("site", [f"/{n}"]))[f"/{n}"] == ("mobile",)
        served = await store.get_snapshot("site", f"/{n}", "desktop")
        assert served is not None and "the same words" in served.html
    assert 0.05 < 1 / CHECK_ONE_IN < 0.5
    assert await _capture(service, store, site, "/check") == Counter(mobile=1, desktop=1)


async def test_pages_of_a_kind_that_reads_its_device_and_renders_alike_take_one_render(store):  # type: ignore[no-untyped-def]
    site = SiteSettings(name="site", origin="http://127.0.0.1:1", soft_404="off")
    pages = Pages()  # every page reads its device (a responsive layout) and shows the same
    service = CaptureService(Settings(sites=(site,)), store, pages)
    draws = iter([0.5] * 8 + [0.05])  # which later pages are checked, one in CHECK_ONE_IN
    service.profiles.chance = lambda: next(draws)
    # New pages of one kind: rendered in both while the kind is learnt.
    for n in range(LEARN_AFTER):
        assert await _capture(service, store, site, f"/docs/{n}") == Counter(mobile=1, desktop=1)
    # Then one render a new page of that kind, served to both profiles.
    for n in range(LEARN_AFTER, LEARN_AFTER + 8):
        assert await _capture(service, store, site, f"/docs/{n}") == Counter(mobile=1), n
        served = await store.get_snapshot("site", f"/docs/{n}", "desktop")
        assert served is not None and "the same words" in served.html
    # ... but for one drawn for a check.
    assert await _capture(service, store, site, "/docs/check") == Counter(mobile=1, desktop=1)
    # Another shape of path, or other reads, is another kind, learnt on its own.
    assert await _capture(service, store, site, "/shop/item/1") == Counter(mobile=1, desktop=1)
    pages.device = frozenset({"innerWidth", "userAgent"})
    assert await _capture(service, store, site, "/docs/other") == Counter(mobile=1, desktop=1)


async def test_a_check_that_differs_makes_its_kind_render_every_profile(store):  # type: ignore[no-untyped-def]
    site = SiteSettings(name="site", origin="http://127.0.0.1:1", soft_404="off")
    pages = Pages()
    service = CaptureService(Settings(sites=(site,)), store, pages)
    service.profiles.chance = lambda: 1.0  # no check drawn
    for n in range(LEARN_AFTER):
        await _capture(service, store, site, f"/p/{n}")
    assert await _capture(service, store, site, "/p/alike") == Counter(mobile=1)
    # A page of the kind, drawn for a check, shows the desktop something else: kept, and
    # every page of the kind is rendered in both from then on.
    pages.text["desktop"] = "<p>a wide table of other words</p>"
    service.profiles.chance = lambda: 0.0
    assert await _capture(service, store, site, "/p/wide") == Counter(mobile=1, desktop=1)
    assert (await store.own_profiles("site", ["/p/wide"]))["/p/wide"] == ("mobile", "desktop")
    service.profiles.chance = lambda: 1.0
    for n in range(3):
        assert await _capture(service, store, site, f"/p/next{n}") == Counter(mobile=1, desktop=1)


def test_a_kind_is_the_site_what_the_page_read_and_the_shape_of_its_path() -> None:
    reads = frozenset({"innerWidth"})
    products = kind_of("s", "http://h/products/1?x=1", reads)
    assert products == kind_of("s", "http://h/products/22", reads)
    assert kind_of("s", "http://h/about", reads) == kind_of("s", "http://h/contact", reads)
    assert kind_of("s", "http://h/about", reads) != kind_of("s", "http://h/products/1", reads)
    assert kind_of("s", "http://h/a", reads) != kind_of("t", "http://h/a", reads)
    assert kind_of("s", "http://h/a", reads) != kind_of("s", "http://h/a", frozenset({"userAgent"}))
    assert kind_of("s", "http://h/#!/guide/x", reads) == kind_of("s", "http://h/guide/y", reads)


async def test_a_site_whose_unread_device_still_changes_its_pages_renders_both_from_then_on(store):  # type: ignore[no-untyped-def]
    site = SiteSettings(name="site", origin="http://127.0.0.1:1", soft_404="off")
    other = SiteSettings(name="other", origin="http://127.0.0.1:2", soft_404="off")
    # The server picks the desktop page by user agent, without a Vary header: the page
    # reads nothing of its device, and still differs.
    pages = Pages(device=frozenset())
    pages.text["desktop"] = "<p>a wide table of other words</p>"
    service = CaptureService(Settings(sites=(site, other)), store, pages)
    service.profiles.chance = lambda: 1.0  # no check drawn: only the first page's
    # Checked, different, and the phone page rendered again is the same: the device it is.
    assert await _capture(service, store, site, "/0") == Counter(mobile=2, desktop=1)
    desktop = await store.get_snapshot("site", "/0", "desktop")
    assert desktop is not None and "wide table" in desktop.html
    for n in range(1, 12):
        assert await _capture(service, store, site, f"/{n}") == Counter(mobile=1, desktop=1)
    # Another site, whose pages do not differ, is judged on its own pages.
    pages.text.pop("desktop")
    assert await _capture(service, store, other, "/0") == Counter(mobile=1, desktop=1)
    assert await _capture(service, store, other, "/1") == Counter(mobile=1)
    assert await _capture(service, store, site, "/last") == Counter(mobile=1, desktop=1)


async def test_a_page_that_changes_by_itself_teaches_nothing_of_its_device(store):  # type: ignore[no-untyped-def]
    site = SiteSettings(name="site", origin="http://127.0.0.1:1", soft_404="off")

    class Clock(Pages):
        """Each render shows another time in its main text."""

        async def capture(
            self, url: str, site: SiteSettings, profile: str = "desktop"
        ) -> CaptureResult:
            self.text["mobile"] = f"<p>rendered at tick {sum(self.rendered.values())}</p>"
            return await super().capture(url, site, profile)

    service = CaptureService(Settings(sites=(site,)), store, Clock(device=frozenset()))
    service.profiles.chance = lambda: 1.0
    # Checked: the profiles differ, and so does the phone page rendered again.
    assert await _capture(service, store, site, "/0") == Counter(mobile=2, desktop=1)
    # Nothing learnt: the next page that reads nothing of its device takes one render.
    assert await _capture(service, store, site, "/1") == Counter(mobile=1)


async def test_a_path_keeping_another_profile_or_a_site_saying_so_renders_every_profile(store):  # type: ignore[no-untyped-def]
    site = SiteSettings(name="site", origin="http://127.0.0.1:1", soft_404="off")
    pages = Pages()  # reads its device: both rendered, and they differ
    pages.text["desktop"] = "<p>a wide table of other words</p>"
    service = CaptureService(Settings(sites=(site,)), store, pages)
    service.profiles.chance = lambda: 1.0
    assert await _capture(service, store, site, "/p") == Counter(mobile=1, desktop=1)
    assert (await store.own_profiles("site", ["/p"]))["/p"] == ("mobile", "desktop")
    # Its next render reads nothing of its device (a read the probe missed, say): the
    # desktop capture it keeps is rendered again, not dropped for the phone's.
    pages.device = frozenset()
    assert await _capture(service, store, site, "/p") == Counter(mobile=1, desktop=1)
    desktop = await store.get_snapshot("site", "/p", "desktop")
    assert desktop is not None and "wide table" in desktop.html
    # A site that scrolls its pages, or that turned the probe's judgement off, renders both
    # whatever they read.
    for name, setting in (("scrolled", {"scroll": True}), ("probeless", {"device_probe": False})):
        each = SiteSettings(name=name, origin="http://127.0.0.1:2", soft_404="off", **setting)  # type: ignore[arg-type]
        service = CaptureService(Settings(sites=(each,)), store, Pages(device=frozenset()))
        service.profiles.chance = lambda: 1.0
        for path in ("/a", "/b"):
            assert await _capture(service, store, each, path) == Counter(mobile=1, desktop=1)


async def test_a_profile_after_the_first_is_rendered_only_after_it(store):  # type: ignore[no-untyped-def]
    # One render slot at a time: a miss holds one.
    site = SiteSettings(name="site", origin="http://127.0.0.1:1", soft_404="off")
    running, most = 0, 0

    class Slow(Pages):
        async def capture(
            self, url: str, site: SiteSettings, profile: str = "desktop"
        ) -> CaptureResult:
            nonlocal running, most
            running += 1
            most = max(most, running)
            await asyncio.sleep(0.05)
            running -= 1
            return await super().capture(url, site, profile)

    service = CaptureService(Settings(sites=(site,)), store, Slow())
    started = service.start_miss(site, "/p", 3)
    assert started is not None
    outcome = await started[0]
    await service.close()
    assert outcome is not None and outcome.stored and most == 1
    assert service.renderer.rendered == Counter(mobile=1, desktop=1)  # type: ignore[attr-defined]


async def test_captures_at_once_learn_a_kind_with_no_more_checks_than_one_at_a_time(store):  # type: ignore[no-untyped-def]
    site = SiteSettings(name="site", origin="http://127.0.0.1:1", soft_404="off")

    # Every page reads its device and shows the same in both profiles; each render takes a
    # moment, so the captures of two slots overlap.
    pages = Pages(seconds=0.05)
    service = CaptureService(Settings(sites=(site,)), store, pages)
    service.profiles.chance = lambda: 1.0  # no check drawn
    todo = [f"/docs/{n}" for n in range(12)]

    async def slot() -> None:  # two render slots taking new pages of one kind
        while todo:
            await _capture(service, store, site, todo.pop(0))

    await asyncio.gather(slot(), slot())
    assert pages.most_at_once == 2
    # The kind is learnt from LEARN_AFTER checks, as it is one capture at a time: a capture
    # whose check would only repeat what the checks already running will tell waits for them.
    assert pages.rendered == Counter(mobile=12, desktop=LEARN_AFTER)


async def test_every_process_and_the_next_start_learn_a_kind_from_the_checks_of_all(store):  # type: ignore[no-untyped-def]
    site = SiteSettings(name="site", origin="http://127.0.0.1:1", soft_404="off")
    settings = Settings(sites=(site,))
    # Two processes over one store (two workers of a serve, or a serve and a worker).
    first, second = (CaptureService(settings, store, Pages()) for _ in range(2))
    for service in (first, second):
        service.profiles.chance = lambda: 1.0  # no check drawn
    paths = iter(f"/docs/{n}" for n in range(20))
    for service in (first, second, first):  # the kind's checks, split between them
        assert await _capture(service, store, site, next(paths)) == Counter(mobile=1, desktop=1)
    for service in (second, first):
        assert await _capture(service, store, site, next(paths)) == Counter(mobile=1)
    # The next start knows it too.
    restarted = CaptureService(settings, store, Pages())
    restarted.profiles.chance = lambda: 1.0
    assert await _capture(restarted, store, site, next(paths)) == Counter(mobile=1)
    # A page of the kind that differs, found by one process, has every process render both.
    restarted.profiles.chance = lambda: 0.0
    restarted.renderer.text["desktop"] = "<p>a wide table of other words</p>"  # type: ignore[attr-defined]
    assert await _capture(restarted, store, site, next(paths)) == Counter(mobile=1, desktop=1)
    assert await _capture(first, store, site, next(paths)) == Counter(mobile=1, desktop=1)


async def test_a_kind_not_checked_for_a_week_is_learnt_again(store):  # type: ignore[no-untyped-def]
    site = SiteSettings(name="site", origin="http://127.0.0.1:1", soft_404="off")
    service = CaptureService(Settings(sites=(site,)), store, Pages())
    service.profiles.chance = lambda: 1.0
    for n in range(LEARN_AFTER):
        await _capture(service, store, site, f"/docs/{n}")
    assert await _capture(service, store, site, "/docs/known") == Counter(mobile=1)
    store.test_clock.now += KINDS_KEPT_FOR - 60
    assert await _capture(service, store, site, "/docs/later") == Counter(mobile=1)
    store.test_clock.now += 120
    for n in range(LEARN_AFTER):
        assert await _capture(service, store, site, f"/docs/again{n}") == Counter(
            mobile=1, desktop=1
        )
    assert await _capture(service, store, site, "/docs/relearnt") == Counter(mobile=1)


async def test_the_store_keeps_each_kind_by_a_key_of_one_size_and_forgets_it_with_its_site(store):  # type: ignore[no-untyped-def]
    reads = frozenset({"innerWidth", "matchMedia"})
    long_segment = kind_of("s", "http://h/" + "x" * 5000 + "/1", reads)
    assert len(kind_key(long_segment)) == 32
    assert kind_key(long_segment) != kind_key(kind_of("s", "http://h/y/1", reads))
    other_site = kind_of("t", "http://h/b", reads)
    assert kind_key(kind_of("s", "http://h/a", reads)) == kind_key(other_site)
    assert await store.device_kind("s", "k") == (0, False)
    await store.tell_device_kind("s", "k", differs=False)
    assert await store.device_kind("s", "k") == (1, False)
    await store.tell_device_kind("s", "k", differs=True)
    assert await store.device_kind("s", "k") == (1, True)
    await store.tell_device_kind("s", "k", differs=False)
    assert await store.device_kind("s", "k") == (2, True)  # for good
    assert await store.device_kind("t", "k") == (0, False)  # another site's
    await store.put_site("s", "{}")
    await store.clear_site("s", remove=True)
    assert await store.device_kind("s", "k") == (0, False)


class Forgetful:
    """A store that cannot be asked of or told about device kinds (an outage of that
    table, a lock held too long), the rest of it working."""

    def __init__(self, store) -> None:  # type: ignore[no-untyped-def]
        self._store = store

    def __getattr__(self, name: str):  # type: ignore[no-untyped-def]
        return getattr(self._store, name)

    async def device_kind(self, site: str, kind: str) -> tuple[int, bool]:
        raise OSError("the store is away")

    async def tell_device_kind(self, site: str, kind: str, *, differs: bool) -> None:
        raise OSError("the store is away")


async def test_a_store_that_cannot_keep_what_checks_told_fails_no_capture(store):  # type: ignore[no-untyped-def]
    site = SiteSettings(name="site", origin="http://127.0.0.1:1", soft_404="off")
    service = CaptureService(Settings(sites=(site,)), Forgetful(store), Pages())
    service.profiles.chance = lambda: 1.0
    # Nothing can be learnt: every page of the kind is checked, and stored.
    for n in range(LEARN_AFTER + 2):
        assert await _capture(service, store, site, f"/docs/{n}") == Counter(
            mobile=1, desktop=1
        )
        assert (await store.get_snapshot("site", f"/docs/{n}", "mobile")) is not None


async def test_checks_told_at_once_by_many_processes_all_count(store):  # type: ignore[no-untyped-def]
    # Stale kinds to forget, and ten kinds told ten times each, all at once.
    for n in range(10):
        await store.tell_device_kind("s", f"old{n}", differs=False)
    store.test_clock.now += KINDS_KEPT_FOR + 1
    await asyncio.gather(*(
        store.tell_device_kind("s", k, differs=False)
        for _ in range(10) for k in [f"old{n}" for n in range(5)] + [f"new{n}" for n in range(5)]
    ))
    for k in [f"old{n}" for n in range(5)] + [f"new{n}" for n in range(5)]:
        assert await store.device_kind("s", k) == (10, False), k
    for n in range(5, 10):
        assert await store.device_kind("s", f"old{n}") == (0, False)


async def test_captures_a_bots_request_started_teach_nothing_of_a_kind(store):  # type: ignore[no-untyped-def]
    site = SiteSettings(name="site", origin="http://127.0.0.1:1", soft_404="off")
    pages = Pages()
    service = CaptureService(Settings(sites=(site,)), store, pages)
    service.profiles.chance = lambda: 1.0

    async def asked(path: str) -> Counter[str]:  # a bot's request for a made-up path
        before = pages.rendered.copy()
        await store.enqueue(site.name, path, 3, found=False)
        record = await store.claim_path(site.name, path, service.owner, 60)
        assert record is not None and not record.found
        assert (await service.run(site, record)).stored
        return pages.rendered - before

    # Checked, each of them, but a stranger's paths that render alike teach nothing.
    for n in range(LEARN_AFTER + 2):
        assert await asked(f"/products/made-up-{n}") == Counter(mobile=1, desktop=1)
    # The crawler's pages of the kind are checked as if none had been seen, and teach it.
    for n in range(LEARN_AFTER):
        assert await _capture(service, store, site, f"/products/{n}") == Counter(
            mobile=1, desktop=1
        )
    assert await asked("/products/made-up-last") == Counter(mobile=1)


def _owing(  # type: ignore[no-untyped-def]
    store, pages: Pages, desktop: str = ""
) -> tuple[SiteSettings, Pages, CaptureService]:
    """A site, ``pages`` (showing ``desktop`` to that profile, when given) and a capture
    service over them."""
    site = SiteSettings(name="site", origin="http://127.0.0.1:1", soft_404="off")
    if desktop:
        pages.text["desktop"] = desktop
    return site, pages, CaptureService(Settings(sites=(site,)), store, pages)


async def _miss(service: CaptureService, site: SiteSettings, path: str, profile: str) -> None:
    started = service.start_miss(site, path, 3, profile)
    assert started is not None
    outcome = await started[0]
    assert outcome is not None and outcome.stored
    await _settled(service)


async def test_a_bots_miss_renders_its_own_profile_and_owes_the_other_to_its_crawler(store):  # type: ignore[no-untyped-def]
    site, pages, service = _owing(store, Pages(), desktop="<p>a wide table of other words</p>")
    # A phone crawler's miss of a page that reads its device: the phone's render alone.
    await _miss(service, site, "/p", "mobile")
    assert pages.rendered == Counter(mobile=1)
    owing = await store.get_snapshot("site", "/p", "desktop")
    assert owing.owed == ("desktop",) and owing.unrendered and owing.profile == "mobile"
    assert not (await store.get_snapshot("site", "/p", "mobile")).unrendered
    assert (await store.own_profiles("site", ["/p"]))["/p"] == ("mobile",)
    # Only while the own snapshot is the one compared with, and owes the profile.
    assert not await store.settle_owed("site", "/p", "desktop", owing.captured_at - 1, None)
    assert not await store.settle_owed("site", "/p", "mobile", owing.captured_at, None)
    assert (await store.get_snapshot("site", "/p", "desktop")).unrendered
    # The desktop crawler's request renders desktop: it differs, so it is kept and served.
    fill = service.owed.start(site, "/p", "desktop")
    assert fill is not None and service.owed.start(site, "/p", "desktop") is fill  # one render
    served = await fill
    assert pages.rendered == Counter(mobile=1, desktop=1)
    assert served is not None and served.profile == "desktop" and not served.unrendered
    assert "wide table" in served.html
    assert (await store.own_profiles("site", ["/p"]))["/p"] == ("mobile", "desktop")
    assert not await store.settle_owed("site", "/p", "desktop", owing.captured_at, None)
    # Asked again: nothing more to render.
    again = service.owed.start(site, "/p", "desktop")
    assert again is not None and (await again).profile == "desktop"
    assert pages.rendered == Counter(mobile=1, desktop=1)


async def test_an_owed_profile_that_renders_alike_is_served_the_own_snapshot(store):  # type: ignore[no-untyped-def]
    site, pages, service = _owing(store, Pages())
    await _miss(service, site, "/p", "mobile")
    served = await _desktop_asks(service, site, "/p")
    assert served.profile == "mobile" and served.owed == ()
    assert pages.rendered == Counter(mobile=1, desktop=1)
    assert (await store.own_profiles("site", ["/p"]))["/p"] == ("mobile",)


async def test_a_desktop_bots_miss_renders_both_and_owes_nothing(store):  # type: ignore[no-untyped-def]
    site, pages, service = _owing(store, Pages(), desktop="<p>a wide table of other words</p>")
    await _miss(service, site, "/p", "desktop")
    assert pages.rendered == Counter(mobile=1, desktop=1)
    desktop = await store.get_snapshot("site", "/p", "desktop")
    assert desktop.profile == "desktop" and desktop.owed == ()


async def test_a_capture_after_an_owing_one_checks_every_profile_again(store):  # type: ignore[no-untyped-def]
    # What a capture that owed a profile saw is no proof the profiles render alike: the
    # next capture with the same text renders both all the same.
    site, pages, service = _owing(store, Pages())
    await _miss(service, site, "/p", "mobile")
    assert pages.rendered == Counter(mobile=1)
    assert await _capture(service, store, site) == Counter(mobile=1, desktop=1)
    assert (await store.get_snapshot("site", "/p", "desktop")).owed == ()
    # That one did render both: the next, its text the same, renders one.
    assert await _capture(service, store, site) == Counter(mobile=1)


async def test_an_owed_render_that_fails_is_not_tried_again_at_once(store):  # type: ignore[no-untyped-def]

    class FailsOnDesktop(Pages):
        async def capture(
            self, url: str, site: SiteSettings, profile: str = "desktop"
        ) -> CaptureResult:
            if profile == "desktop":
                self.rendered[profile] += 1
                return CaptureResult(url=url, final_url=url, status=0, error="timeout")
            return await super().capture(url, site, profile)

    site, pages, service = _owing(store, FailsOnDesktop())
    await _miss(service, site, "/p", "mobile")
    fill = service.owed.start(site, "/p", "desktop")
    assert fill is not None and await fill is None
    assert service.owed.start(site, "/p", "desktop") is None  # no render starts
    assert pages.rendered == Counter(mobile=1, desktop=1)
    assert (await store.get_snapshot("site", "/p", "desktop")).unrendered
    await service.close()


async def test_a_later_check_at_a_phone_bots_miss_is_owed_to_the_desktop_crawler(store):  # type: ignore[no-untyped-def]
    # The site's first page that reads nothing of its device is checked at once, even at a
    # phone crawler's miss; a later page drawn for a check is owed instead: the phone bot
    # waits for its own render alone, and the desktop crawler's first request renders the
    # check, which teaches as a check made at once does.
    site, pages, service = _owing(store, Pages(device=frozenset()))
    draws = iter([0.05, 0.5, 0.05])
    service.profiles.chance = lambda: next(draws)
    await _miss(service, site, "/0", "mobile")
    assert pages.rendered == Counter(mobile=1, desktop=1)
    assert (await store.get_snapshot("site", "/0", "desktop")).owed == ()
    await _miss(service, site, "/1", "mobile")  # drawn
    assert pages.rendered == Counter(mobile=2, desktop=1)
    owing = await store.get_snapshot("site", "/1", "desktop")
    assert owing.owed == ("desktop",) and owing.unrendered
    await _miss(service, site, "/2", "mobile")  # not drawn: the phone's capture serves both
    assert (await store.get_snapshot("site", "/2", "desktop")).owed == ()
    assert pages.rendered == Counter(mobile=3, desktop=1)
    # The server picks the desktop page by user agent without saying Vary: the owed check
    # differs, the phone page rendered again is the one the snapshot holds, so every page of
    # the site is rendered in both from then on.
    pages.text["desktop"] = "<p>a wide table of other words</p>"
    served = await _desktop_asks(service, site, "/1")
    assert "wide table" in served.html
    assert pages.rendered == Counter(mobile=4, desktop=2)
    await _miss(service, site, "/3", "mobile")  # drawn, but the site is known to differ
    assert pages.rendered == Counter(mobile=5, desktop=2)
    assert (await store.get_snapshot("site", "/3", "desktop")).owed == ("desktop",)
    assert await _capture(service, store, site, "/4") == Counter(mobile=1, desktop=1)


async def test_an_owed_check_alike_teaches_nothing_more(store):  # type: ignore[no-untyped-def]
    site, pages, service = _owing(store, Pages(device=frozenset()))
    draws = iter([0.05, 0.5])
    service.profiles.chance = lambda: next(draws)
    await _miss(service, site, "/0", "mobile")
    await _miss(service, site, "/1", "mobile")
    served = await _desktop_asks(service, site, "/1")
    assert served.profile == "mobile" and served.owed == ()
    assert pages.rendered == Counter(mobile=2, desktop=2)
    assert await _capture(service, store, site, "/2") == Counter(mobile=1)


async def test_the_first_check_is_rendered_once_its_capture_is_stored(store):  # type: ignore[no-untyped-def]
    # Neither the crawler's next pages (it follows the stored capture's links) nor a bot
    # wait for the check of the site's first page that reads nothing of its device: it is
    # owed, and rendered at once after the store, desktop crawlers waiting for it meanwhile.
    class HeldDesktop(Pages):
        def __init__(self) -> None:
            super().__init__(device=frozenset())
            self.go = asyncio.Event()

        async def capture(
            self, url: str, site: SiteSettings, profile: str = "desktop"
        ) -> CaptureResult:
            if profile == "desktop":
                await self.go.wait()
            return await super().capture(url, site, profile)

    site, pages, service = _owing(store, HeldDesktop())
    await store.enqueue(site.name, "/", 1, force=True)
    record = await store.claim_path(site.name, "/", service.owner, 60)
    outcome = await service.run(site, record, follow_links=True)
    assert outcome.stored and pages.rendered == Counter(mobile=1)
    assert (await store.get_snapshot("site", "/", "desktop")).unrendered
    assert len(service.owed.under_way()) == 1
    fill = service.owed.start(site, "/", "desktop")  # a desktop crawler joins the render
    assert fill is service.owed.under_way()[0]
    pages.go.set()
    served = await fill
    assert served is not None and served.profile == "mobile" and served.owed == ()
    assert pages.rendered == Counter(mobile=1, desktop=1)
    # A phone crawler's miss on another site's first such page: answered after one render.
    other = SiteSettings(name="other", origin="http://127.0.0.1:2", soft_404="off")
    started = service.start_miss(other, "/", 3, "mobile")
    assert started is not None
    pages.go.clear()
    assert (await started[0]).stored
    assert pages.rendered == Counter(mobile=2, desktop=1)
    pages.go.set()
    await _settled(service)
    assert pages.rendered == Counter(mobile=2, desktop=2)
    assert (await store.get_snapshot("other", "/", "desktop")).owed == ()
