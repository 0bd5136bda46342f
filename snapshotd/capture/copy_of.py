"""Which stored page of a site a new capture is a copy of (SPEC 5.2): :func:`copy_of`."""

from __future__ import annotations

from snapshotd.config.settings import SiteSettings
from snapshotd.pages.fingerprints import MIN_WORDS, Print, same_page
from snapshotd.sites.param_learner import without_each_param
from snapshotd.store.interface import Store
from snapshotd.store.outcome import content_hash

__all__ = ["copy_of"]


async def copy_of(
    store: Store, site: SiteSettings, path: str, html: str, print_: Print
) -> str | None:
    """Another path of ``site`` whose stored capture is the same as ``path``'s new one,
    ``html`` with fingerprint ``print_``: the same content, or, on a site with ``dedup =
    "content"``, what shows a reader the same (:func:`_same_page`); None when none is."""
    same = await store.find_same_content(site.name, content_hash(html), path)
    if same is None and site.dedup == "content":
        same = await _same_page(store, site, path, print_)
    return same


async def _same_page(store: Store, site: SiteSettings, path: str, print_: Print) -> str | None:
    """A page of the site that shows a reader what ``print_`` shows: one with the same
    main text, or the page ``path`` makes without one of its parameters, when it is the
    same page by :func:`~snapshotd.pages.fingerprints.same_page`."""
    if print_.words >= MIN_WORDS:
        same = await store.find_same_text(site.name, print_.text_hash, path)
        if same is not None:
            return same
    variants = [p for _, p in without_each_param(path)]
    prints = await store.prints(site.name, variants)
    return next((p for p in variants if p in prints and same_page(print_, prints[p])), None)
