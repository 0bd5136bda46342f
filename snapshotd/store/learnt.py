"""What a store keeps of what snapshotd learns from a site's pages: their fingerprints, the
query parameters that change nothing (:mod:`snapshotd.sites.param_learner`), and the kinds
of pages that read their device (:mod:`snapshotd.capture.profiles`). Part of
:class:`snapshotd.store.interface.Store`."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from snapshotd.pages.fingerprints import Print

__all__ = ["Learnt", "ParamRow"]


@dataclass(frozen=True)
class ParamRow:
    """A decision on one query parameter of a site."""

    site: str
    name: str
    state: str  # "ignored" or "kept"
    scope: str  # the path prefix it holds under
    pinned: bool  # set by an operator: learning leaves it alone
    updated_at: float


class Learnt(Protocol):
    """The store's part that keeps what is learnt of pages (store/params, store/device_kinds)."""

    async def prints(
        self, site: str, paths: Sequence[str], *, found: bool = False
    ) -> dict[str, Print]:
        """The fingerprints of the snapshots of ``paths`` that have one (store/params)."""
        ...

    async def variant_prints(self, site: str, page: str, limit: int) -> dict[str, Print]:
        """The fingerprints of at most ``limit`` snapshots of paths the crawler found that
        are ``page`` with a query (store/params)."""
        ...

    async def find_same_text(self, site: str, text_hash: str, path: str) -> str | None: ...

    async def device_kind(self, site: str, kind: str) -> tuple[int, bool]:
        """What is known of a kind of the site's pages that read their device: how many
        rendered alike in every profile, whether one differed (store/device_kinds)."""
        ...

    async def tell_device_kind(self, site: str, kind: str, *, differs: bool) -> None:
        """Add one page's check to the kind."""
        ...

    async def add_param_evidence(self, site: str, name: str, base: str, same: bool) -> None: ...

    async def param_evidence(self, site: str) -> dict[str, list[tuple[str, bool]]]: ...

    async def list_params(self, site: str | None = None) -> list[ParamRow]: ...

    async def put_param(
        self, site: str, name: str, state: str, scope: str, *, pinned: bool
    ) -> None: ...

    async def delete_param(self, site: str, name: str) -> bool: ...
