"""Which path of a group of copies stands for it (its master), as SPEC 5.2 says: never a
path's own query variant, else the one the crawler found, else the one with fewer query
parameters, else the first captured. Pure."""

from __future__ import annotations

from snapshotd.http_text.urls import split_site_path
from snapshotd.store.interface import PathRecord

__all__ = ["takes_over"]


def _page_and_params(path: str) -> tuple[str, set[str]]:
    base, query, fragment = split_site_path(path)
    page = base + (f"#!{fragment}" if fragment is not None else "")
    return page, {p for p in (query or "").split("&") if p}


def takes_over(path: PathRecord, master: PathRecord) -> bool:
    """Whether ``path``, a copy of ``master``, is to stand for the group instead: when
    ``master`` is ``path`` with parameters added (a path is never a copy of its own variant),
    else when the crawler found ``path`` and not ``master``, else when ``path`` has fewer
    query parameters. Otherwise the first captured stays."""
    (page, params), (master_page, master_params) = (
        _page_and_params(path.path), _page_and_params(master.path))
    if page == master_page and params != master_params:
        if params < master_params or master_params < params:
            return params < master_params
    if path.found != master.found:
        return path.found
    return len(params) < len(master_params)
