"""A crawl of a Lit app whose navigation is drawn inside its components' shadow roots: the
crawler follows those links (real Chromium, ``snapshotd crawl`` on a real SQLite file), where a
crawler reading the light DOM alone stops at its seed."""

from __future__ import annotations

import sqlite3

import pytest

from tests.corpus.webcomponents import fixtures
from tests.test_cli import run

pytestmark = pytest.mark.browser
origin = fixtures.origin


def test_a_crawl_follows_the_links_a_lit_app_draws_in_its_shadow_roots(tmp_path, origin) -> None:  # type: ignore[no-untyped-def]
    db = str(tmp_path / "crawl.db")
    done = run("crawl", "--origin", origin, "--db", db, "--seed", "/lit-shop?id=1",
               "--set", "obey_robots=false", "--set", "devices=mobile")
    assert done.returncode == 0, done.stderr
    conn = sqlite3.connect(db)
    try:
        states = dict(conn.execute("SELECT path, state FROM paths").fetchall())
    finally:
        conn.close()
    # Both products and the about page are linked from <shop-nav>'s shadow root alone.
    assert states.get("/lit-shop?id=2") == "processed", states
    assert "/lit-shop-about" in states, states
