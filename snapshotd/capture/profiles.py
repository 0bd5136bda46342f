"""Which device profiles one capture renders, of those its site serves
(:mod:`snapshotd.crawlers.devices`), and which of their captures are kept.

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
- a page that read something of its device is judged by its kind (:func:`kind_of`): the
  site, what it read, and the shape of its path (how deep, under which first segment).
  While fewer than ``LEARN_AFTER`` pages of a kind rendered alike in every profile, each
  is rendered in every profile; from then on one render a page, and one in ``CHECK_ONE_IN``
  at random is rendered in every profile all the same. What the checks told is kept in the
  store (:mod:`snapshotd.store.device_kinds`) and read from it for each page, so every
  process sharing it, and the next start, learn from all of them. Only a capture that may
  learn (the crawler's, of a path it found or an operator queued) tells the store what it
  saw: a page a bot's request or the render endpoint started is checked when its kind is
  not learnt, and teaches nothing, so no stranger's request chooses what is learnt.
  Captures at once in a process learn a kind with no more checks than captures one at a
  time: a page whose check could only repeat what the checks of its kind already running
  will tell (they would make ``LEARN_AFTER`` if alike) waits for them, rendering nothing
  meanwhile, and is then judged by what they told. A kind one of whose pages differed
  renders every profile from then on (the device is not told from chance there: a kind
  wrongly held to differ costs renders, never a page's truth), until the store forgets it
  (a week without a check). A kind the store cannot be asked of is taken as unknown (its
  page is checked), and a check it cannot be told of teaches nothing: either is logged,
  neither fails the capture;
- a page that read nothing of its device is rendered once: a site's first such page in
  this process, and one in ``CHECK_ONE_IN`` after it at random (so nobody outside can
  steer which), is rendered in every profile all the same. When a check differs, the first
  profile is rendered again: if that differs too, the page changes by itself (a clock,
  chance) and nothing is learnt; else the site's pages differ by something the probe does
  not see (a server choosing by user agent without saying ``Vary``, a test of a property's
  presence), and every profile of its pages is rendered from then on in this process;
- a capture a bot's request started (``asked``: the profile that bot is served) renders
  the first profile and the asked one; another profile the rule would render now is owed
  instead (stored so: its crawlers are not served the first one's capture), and rendered
  when a crawler of that profile asks (:meth:`ProfileRenders.render_owed`), then compared
  with the path's snapshot like any other. The check of a site's first page that read
  nothing of its device, whoever started the capture, is owed too and rendered at once
  after the capture is stored (``Renders.settle``), so neither the bot nor the crawler's
  next pages wait for it; a later one drawn at random is owed at a bot's miss like the
  rest. An owed render of such a check, when it differs, is judged as a check rendered
  with its capture is (the first profile rendered again), while this process remembers it
  was one (the last ``AUDITS_KEPT``);
- the profiles after the first are rendered one after another: a capture holds one render
  slot at a time.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import random
from collections import Counter, OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from urllib.parse import urlsplit

from snapshotd.config.settings import SiteSettings
from snapshotd.crawlers.devices import renders_alike
from snapshotd.observe import logs
from snapshotd.pages.fingerprints import fingerprint
from snapshotd.render.renderer import CaptureResult, Renderer
from snapshotd.store.interface import PathRecord, Snapshot, Store
from snapshotd.store.outcome import Variant

__all__ = [
    "AUDITS_KEPT", "CHECK_ONE_IN", "LEARN_AFTER", "Before", "ProfileRenders", "Renders",
    "kind_key", "kind_of",
]

log = logging.getLogger("snapshotd.capture.profiles")

CHECK_ONE_IN = 10  # of the pages of a kind learnt to render alike, checked
LEARN_AFTER = 3  # pages of a kind that rendered alike before its pages take one render
AUDITS_KEPT = 4096  # owed checks of pages that read nothing, remembered until rendered

# A kind of page that read its device: (site, what it read, path depth, first segment).
Kind = tuple[str, frozenset[str], int, str]


@dataclass(frozen=True)
class _Audit:
    """A check, drawn at random, of a page of ``site`` that read nothing of its device (the
    site's first such check is told by its name alone)."""

    site: str


# What a check teaches when the profiles differ: a kind, a site's pages that read nothing
# (its first check, or a later one), or nothing.
Checking = Kind | str | _Audit | None


def kind_of(site: str, url: str, device: frozenset[str]) -> Kind:
    """The kind of a page of ``site`` at ``url`` that read ``device``: pages of one kind are
    expected to treat devices alike (one template of one app). The path's shape is its
    depth and, under the top level, its first segment (``/products/1`` and ``/products/2``
    are one shape, ``/about`` and ``/contact`` another); a hashbang route counts as path."""
    parts = urlsplit(url)
    route = parts.path + (parts.fragment[1:] if parts.fragment.startswith("!") else "")
    segments = [s for s in route.split("/") if s]
    return site, device, len(segments), segments[0] if len(segments) > 1 else ""


def kind_key(kind: Kind) -> str:
    """The key the store keeps ``kind`` by within its site: a hash of what else identifies
    it, of one size whatever a page named."""
    _, device, depth, segment = kind
    named = json.dumps([sorted(device), depth, segment], ensure_ascii=False)
    return hashlib.sha256(named.encode("utf-8", "surrogatepass")).hexdigest()[:32]


@dataclass
class _Learnt:
    alike: int = 0  # pages of the kind that rendered alike in every profile
    differs: bool = False

    @property
    def known(self) -> bool:
        """Whether the kind is learnt: its pages are judged without a check of their own."""
        return self.differs or self.alike >= LEARN_AFTER


@dataclass(frozen=True)
class Before:
    """What a path's last capture says of its profiles."""

    keeps_others: bool = False  # it keeps another profile's capture beside its own
    alike_text: str | None = None  # its main-text hash, when it rendered alike in every one


@dataclass(frozen=True)
class Renders:
    """A capture's renders: the first profile's (the path's snapshot), the other profiles'
    that differ from it, and the profiles it owes (rendered when their crawlers ask, or,
    those in ``settle``, as soon as the capture is stored)."""

    first: CaptureResult
    variants: tuple[Variant, ...] = ()
    owed: tuple[str, ...] = ()
    settle: tuple[str, ...] = ()  # of those owed, the ones to render once it is stored


def _shown(result: CaptureResult) -> tuple[int, dict[str, str], str]:
    """What ``devices.renders_alike`` compares of a capture."""
    return result.status, result.headers, result.html


def _variant(profile: str, result: CaptureResult) -> Variant:
    return Variant(profile, result.html, result.status, result.headers, result.final_url)


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
        self._checks: Counter[Kind] = Counter()  # checks of a kind running now
        self._check_ended: dict[Kind, asyncio.Event] = {}  # set as one of them ends
        self._checks_ended = 0  # checks of any kind ended so far
        # (site, URL) of the pages that read nothing whose drawn check is owed.
        self._audits: OrderedDict[tuple[str, str], None] = OrderedDict()

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
        if snapshot is None or snapshot.path != record.path or snapshot.owed:
            return Before()  # a copy, served its master's, or one not rendered in every one
        return Before(alike_text=fingerprint(snapshot.html).text_hash)

    async def render(
        self, url: str, site: SiteSettings, profiles: tuple[str, ...], before: Before = Before(),
        *, may_learn: bool = False, asked: str | None = None,
    ) -> Renders:
        """The first profile's capture of ``url``, the others' that differ from it and those
        owed (the module's rule). ``before``: :meth:`kept_before`'s answer; ``may_learn``:
        whether a check of the page's kind is told to the store; ``asked``: the profile of
        the bot whose request started the capture. Another profile's failed render leaves it
        served the first one's, and is logged."""
        first = await self.renderer.capture(url, site, profiles[0])
        if len(profiles) < 2 or not first.ok:
            return Renders(first)
        others, checking = await self._others_wanted(url, site, first, before, may_learn)
        if not others:
            return Renders(first)
        owed: tuple[str, ...] = ()
        if asked is not None or isinstance(checking, str):
            owed = tuple(p for p in profiles[1:] if p != asked)
            profiles = tuple(p for p in profiles if p not in owed)
            if owed and isinstance(checking, (str, _Audit)):
                self._audit_owed(site.name, url)
            if len(profiles) < 2:
                settle = owed if isinstance(checking, str) else ()
                return Renders(first, owed=owed, settle=settle)
        if isinstance(checking, tuple):
            self._checks[checking] += 1
        try:
            variants = await self._others(url, site, profiles, first)
            if isinstance(checking, tuple):
                await self._learn(checking, differs=bool(variants), url=url)
        finally:
            if isinstance(checking, tuple):
                self._ended(checking)
        if checking is not None and not isinstance(checking, tuple) and variants:
            await self._blind_check_differed(url, site, profiles[0], _shown(first))
        return Renders(first, tuple(variants), owed)

    async def render_owed(
        self, url: str, site: SiteSettings, profile: str, snapshot: Snapshot
    ) -> tuple[CaptureResult, Variant | None]:
        """``profile``'s capture of ``url``, owed by its path's own ``snapshot``, and the
        variant to keep beside it (None: it renders alike, and is served the snapshot). An
        owed check of a page that read nothing of its device teaches as one made at once."""
        result = await self.renderer.capture(url, site, profile)
        if not result.ok:
            return result, None
        own = (snapshot.status, snapshot.headers, snapshot.html)
        audit = (site.name, url) in self._audits
        self._audits.pop((site.name, url), None)
        if renders_alike(own, _shown(result)):
            return result, None
        if audit and site.name not in self._differs:
            await self._blind_check_differed(url, site, snapshot.profile, own)
        return result, _variant(profile, result)

    async def _blind_check_differed(
        self, url: str, site: SiteSettings, first_profile: str,
        first: tuple[int, dict[str, str], str],
    ) -> None:
        """A check of a page that read nothing of its device differed from ``first``, its
        render in ``first_profile``: rendered again, a page that does not change by itself
        shows the site's pages differ by something the probe does not see."""
        again = await self.renderer.capture(url, site, first_profile)
        if again.ok and renders_alike(first, _shown(again)):
            self._differs.add(site.name)
            log.warning(
                "profiles differ site=%s url=%s though the page read nothing of its "
                "device: every profile is rendered from now on", site.name, url,
            )

    def _audit_owed(self, site: str, url: str) -> None:
        self._audits[(site, url)] = None
        self._audits.move_to_end((site, url))
        while len(self._audits) > AUDITS_KEPT:
            self._audits.popitem(last=False)

    async def _others(
        self, url: str, site: SiteSettings, profiles: tuple[str, ...], first: CaptureResult
    ) -> list[Variant]:
        """The renders of the profiles after the first, one after another: those that differ
        from ``first``."""
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
                variants.append(_variant(profile, other))
        return variants

    def _ended(self, kind: Kind) -> None:
        """A check of ``kind`` ended (told, failed or cut short): the pages waiting for it
        are judged again."""
        self._checks_ended += 1
        self._checks[kind] -= 1
        if self._checks[kind] <= 0:
            del self._checks[kind]
        ended = self._check_ended.pop(kind, None)
        if ended is not None:
            ended.set()

    async def _told(self, kind: Kind) -> _Learnt:
        """What is learnt of ``kind``, once a check of it could tell something the checks
        already running will not: they end within their renders' ``render_timeout``."""
        while True:
            ended = self._checks_ended
            learnt = await self._learnt(kind)
            if self._checks_ended != ended:
                continue  # a check ended while the store was read: it may not count yet
            if learnt.known or learnt.alike + self._checks[kind] < LEARN_AFTER:
                return learnt
            await self._check_ended.setdefault(kind, asyncio.Event()).wait()

    async def _learn(self, kind: Kind, *, differs: bool, url: str) -> None:
        """What a page of ``kind`` rendered in every profile teaches, told to the store. A
        page that read its device and differed is taken at its word, without a render to
        tell the device from chance: a kind wrongly held to differ costs renders, never a
        page's truth."""
        try:
            await self.store.tell_device_kind(kind[0], kind_key(kind), differs=differs)
        except Exception as exc:  # the capture stands; the kind is checked again
            logs.throttled(log, logging.WARNING, "could not keep what a check told: %s", exc)
            return
        if differs:
            log.info("profiles differ site=%s url=%s: every profile of its kind is rendered",
                     kind[0], url)

    async def _others_wanted(
        self, url: str, site: SiteSettings, first: CaptureResult, before: Before,
        may_learn: bool,
    ) -> tuple[bool, Checking]:
        """Whether the profiles after the first are rendered (the module's rule), and what
        a difference teaches when they are rendered as a check (:data:`Checking`)."""
        if before.keeps_others or site.scroll or not site.device_probe:
            return True, None
        if first.device:
            alike = before.alike_text
            if alike is not None and alike == fingerprint(first.html).text_hash:
                return False, None
            kind = kind_of(site.name, url, first.device)
            learnt = await self._told(kind)
            if learnt.differs:
                return True, None
            checking = learnt.alike < LEARN_AFTER or self.chance() < 1 / CHECK_ONE_IN
            return checking, kind if checking and may_learn else None
        if site.name in self._differs:
            return True, None
        seen = self._blind[site.name]
        self._blind[site.name] += 1
        if not seen:
            return True, site.name
        drawn = self.chance() < 1 / CHECK_ONE_IN
        return drawn, _Audit(site.name) if drawn else None

    async def _learnt(self, kind: Kind) -> _Learnt:
        """What the store knows of ``kind`` (every process's checks count); nothing when it
        cannot be asked."""
        try:
            return _Learnt(*await self.store.device_kind(kind[0], kind_key(kind)))
        except Exception as exc:
            logs.throttled(log, logging.WARNING, "could not read what checks told: %s", exc)
            return _Learnt()
