"""``snapshotd status`` and ``snapshotd report`` on a store the crawler filled."""

from __future__ import annotations

import csv
import io
import json

import pytest

from snapshotd.cli import main
from snapshotd.store.outcome import CaptureOutcome
from snapshotd.store.sqlite import SQLiteStore


class Clock:
    now = 1_700_000_000.0  # 2023-11-14T22:13:20Z

    def __call__(self) -> float:
        return self.now


@pytest.fixture
async def db(tmp_path):
    path = str(tmp_path / "r.db")
    async with SQLiteStore(path, clock=Clock()) as store:
        await store.enqueue_many("shop", [("/", 0), ("/a", 1), ("/b,c", 1)], 1)
        await store.enqueue("shop", "/asked", 2)
        await store.add_ignored("shop", "/admin/x", hops=1, reason="ignored")
        await store.enqueue("blog", "/post", 3)
        await store.enqueue("blog", "/gone", 1)
        await store.claim_path("blog", "/gone", "w", 60)
        await store.complete(
            "blog", "/gone", "w",
            CaptureOutcome(html="<p>oops</p>", status=404, headers={}, final_url="",
                           expires_at=Clock.now + 86400, not_found="shows the not-found view"),
        )
        await store.claim_path("shop", "/", "w", 60)
        await store.complete(
            "shop",
            "/",
            "w",
            CaptureOutcome(html="<p>home</p>",
                status=200,
                headers={},
                final_url="",
                expires_at=Clock.now + 86400),
        )
        await store.claim_path("shop", "/a", "w", 60)
        await store.complete(
            "shop",
            "/a",
            "w",
            CaptureOutcome(html="<p>home</p>",
                status=200,
                headers={},
                final_url="",
                expires_at=Clock.now + 86400,
                duplicate_of="/",
                readiness_limit=True),  # still changing when the readiness limit ended it
        )
        await store.claim_path("shop", "/b,c", "w", 60)
        await store.fail(
            "shop", "/b,c", "w", error='http 503, "busy"', retry_at=Clock.now + 60, status=503
        )
    return path


def test_report_csv(db, capsys):
    assert main(["report", "--db", db]) == 0
    rows = list(csv.reader(io.StringIO(capsys.readouterr().out)))
    assert rows[0] == [
        "site",
        "path",
        "state",
        "priority",
        "status",
        "captured_at",
        "expires_at",
        "hops",
        "duplicate_of",
        "error",
        "profiles",
        "readiness_limit",
        "not_found",
    ]
    by_path = {row[1]: row for row in rows[1:]}
    assert len(rows) == 8
    # Why a path is answered as its site's not-found view (SPEC 5.6).
    assert by_path["/gone"][4] == "404" and by_path["/gone"][12] == "shows the not-found view"
    assert by_path["/"] == [
        "shop",
        "/",
        "processed",
        "1",
        "200",
        "2023-11-14T22:13:20Z",
        "2023-11-15T22:13:20Z",
        "0",
        "",
        "",
        "mobile",  # its own snapshot serves every device profile
        "False",
        "",
    ]
    assert by_path["/a"][8] == "/" and by_path["/a"][11] == "True"
    assert by_path["/b,c"] == [
        "shop",
        "/b,c",
        "error",
        "1",
        "503",
        "",
        "2023-11-14T22:14:20Z",
        "1",
        "",
        'http 503, "busy"',
        "",
        "False",
        "",
    ]
    assert by_path["/asked"][2:4] == ["pending", "2"]
    assert by_path["/admin/x"][2:4] == ["ignored", "0"]
    assert by_path["/post"][:4] == ["blog", "/post", "pending", "3"]


def test_report_jsonl(db, capsys):
    assert main(["report", "--db", db, "--format", "jsonl"]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    first = rows[0]
    assert list(first) == [
        "site",
        "path",
        "state",
        "priority",
        "status",
        "captured_at",
        "expires_at",
        "hops",
        "duplicate_of",
        "error",
        "profiles",
        "readiness_limit",
        "not_found",
    ]
    assert first["captured_at"] == "2023-11-14T22:13:20Z" and first["status"] == 200
    assert first["readiness_limit"] is False and first["not_found"] is None
    assert [r["not_found"] for r in rows if r["path"] == "/gone"] == ["shows the not-found view"]


def test_status(db, capsys):
    assert main(["status", "--db", db]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == [
        "site",
        "pending",
        "processing",
        "processed",
        "crawled",
        "error",
        "ignored",
        "total",
    ]
    assert lines[1].split() == ["blog", "1", "0", "1", "0", "0", "0", "2"]
    assert lines[2].split() == ["shop", "1", "0", "2", "0", "1", "1", "5"]
