"""``snapshotd crawl`` and ``snapshotd worker``: a crawler on the process wiring of
:mod:`snapshotd.services`, stopped by ``SIGINT``/``SIGTERM``, with a progress display for
``crawl``.

Invariants:
- the store, the renderer, the capture service and the crawler are opened and closed by
  :meth:`~snapshotd.services.Services.running`, in the order it states; a browser that does
  not start is one log line and exit status 2;
- an interrupted ``crawl`` lets the captures under way finish (their grace) before printing
  its summary, so the summary counts what they stored; it exits 130;
- the progress display gives the log its handlers and levels back when it ends.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import signal
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import replace
from typing import Any, TextIO

from snapshotd.cli.common import UserError, check_chromium, check_rules, settings_of
from snapshotd.cli.site import SiteCommandError, assign
from snapshotd.config.loading import site_from_mapping, site_to_mapping
from snapshotd.config.settings import Settings
from snapshotd.config.values import ConfigError
from snapshotd.crawl.engine import Crawler
from snapshotd.crawl.frontier import CrawlStats
from snapshotd.observe.logs import iso_utc
from snapshotd.render.renderer import Renderer
from snapshotd.services import BrowserStartError, build_services
from snapshotd.store.interface import Store

__all__ = ["run_crawl", "run_worker"]

log = logging.getLogger("snapshotd.crawler")


def _crawl_seeds(
    settings: Settings, seeds: Sequence[str] | None
) -> dict[str, Sequence[str]] | None:
    """``--seed`` values per configured site: a path seeds every one, a URL the site it
    belongs to; None (each site's own seeds) without ``--seed``."""
    if not seeds:
        return None
    out: dict[str, list[str]] = {s.name: [] for s in settings.sites}
    for seed in seeds:
        if seed.startswith("/"):
            for names in out.values():
                names.append(seed)
            continue
        site = settings.site_for_url(seed)
        if site is not None:
            out[site.name].append(seed)
        else:
            log.warning("seed %s belongs to no configured site; skipped", seed)
    return dict(out)


_CAPTURE_LOGGERS = ("snapshotd.capture.service", "snapshotd.render")


class _Progress:
    """A rich progress bar with rate and ETA on a terminal; a plain line every few seconds
    otherwise."""

    PLAIN_EVERY = 5.0

    def __init__(self, stream: TextIO, tty: bool) -> None:
        self.stream = stream
        self.tty = tty
        self._bar: Any = None
        self._task: Any = None
        self._last_line = 0.0
        self._last_counts: tuple[int, int] | None = None
        self._handlers: list[logging.Handler] = []
        self._levels: dict[str, int] = {}

    def __enter__(self) -> _Progress:
        if self.tty:
            from rich.console import Console
            from rich.logging import RichHandler
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                Progress,
                TextColumn,
                TimeElapsedColumn,
                TimeRemainingColumn,
            )
            from rich.text import Text

            console = Console(file=self.stream)
            self._bar = Progress(
                TextColumn("crawling"),
                BarColumn(),
                MofNCompleteColumn(),
                TextColumn("{task.fields[rate]:.1f} pages/s"),
                TimeElapsedColumn(),
                TextColumn("eta"),
                TimeRemainingColumn(),
                console=console,
                transient=False,
            )
            self._bar.start()
            self._task = self._bar.add_task("crawl", total=None, rate=0.0)
            # Log lines print above the bar instead of through it.
            root = logging.getLogger()
            self._handlers = list(root.handlers)
            for handler in self._handlers:
                root.removeHandler(handler)
            level = self._handlers[0].level if self._handlers else logging.NOTSET
            root.addHandler(
                RichHandler(
                    console=console,
                    show_path=False,
                    level=level,
                    log_time_format=lambda when: Text(iso_utc(when.timestamp())),
                )
            )
            # The bar says what each capture line would; keep them for -v.
            if root.level > logging.DEBUG:
                for name in _CAPTURE_LOGGERS:
                    logger = logging.getLogger(name)
                    self._levels[name] = logger.level
                    logger.setLevel(logging.WARNING)
        return self

    def update(self, stats: CrawlStats, pending: int, active: int, final: bool = False) -> None:
        elapsed = max(time.monotonic() - stats.started, 1e-6)
        rate = stats.done / elapsed
        total = stats.done + pending + active
        if self._bar is not None:
            self._bar.update(self._task, completed=stats.done, total=total, rate=rate)
            return
        now = time.monotonic()
        if not final and now - self._last_line < self.PLAIN_EVERY:
            return
        self._last_line = now
        left = pending + active
        if final and (stats.done, total) == self._last_counts:
            return  # the last line already said it
        self._last_counts = (stats.done, total)
        eta = f"{left / rate:.0f}s" if rate > 0 else "?"
        self.stream.write(
            f"crawled {stats.done}/{total} pages, {rate:.1f} pages/s, {left} to go, eta {eta}\n"
        )
        self.stream.flush()

    def __exit__(self, *exc: object) -> None:
        if self._bar is not None:
            self._bar.stop()
            root = logging.getLogger()
            for handler in list(root.handlers):
                root.removeHandler(handler)
            for handler in self._handlers:
                root.addHandler(handler)
            for name, level in self._levels.items():
                logging.getLogger(name).setLevel(level)


def _summary(stats: CrawlStats, out: TextIO) -> None:
    elapsed = time.monotonic() - stats.started
    rate = stats.done / elapsed if elapsed > 0 else 0.0
    out.write(
        f"captured    {stats.captured}\n"
        f"duplicates  {stats.duplicates}\n"
        f"not found   {stats.not_found}\n"
        f"errors      {stats.errors}\n"
        f"ignored     {stats.ignored}\n"
        f"time        {elapsed:.1f}s ({rate:.2f} pages/s)\n"
    )
    out.flush()


def _nothing_due(counts: dict[str, dict[str, int]], sites: Iterable[str], out: TextIO) -> None:
    """Why a crawl captured nothing when every path it found was already captured: one line
    per site saying its pages are fresh (and how many failed ones wait for their retry)."""
    for name in sites:
        held = counts.get(name, {})
        fresh, failed = held.get("processed", 0), held.get("error", 0)
        if not fresh and not failed:
            continue
        if failed:
            out.write(
                f"nothing to capture in {name}: {fresh} pages are fresh and {failed} failed "
                "ones wait for their retry time\n"
            )
        else:
            out.write(f"nothing to capture: all {fresh} pages of {name} are fresh\n")
    out.flush()


async def _serve_crawler(
    settings: Settings,
    *,
    once: bool,
    seeds: dict[str, Sequence[str]] | None,
    renderer: Renderer | None,
    store: Store | None,
    body: Callable[[Crawler, asyncio.Event], Any],
) -> int:
    """Run ``body`` with a started crawler on the services of ``settings``; a signal sets the
    event ``body`` is given."""
    services = build_services(
        settings, store=store, renderer=renderer, crawler=True, once=once, seeds=seeds
    )
    assert services.crawler is not None
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    signals = (signal.SIGINT, signal.SIGTERM)
    for sig in signals:
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(sig, stop.set)
    try:
        async with services.running():
            return int(await body(services.crawler, stop))
    except BrowserStartError as exc:
        print(f"snapshotd: {exc}", file=sys.stderr)  # as the command line's user errors
        return 2
    finally:
        for sig in signals:
            with contextlib.suppress(NotImplementedError, RuntimeError):
                loop.remove_signal_handler(sig)


async def run_worker(
    settings: Settings, *, renderer: Renderer | None = None, store: Store | None = None
) -> int:
    """``snapshotd worker``: crawl until SIGTERM or Ctrl-C, then shut down cleanly."""

    async def body(crawler: Crawler, stop: asyncio.Event) -> int:
        await stop.wait()
        log.info("stopping the crawler")
        return 0

    return await _serve_crawler(
        settings, once=False, seeds=None, renderer=renderer, store=store, body=body
    )


async def run_crawl(
    settings: Settings,
    seeds: Sequence[str] | None = None,
    max_pages: int | None = None,
    *,
    renderer: Renderer | None = None,
    store: Store | None = None,
    out: TextIO | None = None,
    progress: TextIO | None = None,
    tty: bool | None = None,
) -> int:
    """``snapshotd crawl``: crawl from the seeds until nothing is pending, print a summary.

    Exit status 0; 1 when nothing could be captured (no capture succeeded in this run and
    no crawled site holds a captured path); 130 when interrupted.
    """
    out = out or sys.stdout
    progress = progress or sys.stderr
    tty = progress.isatty() if tty is None else tty
    if max_pages is not None:
        settings = replace(
            settings, sites=tuple(replace(s, max_pages=max_pages) for s in settings.sites)
        )
    interrupted = False

    async def body(crawler: Crawler, stop: asyncio.Event) -> int:
        nonlocal interrupted
        with _Progress(progress, tty) as bar:
            while not crawler.finished.is_set():
                waiter = asyncio.ensure_future(crawler.finished.wait())
                stopper = asyncio.ensure_future(stop.wait())
                await asyncio.wait({waiter, stopper}, timeout=0.5, return_when="FIRST_COMPLETED")
                waiter.cancel()
                stopper.cancel()
                await asyncio.gather(waiter, stopper, return_exceptions=True)
                depth = await crawler.store.queue_depth()
                bar.update(crawler.stats, sum(depth.values()), crawler.active)
                if stop.is_set():
                    interrupted = True
                    log.info("interrupted: finishing the captures under way")
                    await crawler.stop()  # so the summary counts what they stored
                    break
            depth = await crawler.store.queue_depth()
            bar.update(crawler.stats, sum(depth.values()), 0, final=True)
        stats = crawler.stats
        _summary(stats, out)
        if interrupted:
            return 130
        if stats.captured:
            return 0
        counts = await crawler.store.counts()
        if not stats.done:
            _nothing_due(counts, crawler.sites, out)
        held = sum(counts.get(name, {}).get("processed", 0) for name in crawler.sites)
        return 0 if held and not stats.errors else 1

    return await _serve_crawler(
        settings,
        once=True,
        seeds=_crawl_seeds(settings, seeds),
        renderer=renderer,
        store=store,
        body=body,
    )


def cmd_worker(args: argparse.Namespace) -> int:
    settings = settings_of(args)
    check_rules(settings)
    check_chromium(settings)
    return asyncio.run(run_worker(settings))


def cmd_crawl(args: argparse.Namespace) -> int:
    if args.max_pages is not None and args.max_pages < 1:
        raise UserError("--max-pages must be at least 1")
    settings = _with_settings(settings_of(args, need_site=True), args.set or ())
    _check_seeds(settings, args.seed or ())
    check_rules(settings)
    check_chromium(settings)
    return asyncio.run(run_crawl(settings, seeds=args.seed or None, max_pages=args.max_pages))


def _check_seeds(settings: Settings, seeds: Sequence[str]) -> None:
    """Each ``--seed`` is a path (for every site) or a URL of a configured site."""
    from urllib.parse import urlsplit

    for seed in seeds:
        if seed.startswith("/"):
            continue
        parts = urlsplit(seed)
        if parts.scheme.lower() not in ("http", "https") or not parts.hostname:
            raise UserError(
                f"--seed {seed}: a seed is a path starting with '/' (did you mean "
                f"/{seed.lstrip('/')}?) or a URL of a configured site"
            )
        if settings.site_for_url(seed) is None:
            raise UserError(f"--seed {seed}: belongs to no configured site")


def _with_settings(settings: Settings, assignments: Sequence[str]) -> Settings:
    """``--set KEY=VALUE``: the settings with those site keys changed on every site."""
    if not assignments:
        return settings
    try:
        sites = tuple(
            site_from_mapping(assign(site_to_mapping(s), assignments), "--set")
            for s in settings.sites
        )
    except (ConfigError, SiteCommandError) as exc:
        raise UserError(str(exc)) from None
    return replace(settings, sites=sites)
