"""Soft 404s: each site's not-found view, learned and kept, and the verdict on a capture
(SPEC 5.6; what a view is and when a page shows it: :mod:`snapshotd.pages.not_found_view`).

Invariants:
- only the product learns: a view is learned in captures the crawler runs of paths it found
  on the site or an operator queued (``may_learn``), never because of a bot's request (nor
  in a capture of a page only a bot's page links to), and what is rendered is chosen here
  alone: two paths no
  one can guess (``PROBE_BYTES`` random bytes each, one level deep) and the site's first seed
  with the first ``LINKED`` pages it links to, one render after another, ``crawl_delay``
  apart, through the renderer (the pool and egress guard of every capture); pages the site serves
  (``STORED`` of its sitemap's, soft 404s apart) are read from the store;
- a site's view is learned again when it has none, when its origin or first seed changed,
  ``RELEARN_EVERY`` after it was learned, and when a capture shows an app shell (the build
  its document loads) that no learning of this process saw; never twice within
  ``MIN_RELEARN`` seconds, nor within ``RETRY_AFTER`` after a learning that failed (its
  renders failed: the view it had is kept). One learning per site at a time; a capture waits
  for it at most ``LEARN_WAIT`` seconds and within its lease, then is judged by what is known,
  but for a capture of the first seed: the learning's own reference page (the view learnt
  never matches it) starts the learning with its render and is judged at once by what is
  known, so the crawl follows its links while the learning renders;
- the view is kept in the store (store/soft_404_rows), so every process judges by it, reading
  it at most every ``VIEW_TTL`` seconds; a view learned for another origin or seed judges
  nothing;
- a capture is judged only when its site looks (``soft_404`` not ``off``), it was answered
  2xx, and its page did not say its status itself;
- precision first: a path whose stored snapshot is a real page (2xx, not taken for the view,
  and not showing it) is not answered 404 on one capture: it is failed with ``CONFIRM`` (its
  snapshot kept and served) and captured again at its retry time, and answered only when that
  capture shows the view too.
"""

from __future__ import annotations

import asyncio
import json
import logging
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from snapshotd.config.settings import SiteSettings
from snapshotd.crawlers.devices import profiles_served
from snapshotd.pages.links import extract_links
from snapshotd.pages.not_found_view import Render, View, learn, shows
from snapshotd.render.renderer import CaptureResult, Renderer
from snapshotd.sites import path_policy
from snapshotd.store.interface import PathRecord, Store, iso_time
from snapshotd.store.soft_404_rows import view_key

__all__ = ["CONFIRM", "NotFoundViews", "Verdict", "describe"]

log = logging.getLogger("snapshotd.capture.soft_404")

PROBE_BYTES = 16
LINKED = 3
STORED = 8
RELEARN_EVERY = 86400.0
MIN_RELEARN = 10.0
RETRY_AFTER = 300.0
LEARN_WAIT = 45.0
VIEW_TTL = 5.0
SHELLS_KEPT = 16
CONFIRM = "showed the site's not-found view; its last snapshot is kept until a capture confirms"


@dataclass(frozen=True)
class Verdict:
    """A capture taken for its site's not-found view: why, the status it is answered with
    (404, 410, or with ``report`` its own), and whether another capture must confirm it."""

    why: str
    status: int
    confirm: bool = False


class NotFoundViews:
    """The not-found views of a process's sites: learned, kept in the store, judged by."""

    def __init__(
        self, store: Store, renderer: Renderer, *, clock: Callable[[], float] = time.time
    ) -> None:
        self.store = store
        self.renderer = renderer
        self.clock = clock
        self._read: dict[str, tuple[float, dict[str, Any] | None]] = {}
        self._learning: dict[str, asyncio.Future[None]] = {}
        self._shells: dict[str, list[str]] = {}
        self._not_before: dict[str, float] = {}

    async def aclose(self) -> None:
        """Stop every learning under way."""
        for task in list(self._learning.values()):
            task.cancel()
        await asyncio.gather(*self._learning.values(), return_exceptions=True)

    async def stored(self, name: str, *, fresh: bool = False) -> dict[str, Any] | None:
        """What the store holds of the site's view (read at most every ``VIEW_TTL``)."""
        now = self.clock()
        read = self._read.get(name)
        if fresh or read is None or now - read[0] >= VIEW_TTL:
            text = await self.store.get_meta(view_key(name))
            try:
                known = json.loads(text) if text else None
            except ValueError:  # not ours to read (a hand's): learned again
                known = None
            read = (now, known if isinstance(known, dict) else None)
            self._read[name] = read
        return read[1]

    async def judge(
        self, site: SiteSettings, record: PathRecord, result: CaptureResult, *, may_learn: bool
    ) -> Verdict | None:
        """The verdict on a capture of ``record``; None when it is not taken for the view."""
        if site.soft_404 == "off" or not 200 <= result.status < 300 or result.declared:
            return None
        known = await self.stored(site.name)
        if may_learn and self._due(site, known, result.shell):
            if record.path == _seed(site):
                # The learning's own reference page, which the view it learns never matches:
                # judged now by the view known, its links followed while the learning renders.
                self._start(site, result.shell, result)
            else:
                await self._wait_for_learning(site, record, result)
                known = await self.stored(site.name)
        view = _view_for(site, known)
        if view is None:
            return None
        match = shows(view, result.html, record.path)
        if match is None:
            return None
        assert known is not None
        why = (
            f"shows the not-found view learned {iso_time(known['learned_at'])}: "
            f"{match.found} of its {match.of} words, {match.more} more"
        )
        if site.soft_404 == "report":
            return Verdict(why, result.status)
        status = 410 if any(s and s in record.path for s in site.soft_404_gone) else 404
        return Verdict(why, status, confirm=await self._was_real(site, record, view))

    async def _was_real(self, site: SiteSettings, record: PathRecord, view: View) -> bool:
        """Whether the path's stored snapshot is a real page: to be confirmed first."""
        if record.error == CONFIRM or record.not_found is not None:
            return False
        if record.captured_at is None or not 200 <= (record.status or 0) < 300:
            return False
        snapshot = await self.store.get_snapshot(site.name, record.path)
        return snapshot is not None and shows(view, snapshot.html, record.path) is None

    def _due(self, site: SiteSettings, known: dict[str, Any] | None, shell: str) -> bool:
        if site.name in self._learning:
            return True
        now = self.clock()
        if now < self._not_before.get(site.name, 0.0):
            return False
        if known is None or (known.get("origin"), known.get("seed")) != (site.origin, _seed(site)):
            return True
        if now - known.get("learned_at", 0.0) >= RELEARN_EVERY:
            return True
        seen = [known.get("shell"), *self._shells.get(site.name, ())]
        return bool(shell) and shell not in seen

    def _start(
        self, site: SiteSettings, shell: str, seed: CaptureResult | None = None
    ) -> asyncio.Future[None]:
        """The learning of the site's view under way, begun now if there is none (``seed``:
        the capture of its first seed just made, rendered again otherwise)."""
        task = self._learning.get(site.name)
        if task is None:
            task = asyncio.ensure_future(self._learn(site, shell, seed))
            self._learning[site.name] = task
            task.add_done_callback(lambda _t: self._learning.pop(site.name, None))
        return task

    async def _wait_for_learning(
        self, site: SiteSettings, record: PathRecord, result: CaptureResult
    ) -> None:
        task = self._start(site, result.shell)
        lease_left = (record.lease_until or 0.0) - self.clock() - 5.0
        try:
            await asyncio.wait_for(asyncio.shield(task), max(0.0, min(LEARN_WAIT, lease_left)))
        except TimeoutError:
            log.info("judged site=%s path=%s while its not-found view is still being learned",
                     site.name, record.path)

    async def learn_now(self, site: SiteSettings) -> dict[str, Any] | None:
        """Learn the site's view now (or join the learning under way); what is then stored."""
        await asyncio.shield(self._start(site, ""))
        return await self.stored(site.name, fresh=True)

    async def _learn(self, site: SiteSettings, shell: str, seed: CaptureResult | None) -> None:
        started = self.clock()
        shells = self._shells.setdefault(site.name, [])
        shells[:] = [*shells, shell][-SHELLS_KEPT:]
        try:
            record = await self._renders(site, seed)
        except Exception as exc:  # a learning that fails keeps the view it had
            why = str(exc) or type(exc).__name__
            self._not_before[site.name] = self.clock() + RETRY_AFTER
            log.warning("could not learn the not-found view site=%s: %s", site.name, why)
            await self._keep(site.name, {"error": why[:500], "tried_at": started}, merge=True)
            return
        self._not_before[site.name] = self.clock() + MIN_RELEARN
        shells[:] = [*shells, record["shell"]][-SHELLS_KEPT:]
        await self._keep(site.name, record)
        if record["view"] is not None:
            log.info("learned the not-found view site=%s words=%d references=%d: %s",
                     site.name, len(record["view"]["words"]), record["references"],
                     record["view"]["text"][:80])
        else:
            log.info("no not-found view site=%s: %s", site.name, record["why"])

    async def _keep(self, name: str, record: dict[str, Any], *, merge: bool = False) -> None:
        """Store ``record`` as the site's view (``merge``: over what is stored). The learning
        runs in a task no one may be waiting for: a store that cannot take it is said in one
        line, and the view is learned again after ``RETRY_AFTER``."""
        try:
            if merge:
                record = {**(await self.stored(name, fresh=True) or {}), **record}
            await self.store.set_meta(view_key(name), json.dumps(record))
        except Exception as exc:
            self._not_before[name] = self.clock() + RETRY_AFTER
            log.warning("could not keep the not-found view site=%s: %s",
                        name, str(exc) or type(exc).__name__)
            return
        self._read[name] = (self.clock(), record)

    async def _renders(self, site: SiteSettings, seeded: CaptureResult | None) -> dict[str, Any]:
        """Render what a view is learned from, and learn it; raises when a render fails."""
        profile = profiles_served(site.devices)[0]
        probes = [f"/{secrets.token_hex(PROBE_BYTES)}" for _ in range(2)]
        seed = _seed(site)
        record: dict[str, Any] = {
            "origin": site.origin, "seed": seed, "learned_at": self.clock(),
            "shell": "", "probes": probes, "references": 0, "view": None,
            "why": "", "error": "",
        }
        drawn: list[CaptureResult] = []
        for path in probes:  # an app that answers one with its own status has no view
            result = await self._render(site, path, profile)
            record["shell"] = record["shell"] or result.shell
            if not 200 <= result.status < 300 or result.declared:
                record["why"] = (
                    f"the app answers a path that cannot exist with {result.status} itself"
                )
                return record
            drawn.append(result)
        drawn.append(seeded or await self._render(site, seed, profile))
        references = [Render(seed, drawn[2].html)]
        links = extract_links(drawn[2].html, drawn[2].final_url).links
        linked = [p for p in dict.fromkeys(path_policy.path_of(site, u) for u in links)
                  if p is not None and p != seed][:LINKED]
        for path in linked:
            result = await self._render(site, path, profile, strict=False)
            if 200 <= result.status < 300 and result.html:
                references.append(Render(path, result.html))
        for path, _ in await self.store.sitemap_pages(site.name, 0, STORED):
            if path in (seed, *linked):
                continue
            stored = await self.store.get_path(site.name, path)
            snapshot = await self.store.get_snapshot(site.name, path)
            # a soft 404 ("report" keeps it 200 and listed) is no real page to learn from
            if snapshot is not None and stored is not None and stored.not_found is None:
                references.append(Render(path, snapshot.html))
        record["references"] = len(references)
        learned = learn((Render(probes[0], drawn[0].html), Render(probes[1], drawn[1].html)),
                        references)
        if isinstance(learned, str):
            record["why"] = learned
        else:
            record["view"] = learned.to_json()
        return record

    async def _render(
        self, site: SiteSettings, path: str, profile: str, *, strict: bool = True
    ) -> CaptureResult:
        await asyncio.sleep(site.crawl_delay)  # the site's pace, as between its captures
        result = await self.renderer.capture(site.url_for(path), site, profile)
        if strict and not result.ok:
            raise RuntimeError(f"the render of {path} failed: {result.error}")
        return result


def _seed(site: SiteSettings) -> str:
    """The site's first seed as a site path ("/" without one)."""
    first = site.seeds[0] if site.seeds else "/"
    return path_policy.path_of(site, first) or "/"


def _view_for(site: SiteSettings, known: dict[str, Any] | None) -> View | None:
    """The view the site's captures are judged by: the one learned for its origin and seed."""
    if known is None or known.get("view") is None:
        return None
    if (known.get("origin"), known.get("seed")) != (site.origin, _seed(site)):
        return None
    return View.from_json(known["view"])


def describe(known: dict[str, Any] | None, site: SiteSettings) -> dict[str, Any]:
    """What the API and the console show of a site's view."""
    if site.soft_404 == "off":
        return {"state": "off"}
    if known is None:
        return {"state": "not learned yet"}
    view = known.get("view")
    current = (known.get("origin"), known.get("seed")) == (site.origin, _seed(site))
    return {
        "state": ("learned" if view else "none") if current else "learned for another origin",
        "learned_at": iso_time(known.get("learned_at")),
        "why": known.get("why") or None,
        "text": view["text"] if view else None,
        "words": len(view["words"]) if view else 0,
        "references": known.get("references", 0),
        "probes": known.get("probes", []),
        "error": known.get("error") or None,
        "tried_at": iso_time(known.get("tried_at")),
    }
