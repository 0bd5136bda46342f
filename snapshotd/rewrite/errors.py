"""The one error a rules file can raise."""

from __future__ import annotations


class RulesError(Exception):
    """A rules file that cannot be used: `str(e)` is "FILE:LINE: reason"."""

    def __init__(self, file: str, line: int, reason: str) -> None:
        super().__init__(f"{file}:{line}: {reason}")
        self.file = file
        self.line = line
        self.reason = reason
