"""What the rules decided for one URL."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

ACTIONS = ("none", "rewrite", "redirect", "status")


@dataclass(frozen=True)
class RulesOutcome:
    """The outcome of a rule set for one site path.

    `path` is the resulting site path (query and `#!` fragment included) for none/rewrite, and
    the path redirected to for redirect; `status` is set for redirect and status; `capture` is
    true when a SEO4Ajax `C` rule matched.
    """

    action: str
    path: str
    status: int | None = None
    location: str | None = None
    capture: bool = False

    def to_json(self, url: str) -> dict[str, Any]:
        """The object `snapshotd rules eval` prints for `url`."""
        out: dict[str, Any] = {"url": url, "action": self.action}
        if self.action == "redirect":
            out["status"] = self.status
            out["location"] = self.location
        elif self.action == "status":
            out["status"] = self.status
        else:
            out["path"] = self.path
        if self.capture:
            out["capture"] = True
        return out
