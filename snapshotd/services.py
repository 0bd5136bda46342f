"""The long-lived pieces of one process, made once and opened and closed in one order.

``serve`` (:mod:`snapshotd.server.app`), ``worker`` and ``crawl`` (:mod:`snapshotd.cli.crawl`)
all build their :class:`Services` with :func:`build_services` and run inside
:meth:`Services.running`.

Invariants:
- every piece is made once, from the frozen settings, before anything opens: the default
  renderer (a :class:`~snapshotd.render.BrowserPool`) and the sites' rules only here, the
  proxy before the API that serves its render endpoint; each is given what it uses when it
  is made (the parameter learner the registry's refresh, the capture service that learner,
  the proxy the crawler verifier), so nothing is patched in afterwards;
- ``running`` opens the store (and starts storing the minute counters), then the sites
  (the configured ones written to the store, all of them read), then the renderer, then the
  crawler verifier (serve only), then the capture service (which takes back expired
  leases), then the crawler; it closes the capture service first (no capture starts; those
  under way get their grace, the rest are cut short and every lease of this process is
  handed back), then the crawler, the verifier, the renderer, the upstream and the store. A
  piece whose opening failed is not closed; everything opened before it is;
- in a process that runs a crawler, the capture service is built with the queue through which
  it hands the crawler the captures it makes on its own (proxy misses, the render endpoint),
  so their links are followed too (:mod:`snapshotd.capture.service`);
- with a ``crawler_lock`` (the workers of one ``serve``), the crawler starts only in the
  process holding that lock (:mod:`snapshotd.crawl.hostlock`), which every other worker tries
  again each second, so when the holder dies another takes the crawler over. Until then
  a worker's own captures stay marked as having their links due, and the holder follows
  them (:class:`~snapshotd.crawl.engine.Crawler` with ``follow_others``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass

from snapshotd.capture.service import CaptureService, LinksToFollow
from snapshotd.config.settings import Settings
from snapshotd.crawl.engine import Crawler
from snapshotd.crawl.hostlock import HostLock
from snapshotd.crawl.notify import Notifier
from snapshotd.crawlers.families import parse_range_source
from snapshotd.crawlers.verification import Verifier
from snapshotd.crawlers.verification.ranges import RangeLists
from snapshotd.crawlers.verification.resolver import Resolver, SystemResolver
from snapshotd.observe.metrics import Metrics
from snapshotd.proxy.handler import Proxy
from snapshotd.proxy.passthrough import Upstream
from snapshotd.render import BrowserPool
from snapshotd.render.procs import BrowserProcesses
from snapshotd.render.renderer import Renderer
from snapshotd.rewrite import RuleSet
from snapshotd.sites.param_learner import ParamLearner
from snapshotd.sites.registry import SiteRegistry
from snapshotd.store import Store, open_store

log = logging.getLogger("snapshotd")

LOCK_POLL_SECONDS = 1.0


class BrowserStartError(Exception):
    """The renderer could not start."""


@dataclass(frozen=True)
class Services:
    """The long-lived pieces one process shares between proxy, crawler and API."""

    settings: Settings
    store: Store
    sites: SiteRegistry
    renderer: Renderer
    metrics: Metrics
    capture: CaptureService
    upstream: Upstream | None = None  # serve only
    proxy: Proxy | None = None  # serve only
    # The crawler verifier the proxy's claims ask: its range lists and look-ups (serve only).
    verifier: Verifier | None = None
    crawler: Crawler | None = None
    # Drawn at start when no token is configured; the API of this process takes only it.
    generated_token: str | None = None
    # Shared by the workers of one serve: only its holder runs the crawler.
    crawler_lock: HostLock | None = None

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[Services]:
        """Open every piece, yield, close them (the order is the module's invariant).
        BrowserStartError when the renderer does not start."""
        await self.store.open()
        self.metrics.minutes.start(self.store)
        try:
            await self.sites.open()  # closed with the store: the poll only reads it
            try:
                await self.renderer.start()
            except Exception as exc:
                raise BrowserStartError(str(exc)) from exc
            try:
                if self.verifier is not None:
                    await self.verifier.start()
                await self.capture.start()
                waiting: asyncio.Task[None] | None = None
                try:
                    if self.crawler is not None and self.crawler_lock is None:
                        await self.crawler.start()
                    elif self.crawler is not None:
                        waiting = asyncio.create_task(self._crawl_when_locked(), name="lock")
                    yield self
                finally:
                    if waiting is not None:
                        waiting.cancel()
                        await asyncio.gather(waiting, return_exceptions=True)
                    await self.capture.close()
                    if self.crawler is not None:
                        await self.crawler.stop()
                    if self.crawler_lock is not None:
                        self.crawler_lock.release()
            finally:
                if self.verifier is not None:
                    await self.verifier.close()
                await self.renderer.close()
                if self.upstream is not None:
                    await self.upstream.close()
        finally:
            await self.sites.close()
            await self.metrics.minutes.close(self.store)  # the last counts, then the store
            await self.store.close()


    async def _crawl_when_locked(self) -> None:
        """Start the crawler once this process holds the crawler lock. Meanwhile the
        captures handed to the crawler are left to the holder: they stay marked in the
        store, and it follows them."""
        assert self.crawler is not None and self.crawler_lock is not None
        while not self.crawler_lock.try_acquire():
            links = self.capture.links
            while links is not None and not links.empty():
                links.get_nowait()
            await asyncio.sleep(LOCK_POLL_SECONDS)
        log.info("crawler runs in worker pid=%d", os.getpid())
        await self.crawler.start()


def default_renderer(settings: Settings) -> Renderer:
    """The browser pool of ``settings``."""
    return BrowserPool(settings.browser)


def default_verifier(settings: Settings, resolver: Resolver | None = None) -> Verifier:
    """The crawler verifier of ``settings``: its published ranges, and DNS by ``resolver``
    (when None: ``dns_servers``, else the system's name servers)."""
    sources = [
        (family, source)
        for entry in settings.bot_ranges
        for family, sources in [parse_range_source(entry)]
        for source in sources
    ]
    resolver = resolver or SystemResolver(nameservers=settings.dns_servers)
    return Verifier(RangeLists(sources, every=settings.bot_ranges_every), resolver)


def build_services(
    settings: Settings,
    *,
    store: Store | None = None,
    renderer: Renderer | None = None,
    rules: dict[str, RuleSet] | None = None,
    upstream: Upstream | None = None,
    crawler: bool = False,
    once: bool = False,
    seeds: dict[str, Sequence[str]] | None = None,
    generated_token: str | None = None,
    crawler_lock: HostLock | None = None,
    processes: int = 1,
    resolver: Resolver | None = None,
) -> Services:
    """Make the pieces of one process: the proxy when an ``upstream`` is given (``serve``),
    a crawler when asked (``once`` and ``seeds`` are its own, see
    :class:`~snapshotd.crawl.engine.Crawler`), run only while holding ``crawler_lock`` when
    one is given. ``processes``: how many worker processes of one ``serve`` this is one of.
    ``rules`` stand for the configured sites' rules files; ``resolver`` for the system's
    name servers, which verify crawlers."""
    store = store or open_store(settings.db)
    sites = SiteRegistry(settings, store, rules=rules)
    renderer = renderer or default_renderer(settings)
    metrics = Metrics()
    # The pool's browsers: a worker's are below its supervisor, which forked every worker.
    metrics.add_collector(BrowserProcesses(os.getppid() if processes > 1 else None))
    links: LinksToFollow | None = asyncio.Queue() if crawler else None
    learner = ParamLearner(store, on_change=sites.refresh)  # what is learned used here at once
    capture = CaptureService(
        settings, store, renderer, metrics=metrics, links=links, learner=learner
    )
    proxy = verifier = None
    if upstream is not None:
        verifier = default_verifier(settings, resolver)
        proxy = Proxy(
            sites, store, capture, upstream, metrics=metrics, processes=processes,
            verifier=verifier,
        )
    return Services(
        settings=settings,
        store=store,
        sites=sites,
        renderer=renderer,
        metrics=metrics,
        capture=capture,
        upstream=upstream,
        proxy=proxy,
        verifier=verifier,
        crawler=(
            Crawler(
                sites, store, capture, metrics=metrics, once=once, seeds=seeds,
                follow_others=crawler_lock is not None,
                maintenance_every=settings.maintenance_every,
                notifier=Notifier(settings, store, sites, minutes=metrics.minutes),
            )
            if crawler
            else None
        ),
        generated_token=generated_token,
        crawler_lock=crawler_lock,
    )
