"""Each site's own token (the SEO4Ajax-compatible face's, snapshotd.seo4ajax) and the stored
``expire_after`` floor, in both engines: made for the sites a store held before, kept while a
site's settings change, changed only by a rotation."""

from __future__ import annotations

import json
import re

import pytest

from snapshotd.store.site_rows import SITE_TOKENS
from tests.conftest import upgrade

TOKEN = re.compile(r"^[0-9a-f]{32}$")


async def test_a_site_gets_a_token_of_its_own_kept_until_it_is_rotated(store) -> None:  # type: ignore[no-untyped-def]
    await store.put_site("a", '{"origin":"http://127.0.0.1:1"}')
    await store.put_site("b", '{"origin":"http://127.0.0.1:2"}')
    rows = {r.name: r for r in await store.list_sites()}
    first = rows["a"].site_token
    assert TOKEN.match(first) and TOKEN.match(rows["b"].site_token)
    assert first != rows["b"].site_token
    # New settings, same token.
    await store.put_site("a", '{"origin":"http://127.0.0.1:3"}')
    assert {r.name: r for r in await store.list_sites()}["a"].site_token == first
    store.test_clock.now += 1
    rotated = await store.rotate_site_token("a")
    row = {r.name: r for r in await store.list_sites()}["a"]
    assert rotated is not None and TOKEN.match(rotated) and rotated != first
    assert row.site_token == rotated
    assert row.updated_at == store.test_clock.now  # other processes' registries see it
    assert await store.rotate_site_token("nobody") is None


@pytest.mark.parametrize("engine", ["sqlite", "postgres"])
async def test_sites_stored_before_tokens_get_one_each_and_a_zero_expiry_becomes_a_minute(  # type: ignore[no-untyped-def]
    engine, tmp_path, monkeypatch
) -> None:
    async with upgrade(engine, tmp_path) as db:
        module, full, make = db.module, db.full, db.make
        settings = {
            "zero": {"origin": "http://127.0.0.1:1", "expire_after": 0.0, "seeds": ["/"]},
            "half": {"expire_after": 30.5, "origin": "http://127.0.0.1:2"},
            "day": {"origin": "http://127.0.0.1:3", "expire_after": 86400.0},
        }
        # Back to the schema before site tokens (and every step after them).
        monkeypatch.setattr(module, "MIGRATIONS", full[: full.index(SITE_TOKENS[engine])])
        old = make()
        await old.open()
        insert = (
            "INSERT INTO sites (name, settings, paused, created_at, updated_at) "
            "VALUES ({0}, {1}, 0, 1, 1)"
        )
        for name, value in settings.items():
            text = json.dumps(value, separators=(",", ":"))
            if engine == "sqlite":
                async with old._lock:
                    await old._writer.execute(insert.format("?", "?"), (name, text))
            else:
                await old._db.execute(insert.format("$1", "$2"), name, text)
        # Not JSON at all (by hand): left as it is, and the upgrade goes on.
        if engine == "sqlite":
            async with old._lock:
                await old._writer.execute(insert.format("'bad'", "'{\"expire_after\":0'"))
        else:
            await old._db.execute(insert.format("'bad'", "'{\"expire_after\":0'"))
        await old.close()
        monkeypatch.setattr(module, "MIGRATIONS", full)
        new = make()
        await new.open()
        try:
            assert await new.schema_version() == len(full)
            rows = {r.name: r for r in await new.list_sites()}
            tokens = [r.site_token for r in rows.values()]
            assert all(TOKEN.match(t) for t in tokens) and len(set(tokens)) == 4
            stored = {n: json.loads(r.settings) for n, r in rows.items() if n != "bad"}
            assert stored["zero"] == {**settings["zero"], "expire_after": 60.0}
            assert stored["half"] == {**settings["half"], "expire_after": 60.0}
            assert stored["day"] == settings["day"]
            assert rows["bad"].settings == '{"expire_after":0'
        finally:
            await new.close()

