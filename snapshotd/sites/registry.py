"""The sites one process serves and crawls, as the store holds them.

Sites are runtime objects: the API and ``snapshotd site`` create, change, pause and remove
them in the store, and every process (``serve`` workers, ``worker``, other hosts on one
PostgreSQL) sees the change within ``refresh_every`` seconds, without a restart. The sites
of the config file are written to the store when the process starts (created, or their
settings replaced), so the file stays the place to declare them when that suits.

Invariants:
- one :class:`SiteRegistry` a process; proxy, crawler and API look sites up only here;
- what it holds of its sites is one immutable value, :attr:`SiteRegistry.now` (a
  :class:`~snapshotd.sites.view.SitesView`: each site's settings, rules, bot matcher, pause,
  creation time and token), replaced whole by each change it reads and never changed in
  place: a reader takes the current one (``now``, :meth:`SiteRegistry.view`) and holds one
  whole version for as long as it keeps it, never half of an update; nothing else of a site
  is kept here for readers to hold;
- a site whose stored settings or rules file cannot be read is logged once and keeps its last
  good version (or is left out if it has none);
- listeners hear of every site added or changed (restarted too) and every site removed;
- reads of the store are applied one at a time, in the order they were made, so an older read
  never undoes a newer one; :meth:`SiteRegistry.fresh` answers only once a read begun after
  it was called is applied (the API's reads: a write any process made before is seen).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import replace

from snapshotd.config.loading import site_from_mapping, site_to_mapping
from snapshotd.config.settings import Settings, SiteSettings
from snapshotd.config.values import ConfigError
from snapshotd.crawlers.bots import BotMatcher
from snapshotd.observe import logs
from snapshotd.rewrite import RulesError, RuleSet, site_rules
from snapshotd.sites.view import SitesView, SiteView
from snapshotd.store.interface import SiteRow, Store
from snapshotd.store.job_state import restart_job

__all__ = ["SiteRegistry", "site_json"]

log = logging.getLogger("snapshotd.sites.registry")

REFRESH_SECONDS = 1.0
# Called with the names of the sites added or changed, then of those removed.
Listener = Callable[[set[str], set[str]], None]


def site_json(site: SiteSettings) -> str:
    """A site's settings as the store keeps them."""
    return json.dumps(site_to_mapping(site), sort_keys=True, separators=(",", ":"))


class SiteRegistry:
    """The current sites, read from the store every ``refresh_every`` seconds."""

    def __init__(
        self,
        settings: Settings,
        store: Store,
        *,
        rules: dict[str, RuleSet] | None = None,
        refresh_every: float = REFRESH_SECONDS,
    ) -> None:
        self.configured = settings.sites
        self.store = store
        self.refresh_every = refresh_every
        # Given rules stand for the configured sites' rules, while a site has those.
        given = rules or {}
        self._given_rules = {
            s.name: ((s.rules, s.rules_text), given[s.name])
            for s in settings.sites if s.name in given
        }
        self._rows: dict[str, SiteRow] = {}
        self._listeners: list[Listener] = []
        self._poll: asyncio.Task[None] | None = None
        self._bad: set[tuple[str, float]] = set()
        self._removed: set[str] = set()
        # The query parameters each site ignores by what it learned (snapshotd.sites.param_learner).
        self._learned: dict[str, tuple[tuple[str, str], ...]] = {}
        self._reading = asyncio.Lock()
        self._reads = 0  # reads of the store begun, each under _reading
        # A broken rules file stops start-up (RulesError).
        views = {site.name: self._view_of(site) for site in self.configured}
        # The sites as they are now: replaced whole by each change read, never changed.
        self.now = SitesView.of(settings, views)

    # ------------------------------------------------------------------ lookups

    @property
    def settings(self) -> Settings:
        """The server's settings, its ``sites`` the current ones."""
        return self.now.settings

    @property
    def sites(self) -> tuple[SiteSettings, ...]:
        return self.now.sites

    def view(self, name: str) -> SiteView | None:
        """The current view of a site: its settings, rules and bots of one version."""
        return self.now.site(name)

    def view_of(self, site: SiteSettings) -> SiteView:
        """The view to go by for ``site``, which a caller took earlier: the current one of its
        name (whose settings are newer than ``site`` when the site changed since), or, for a
        site removed since, a view of ``site`` alone, its rules parsed again (RulesError
        when they no longer can be)."""
        view = self.now.site(site.name)
        return view if view is not None else self._view_of(site)

    def view_for_host(self, host: str) -> SiteView | None:
        return self.now.for_host(host)

    def view_for_token(self, token: str) -> SiteView | None:
        """The view of the site whose site token this is (the SEO4Ajax face's way to name a
        site)."""
        return self.now.for_token(token)

    def site(self, name: str) -> SiteSettings | None:
        view = self.now.site(name)
        return None if view is None else view.settings

    def site_for_host(self, host: str) -> SiteSettings | None:
        return self.settings.site_for_host(host)

    def site_for_url(self, url: str) -> SiteSettings | None:
        return self.settings.site_for_url(url)

    def site_for_token(self, token: str) -> SiteSettings | None:
        """The site whose site token this is."""
        view = self.now.for_token(token)
        return None if view is None else view.settings

    def token_of(self, name: str) -> str:
        """A site's site token ("" for a site the store has not given one)."""
        view = self.now.site(name)
        return "" if view is None else view.token

    def is_paused(self, name: str) -> bool:
        view = self.now.site(name)
        return view is not None and view.paused

    @property
    def created(self) -> Mapping[str, float]:
        """When each current site was created, by name."""
        return self.now.created

    def listen(self, listener: Listener) -> None:
        self._listeners.append(listener)

    # ------------------------------------------------------------------ lifecycle

    async def open(self) -> None:
        """Write the configured sites to the store, read every site, and keep reading."""
        for site in self.configured:
            await self.store.put_site(site.name, site_json(site))
        await self.refresh()
        self._poll = asyncio.create_task(self._keep_reading(), name="sites")

    async def close(self) -> None:
        if self._poll is not None:
            self._poll.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._poll
            self._poll = None

    async def _keep_reading(self) -> None:
        while True:
            await asyncio.sleep(self.refresh_every)
            try:
                await self.refresh()
            except Exception as exc:  # the store is down: keep the sites known, try again
                logs.throttled(log, logging.WARNING, "could not read sites: %s", exc)

    # ------------------------------------------------------------------ changes

    async def put(self, site: SiteSettings) -> None:
        """Create or replace a site, seen by this process at once."""
        self._view_of(site)  # a broken rules file is refused before anything is stored
        await self.store.put_site(site.name, site_json(site))
        await self.refresh()

    async def rotate_token(self, name: str) -> str | None:
        """A new site token for the site, seen by this process at once (the old one answers
        404 from then on); None when there is no such site."""
        token = await self.store.rotate_site_token(name)
        await self.refresh()
        return token

    async def set_paused(self, name: str, paused: bool) -> bool:
        found = await self.store.set_site_paused(name, paused)
        await self.refresh()
        return found

    async def restart(self, name: str) -> int:
        """Remove every path and snapshot of the site; its settings stay, and the crawler
        starts it again from its seeds. How many paths went."""
        n = await restart_job(self.store, name)
        await self.refresh()
        return n

    async def delete(self, name: str) -> int:
        """Remove the site and everything of it. How many paths went."""
        n = await self.store.clear_site(name, remove=True)
        await self.refresh()
        return n

    async def fresh(self) -> None:
        """Read the sites now, unless a read begun since this call was applied meanwhile
        (concurrent callers share one): whatever any process wrote before is then seen."""
        called = self._reads
        async with self._reading:
            if self._reads > called:
                return  # begun after the call, under the lock, so applied by now
            # The sites alone: the learned parameters the API shows it reads from the store.
            await self._refresh(params=False)

    async def refresh(self) -> None:
        async with self._reading:
            await self._refresh()

    async def _refresh(self, *, params: bool = True) -> None:
        self._reads += 1
        rows = {row.name: row for row in await self.store.list_sites()}
        learned: dict[str, tuple[tuple[str, str], ...]] = {} if params else dict(self._learned)
        for param in await self.store.list_params() if params else ():
            if param.state == "ignored":
                learned[param.site] = (*learned.get(param.site, ()), (param.name, param.scope))
        changed = {
            name for name, row in rows.items()
            if (old := self._rows.get(name)) is None or old.updated_at != row.updated_at
            or old.settings != row.settings or learned.get(name, ()) != self._learned.get(name, ())
        }
        removed = set(self._rows) - set(rows)
        self._removed |= removed
        paused = {name for name, row in rows.items() if row.paused}
        if not changed and not removed and paused == {n for n, r in self._rows.items() if r.paused}:
            return  # nothing a view holds has changed
        current = dict(self.now.by_name)
        for name in removed:
            current.pop(name, None)
        for name in sorted(changed):
            row = rows[name]
            old = self._rows.get(name)
            view = current.get(name)
            if old is None or old.settings != row.settings or view is None:
                view = self._parse(row)
                if view is None:
                    continue
            site = replace(view.settings, learned_params=learned.get(name, ()))
            current[name] = replace(view, settings=site)
        for name, view in current.items():  # what the row says beside the settings
            if (kept := rows.get(name)) is None:
                continue
            if (kept.paused, kept.created_at, kept.site_token) != (
                view.paused, view.created, view.token
            ):
                current[name] = replace(
                    view, paused=kept.paused, created=kept.created_at, token=kept.site_token
                )
        self._rows = rows
        self._learned = learned
        # The configured sites first, in the file's order (the first with no hosts is the
        # one serving any Host), then the others by name.
        first = [s.name for s in self.configured if s.name in current]
        order = first + sorted(set(current) - set(first))
        settings = replace(self.now.settings, sites=tuple(current[n].settings for n in order))
        self.now = SitesView.of(settings, current)
        changed &= set(current)
        if (changed or removed) and self._poll is not None:  # not the first read, at start
            log.info(
                "sites changed=%s removed=%s",
                ",".join(sorted(changed)) or "-", ",".join(sorted(removed)) or "-",
            )
        for listener in self._listeners:
            listener(changed, removed)

    def _parse(self, row: SiteRow) -> SiteView | None:
        """The view of the site a row holds, its rules and bots loaded; None (logged once a
        version) when it cannot be read."""
        try:
            raw = json.loads(row.settings)
            if not isinstance(raw, dict):
                raise ConfigError("not a JSON object")
            return self._view_of(site_from_mapping(raw, f"site {row.name!r} in the store"))
        except (ValueError, ConfigError, RulesError) as exc:
            if (row.name, row.updated_at) not in self._bad:
                self._bad.add((row.name, row.updated_at))
                log.error("site %s kept as it was: %s", row.name, exc)
            return None

    def _view_of(self, site: SiteSettings) -> SiteView:
        """A view of ``site``: its rules parsed and its bot matcher made (RulesError for
        broken rules); not yet anyone's."""
        source, given = self._given_rules.get(site.name, (None, None))
        if given is not None and (site.rules, site.rules_text) == source:
            rules = given
        else:
            rules = site_rules(site)
        return SiteView(site, rules, _matcher(site))

    def orphans(self, names: Iterable[str]) -> set[str]:
        """Of ``names`` (sites that have paths), those this process saw removed from the
        store and not created again (paths of sites it never knew are left alone)."""
        return (set(names) & self._removed) - set(self._rows)


_MATCHERS: dict[tuple[tuple[str, ...], ...], BotMatcher] = {}


def _matcher(site: SiteSettings) -> BotMatcher:
    """One matcher for each bot setting (compiling the data set's patterns costs)."""
    key = (site.bots_add, site.bots_remove, site.bots_categories)
    if key not in _MATCHERS:
        _MATCHERS[key] = BotMatcher(site.bots_add, site.bots_remove, site.bots_categories)
    return _MATCHERS[key]
