"""What one process sees of its sites at one moment: one immutable value, replaced whole.

A :class:`SiteView` holds everything a reader takes of one site (its settings, its rules, its
bot matcher, whether its crawl is paused, when it was created, its site token); a
:class:`SitesView` holds every site's view and the server's settings they belong to. The
registry (:mod:`snapshotd.sites.registry`) makes a new :class:`SitesView` for each change it
reads and puts it in place of the old one in one assignment.

Invariants:
- nothing here changes once made: a reader that holds a view holds one whole version of its
  site, its settings and its rules from the same read of the store, whatever the registry
  reads meanwhile; a reader that wants the newest takes the registry's current view again;
- the sites of ``settings.sites`` and the views of ``by_name`` are the same sites, in the
  same versions (``by_name[n].settings is settings.site(n)``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from functools import cached_property
from types import MappingProxyType

from snapshotd.config.settings import Settings, SiteSettings
from snapshotd.crawlers.bots import BotMatcher
from snapshotd.rewrite import RuleSet

__all__ = ["SiteView", "SitesView"]


@dataclass(frozen=True)
class SiteView:
    """One site as this process sees it: its ``settings``, the ``rules`` parsed from them,
    its ``bots`` matcher, whether its crawl is ``paused``, when it was ``created`` (None
    before the store was read) and its site ``token`` ("" before the store gave it one)."""

    settings: SiteSettings
    rules: RuleSet
    bots: BotMatcher
    paused: bool = False
    created: float | None = None
    token: str = ""

    @property
    def name(self) -> str:
        return self.settings.name


@dataclass(frozen=True)
class SitesView:
    """Every site of the process at one moment: the server's ``settings`` (its ``sites`` in
    the order a Host is matched) and each site's view by name."""

    settings: Settings
    by_name: Mapping[str, SiteView]
    by_token: Mapping[str, str]  # a site's name by its site token

    @classmethod
    def of(cls, settings: Settings, views: Mapping[str, SiteView]) -> SitesView:
        """The view of ``views``' sites, in the order of ``settings.sites`` (which must name
        the same sites, in the same versions)."""
        tokens = {view.token: name for name, view in views.items() if view.token}
        return cls(settings, MappingProxyType(dict(views)), MappingProxyType(tokens))

    @property
    def sites(self) -> tuple[SiteSettings, ...]:
        return self.settings.sites

    def site(self, name: str) -> SiteView | None:
        return self.by_name.get(name)

    @cached_property
    def created(self) -> Mapping[str, float]:
        """When each site the store was read for was created, by name."""
        return MappingProxyType(
            {name: view.created for name, view in self.by_name.items() if view.created is not None}
        )

    def for_host(self, host: str) -> SiteView | None:
        """The view of the site serving a Host header (``Settings.site_for_host``)."""
        site = self.settings.site_for_host(host)
        return None if site is None else self.by_name[site.name]

    def for_url(self, url: str) -> SiteView | None:
        """The view of the site an absolute URL belongs to (``Settings.site_for_url``)."""
        site = self.settings.site_for_url(url)
        return None if site is None else self.by_name[site.name]

    def for_token(self, token: str) -> SiteView | None:
        """The view of the site whose site token this is."""
        name = self.by_token.get(token)
        return None if name is None else self.by_name[name]
