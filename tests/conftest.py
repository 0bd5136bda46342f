"""Fixtures shared by several test files."""

from __future__ import annotations

import pytest

from snapshotd.store.sqlite import SQLiteStore


class Clock:
    """A clock the test moves by hand: ``clock.now += 31``."""

    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
async def store(tmp_path):
    """An open SQLite store on a real file, its clock as ``store.test_clock``."""
    clock = Clock()
    s = SQLiteStore(str(tmp_path / "s.db"), clock=clock)
    await s.open()
    s.test_clock = clock  # type: ignore[attr-defined]
    yield s
    await s.close()
