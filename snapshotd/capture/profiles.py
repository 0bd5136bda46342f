"""Which device profiles one capture renders, of those its site serves
(:mod:`snapshotd.web.devices`), and which of their captures are kept.

Invariants:
- the first profile is rendered first, always; its capture is the path's snapshot. Another
  profile is rendered only when the page may show it something else, and its capture is
  kept only when it does (``devices.renders_alike``);
- the page may show another profile something else when its first render read something
  of its device, or an answer said it varies by device (``CaptureResult.device``,
  :mod:`snapshotd.render.device_probe`), unless its last capture rendered alike in every
  profile and its main text is what it was then;
- a page that read nothing of its device is rendered once: a site's first such page in
  this process, and every ``VERIFY_EVERY``-th after it, is rendered in every profile all the
  same, and a site where one of them turned out different has every profile of every page
  rendered from then on in this process (its pages differ by something the probe does not
  see, such as a server choosing by user agent without saying ``Vary``);
- the profiles after the first are rendered one after another: a capture holds one render
  slot at a time.
"""

from __future__ import annotations

import logging
from collections import Counter

from snapshotd.config.settings import SiteSettings
from snapshotd.render.base import CaptureResult, Renderer
from snapshotd.store.base import PathRecord, Store, Variant
from snapshotd.web.devices import renders_alike
from snapshotd.web.fingerprints import fingerprint

__all__ = ["VERIFY_EVERY", "ProfileRenders"]

log = logging.getLogger("snapshotd.capture.profiles")

VERIFY_EVERY = 10  # of a site's pages that read nothing of their device, one in this many


class ProfileRenders:
    """The renders of one capture's profiles, and what this process learnt of each site's
    pages that read nothing of their device."""

    def __init__(self, renderer: Renderer, store: Store) -> None:
        self.renderer = renderer
        self.store = store
        self._blind: Counter[str] = Counter()  # a site's pages rendered once by the probe
        self._differs: set[str] = set()  # sites whose such pages turned out different

    async def alike_before(
        self, site: SiteSettings, record: PathRecord, profiles: tuple[str, ...]
    ) -> str | None:
        """The main-text hash of the path's own snapshot when its last capture rendered alike
        in every profile the site serves (it holds the first profile's alone); else None."""
        if len(profiles) < 2 or record.captured_at is None:
            return None
        own = (await self.store.own_profiles(site.name, [record.path])).get(record.path)
        if own != profiles[:1]:
            return None
        snapshot = await self.store.get_snapshot(site.name, record.path, profiles[0])
        if snapshot is None or snapshot.path != record.path:
            return None  # a copy, served its master's
        return fingerprint(snapshot.html).text_hash

    async def render(
        self, url: str, site: SiteSettings, profiles: tuple[str, ...], alike: str | None = None
    ) -> tuple[CaptureResult, list[Variant]]:
        """The first profile's capture of ``url``, and the others' that differ from it (the
        module's rule). ``alike``: :meth:`alike_before`'s answer. Another profile's failed
        render leaves it served the first one's, and is logged."""
        first = await self.renderer.capture(url, site, profiles[0])
        if len(profiles) < 2 or not first.ok:
            return first, []
        checking = False
        if not first.device:
            if site.name not in self._differs:
                checking = self._blind[site.name] % VERIFY_EVERY == 0
                self._blind[site.name] += 1
                if not checking:
                    return first, []
        elif alike is not None and fingerprint(first.html).text_hash == alike:
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
            if not renders_alike(
                (first.status, first.headers, first.html), (other.status, other.headers, other.html)
            ):
                variants.append(
                    Variant(profile, other.html, other.status, other.headers, other.final_url)
                )
        if checking and variants:
            self._differs.add(site.name)
            log.warning(
                "profiles differ site=%s url=%s though the page read nothing of its device: "
                "every profile is rendered from now on", site.name, url,
            )
        return first, variants
