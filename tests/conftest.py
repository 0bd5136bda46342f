"""Fixtures shared by several test files, and the suite's own report: how long it took and
how many tests ran in each process (one line at the end), and the seed of what is drawn at
random (``--seed N`` repeats a run's draws: ``random`` is seeded from it and the test's id
before each test, whatever process runs it and in whatever order)."""

from __future__ import annotations

import contextlib
import os
import random
import time
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

import pytest

from snapshotd.store.sqlite import SQLiteStore

# The PostgreSQL server the store tests also run against. Where none answers they are
# skipped, unless this variable names one explicitly (then it must answer).
POSTGRES = os.environ.get("SNAPSHOTD_TEST_POSTGRES", "postgresql://postgres@127.0.0.1:5432/test")


class Clock:
    """A clock the test moves by hand: ``clock.now += 31``."""

    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


async def postgres_schema() -> tuple[str, str]:
    """A new, empty schema on the test server: (its name, a db URL that uses it)."""
    import asyncpg

    name = f"snapshotd_test_{uuid.uuid4().hex[:12]}"
    try:
        conn = await asyncpg.connect(POSTGRES, timeout=5)
    except (OSError, TimeoutError, asyncpg.PostgresError) as exc:
        if "SNAPSHOTD_TEST_POSTGRES" in os.environ:
            raise
        pytest.skip(f"no PostgreSQL at {POSTGRES}: {exc}")
    try:
        await conn.execute(f"CREATE SCHEMA {name}")
    finally:
        await conn.close()
    joiner = "&" if "?" in POSTGRES else "?"
    return name, f"{POSTGRES}{joiner}search_path={name}"


async def drop_postgres_schema(name: str) -> None:
    import asyncpg

    conn = await asyncpg.connect(POSTGRES, timeout=5)
    try:
        await conn.execute(f"DROP SCHEMA {name} CASCADE")
    finally:
        await conn.close()


@pytest.fixture(params=["sqlite", "postgres"])
async def store(request, tmp_path):
    """An open store, on a real SQLite file or in a fresh PostgreSQL schema, its clock as
    ``store.test_clock``."""
    clock = Clock()
    if request.param == "sqlite":
        s = SQLiteStore(str(tmp_path / "s.db"), clock=clock)
        schema = None
    else:
        from snapshotd.store.postgres import PostgresStore

        schema, url = await postgres_schema()
        s = PostgresStore(url, clock=clock, pool_size=4)
    try:
        await s.open()
        s.test_clock = clock  # type: ignore[attr-defined]
        yield s
        await s.close()
    finally:
        if schema is not None:
            await drop_postgres_schema(schema)


@dataclass
class Upgrade:
    """One database of an engine to upgrade: its store module (whose ``MIGRATIONS`` a test
    cuts short to build the older schema), the full list of its schema steps, and ``make``,
    a new store on that database."""

    module: Any
    full: list[str]
    make: Callable[[], Any]


@contextlib.asynccontextmanager
async def upgrade(engine: str, tmp_path: Any) -> AsyncIterator[Upgrade]:
    """A database of ``engine`` (a SQLite file, or a PostgreSQL schema dropped afterwards)
    for a test that builds an older schema and upgrades it."""
    from snapshotd.store import sqlite as sqlite_store

    if engine == "sqlite":
        yield Upgrade(
            sqlite_store,
            list(sqlite_store.MIGRATIONS),
            lambda: SQLiteStore(str(tmp_path / "s.db"), clock=Clock()),
        )
        return
    from snapshotd.store import postgres as postgres_store

    schema, url = await postgres_schema()
    try:
        yield Upgrade(
            postgres_store,
            list(postgres_store.MIGRATIONS),
            lambda: postgres_store.PostgresStore(url, clock=Clock(), pool_size=2),
        )
    finally:
        await drop_postgres_schema(schema)


# --------------------------------------------------------------------- the suite's report

_STARTED = pytest.StashKey[float]()
# Tests run in this process; on xdist's controller, by each worker (by its id).
_RAN: dict[str, int] = {}


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--seed", type=int, default=None,
        help="seed of what the tests draw at random (default: a new one, printed at the end)",
    )


def pytest_configure(config: pytest.Config) -> None:
    # Drawn once, by the process that starts the run: xdist hands its options to the others.
    if config.option.seed is None:
        config.option.seed = random.SystemRandom().randrange(10**9)
    config.stash[_STARTED] = time.monotonic()


def pytest_report_header(config: pytest.Config) -> str:
    return f"random seed: {config.option.seed} (repeat with --seed {config.option.seed})"


def pytest_runtest_protocol(item: pytest.Item) -> None:
    """Counted where it runs (not on xdist's controller, which runs none)."""
    _RAN["main"] = _RAN.get("main", 0) + 1


def pytest_runtest_setup(item: pytest.Item) -> None:
    random.seed(f"{item.config.option.seed}:{item.nodeid}")


def pytest_sessionfinish(session: pytest.Session) -> None:
    workeroutput = getattr(session.config, "workeroutput", None)
    if workeroutput is not None:  # an xdist worker: its count goes to the controller
        workeroutput["tests_ran"] = _RAN.get("main", 0)


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: Any, error: Any) -> None:
    """On xdist's controller, as a worker ends: how many tests it ran."""
    _RAN[node.gateway.id] = getattr(node, "workeroutput", {}).get("tests_ran", 0)


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    seconds = time.monotonic() - config.stash[_STARTED]
    each = ", ".join(f"{name} {n}" for name, n in sorted(_RAN.items())) or "none"
    terminalreporter.write_line(
        f"suite: {sum(_RAN.values())} tests in {seconds:.0f} s (by process: {each}); "
        f"random seed {config.option.seed} (repeat with --seed {config.option.seed})"
    )
