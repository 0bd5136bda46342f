"""Which device profiles one capture renders, of those its site serves
(:mod:`snapshotd.web.devices`), and which of their captures are kept.

Invariants:
- the first profile is rendered first, always; its capture is the path's snapshot. Another
  profile is rendered only when the page may show it something else, and its capture is
  kept only when it does (``devices.renders_alike``);
- the page may show another profile something else when its first render read something
  of its device, or an answer said it varies by device (``CaptureResult.device``,
  :mod:`snapshotd.render.device_probe`), unless its last capture rendered alike in every
  profile and its main text is what it was then; also, always, when the path keeps another
  profile's capture from before, on a site that scrolls its pages (``scroll``), and on one
  that turned the probe's judgement off (``device_probe = false``);
- a page that read nothing of its device is rendered once: a site's first such page in
  this process, and one in ``CHECK_ONE_IN`` after it at random (so nobody outside can
  steer which), is rendered in every profile all the same. When a check differs, the first
  profile is rendered again: if that differs too, the page changes by itself (a clock,
  chance) and nothing is learnt; else the site's pages differ by something the probe does
  not see (a server choosing by user agent without saying ``Vary``, a test of a property's
  presence), and every profile of its pages is rendered from then on in this process;
- the profiles after the first are rendered one after another: a capture holds one render
  slot at a time.
"""

from __future__ import annotations

import logging
import random
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

from snapshotd.config.settings import SiteSettings
from snapshotd.render.base import CaptureResult, Renderer
from snapshotd.store.base import PathRecord, Store, Variant
from snapshotd.web.devices import renders_alike
from snapshotd.web.fingerprints import fingerprint

__all__ = ["CHECK_ONE_IN", "Before", "ProfileRenders"]

log = logging.getLogger("snapshotd.capture.profiles")

CHECK_ONE_IN = 10  # of a site's pages that read nothing of their device, checked


@dataclass(frozen=True)
class Before:
    """What a path's last capture says of its profiles."""

    keeps_others: bool = False  # it keeps another profile's capture beside its own
    alike_text: str | None = None  # its main-text hash, when it rendered alike in every one


def _shown(result: CaptureResult) -> tuple[int, dict[str, str], str]:
    """What ``devices.renders_alike`` compares of a capture."""
    return result.status, result.headers, result.html


class ProfileRenders:
    """The renders of one capture's profiles, and what this process learnt of each site's
    pages that read nothing of their device."""

    def __init__(
        self, renderer: Renderer, store: Store, *, chance: Callable[[], float] = random.random
    ) -> None:
        self.renderer = renderer
        self.store = store
        self.chance = chance  # draws which pages are checked
        self._blind: Counter[str] = Counter()  # a site's pages that read nothing of it
        self._differs: set[str] = set()  # sites whose such pages turned out different

    async def kept_before(
        self, site: SiteSettings, record: PathRecord, profiles: tuple[str, ...]
    ) -> Before:
        """What the path's last capture, if any, says of the profiles the site serves."""
        if len(profiles) < 2 or record.captured_at is None:
            return Before()
        own = (await self.store.own_profiles(site.name, [record.path])).get(record.path)
        if own and len(own) > 1:
            return Before(keeps_others=True)
        if own != profiles[:1]:
            return Before()
        snapshot = await self.store.get_snapshot(site.name, record.path, profiles[0])
        if snapshot is None or snapshot.path != record.path:
            return Before()  # a copy, served its master's
        return Before(alike_text=fingerprint(snapshot.html).text_hash)

    async def render(
        self, url: str, site: SiteSettings, profiles: tuple[str, ...], before: Before = Before()
    ) -> tuple[CaptureResult, list[Variant]]:
        """The first profile's capture of ``url``, and the others' that differ from it (the
        module's rule). ``before``: :meth:`kept_before`'s answer. Another profile's failed
        render leaves it served the first one's, and is logged."""
        first = await self.renderer.capture(url, site, profiles[0])
        if len(profiles) < 2 or not first.ok:
            return first, []
        others, checking = self._others_wanted(site, first, before)
        if not others:
            return first, []
        variants = []
        for profile in profiles[1:]:
            other = await self.renderer.capture(url, site, profile)
            if not other.ok:
                log.info(
                    "capture for profile %s failed, served the %s one site=%s url=%s error=%r",
                    profile, profiles[0], site.name, url, other.error,
                )
                continue
            if not renders_alike(_shown(first), _shown(other)):
                variants.append(
                    Variant(profile, other.html, other.status, other.headers, other.final_url)
                )
        if checking and variants:
            again = await self.renderer.capture(url, site, profiles[0])
            if again.ok and renders_alike(_shown(first), _shown(again)):
                self._differs.add(site.name)
                log.warning(
                    "profiles differ site=%s url=%s though the page read nothing of its "
                    "device: every profile is rendered from now on", site.name, url,
                )
        return first, variants

    def _others_wanted(
        self, site: SiteSettings, first: CaptureResult, before: Before
    ) -> tuple[bool, bool]:
        """Whether the profiles after the first are rendered (the module's rule), and whether
        as a check of a page that read nothing of its device."""
        if before.keeps_others or site.scroll or not site.device_probe:
            return True, False
        if first.device:
            alike = before.alike_text
            return alike is None or alike != fingerprint(first.html).text_hash, False
        if site.name in self._differs:
            return True, False
        checking = self._blind[site.name] == 0 or self.chance() < 1 / CHECK_ONE_IN
        self._blind[site.name] += 1
        return checking, checking
