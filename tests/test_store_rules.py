"""The rules of the store that do not depend on the database are written once, above the
engines: what a capture's outcome writes (store/outcome.py) and which states expire
(store/interface.py). What is checked, by reading the engines' source:

- no engine module (the SQLite and PostgreSQL stores and their mixins) uses a name that only
  those rules need: the expiring states, the encoding of a capture, the statements that store
  its snapshot, its profile rows or a takeover of a group of copies;
- each engine's ``_enqueue_one`` asks ``queueing`` what to do with the row it finds, and no
  engine module spells an answer of that decision;
- each engine's versions of the schema are read from the one history (store/schema.py), not
  written in the engine;
- each engine's ``complete`` takes the outcome whole, never reads a field of it, and runs the
  statements of ``mark_path_stored`` and ``capture_writes``; each ``requeue_expired`` asks
  ``expiring``; ``complete`` has the same parameters in the interface and in each engine;
- no engine module checks an argument (raises ValueError or TypeError) or cuts a value to a
  length of its own (a slice bounded by a number): each engine's ``enqueue`` and
  ``enqueue_many`` ask ``check_priority``, its ``fail`` runs ``mark_path_failed``'s
  statement, and its ``_migrate`` asks ``versions_after`` which versions a database lacks.

Beside them, what those rules do, on both engines (the ``store`` fixture).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from snapshotd.store import SQLiteStore, StoreError
from snapshotd.store.outcome import ERROR_KEPT, CaptureOutcome
from snapshotd.store.postgres import PostgresStore
from snapshotd.store.queueing import Queueing, queueing

STORE = Path(__file__).resolve().parent.parent / "snapshotd" / "store"
ENGINES = ("sqlite.py", "postgres.py")
# Names only the shared rules use: an engine that names one is writing a rule again.
RULE_NAMES = {
    "EXPIRING",  # which states expire: interface.expiring
    "encode_capture",  # a capture's hash, gzip body and ETag: outcome.capture_writes
    "take_master",  # a group of copies moving to a new master: outcome.capture_writes
    "PROFILE_PUT",  # a capture's profile rows: outcome.capture_writes
    "PROFILE_DELETE",
    "SNAPSHOT_PUT",
    "_SNAPSHOT_PUT",
    "_FAILED",  # a failed capture's row: outcome.mark_path_failed
    "ERROR_KEPT",
}


def _tree(name: str) -> ast.Module:
    return ast.parse((STORE / name).read_text(), name)


def _engine_modules() -> list[str]:
    """The engines and every store module holding one of their mixins."""
    out = []
    for path in sorted(STORE.glob("*.py")):
        classes = [n.name for n in ast.walk(_tree(path.name)) if isinstance(n, ast.ClassDef)]
        if path.name in ENGINES or any(c.startswith(("SQLite", "Postgres")) for c in classes):
            out.append(path.name)
    return out


def _names_used(tree: ast.Module) -> set[str]:
    used = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
            used.add(node.id)
        elif isinstance(node, ast.Attribute):
            used.add(node.attr)
        elif isinstance(node, ast.alias):
            used.add(node.asname or node.name)
    return used


def _method(tree: ast.Module, name: str) -> ast.AsyncFunctionDef:
    (found,) = [
        n for n in ast.walk(tree) if isinstance(n, ast.AsyncFunctionDef) and n.name == name
    ]
    return found


def _calls(node: ast.AST) -> set[str]:
    calls = [c for c in ast.walk(node) if isinstance(c, ast.Call)]
    return {c.func.id for c in calls if isinstance(c.func, ast.Name)}


def _called_methods(node: ast.AST) -> set[str]:
    calls = [c for c in ast.walk(node) if isinstance(c, ast.Call)]
    return {c.func.attr for c in calls if isinstance(c.func, ast.Attribute)}


def test_the_engines_and_their_mixins_are_found():
    found = _engine_modules()
    engines = {"sqlite.py", "postgres.py", "copies.py", "profile_snapshots.py", "leases.py"}
    assert engines <= set(found)
    assert "outcome.py" not in found and "interface.py" not in found


@pytest.mark.parametrize("module", _engine_modules())
def test_no_engine_module_writes_a_rule_of_the_shared_code(module):
    assert _names_used(_tree(module)) & RULE_NAMES == set()


@pytest.mark.parametrize("module", ENGINES)
def test_an_engine_stores_a_capture_by_running_the_shared_statements(module):
    complete = _method(_tree(module), "complete")
    assert [a.arg for a in complete.args.args] == ["self", "site", "path", "owner", "outcome"]
    assert not complete.args.kwonlyargs
    read = [
        n for n in ast.walk(complete)
        if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name)
        and n.value.id == "outcome"
    ]
    assert read == [], "an engine reads no field of the outcome"
    assert {"mark_path_stored", "capture_writes"} <= _calls(complete)
    assert "expiring" in _calls(_method(_tree(module), "requeue_expired"))


# Checks of an argument: above the engines, once.
CHECKS = {"ValueError", "TypeError"}


def _own_checks(tree: ast.Module) -> list[str]:
    """What an engine module checks or cuts by itself, in its functions: each ``raise`` of an
    argument's error and each value cut to a length (a slice whose end is a number), as
    ``line: source``."""
    found = []
    functions = (ast.FunctionDef, ast.AsyncFunctionDef)
    for node in (n for f in ast.walk(tree) if isinstance(f, functions) for n in ast.walk(f)):
        raised = node.exc if isinstance(node, ast.Raise) else None
        called = raised.func if isinstance(raised, ast.Call) else raised
        if isinstance(called, ast.Name) and called.id in CHECKS:
            found.append(f"{node.lineno}: {ast.unparse(node)}")
        if isinstance(node, ast.Slice) and isinstance(node.upper, ast.Constant):
            found.append(f"{node.lineno}: [{ast.unparse(node)}]")
    return sorted(set(found))


@pytest.mark.parametrize("module", _engine_modules())
def test_no_engine_module_checks_an_argument_or_cuts_a_value(module):
    assert _own_checks(_tree(module)) == []


def test_the_check_finds_an_argument_checked_or_a_value_cut():
    tree = ast.parse(
        "def f(p, e):\n    if p > 3:\n        raise ValueError(p)\n    return e[:500]\n"
    )
    assert _own_checks(tree) == ["3: raise ValueError(p)", "4: [:500]"]


@pytest.mark.parametrize("module", ENGINES)
def test_an_engine_asks_the_shared_checks(module):
    tree = _tree(module)
    for method in ("enqueue", "enqueue_many"):
        # Asked, or left to the engine's enqueue_many.
        asks = _calls(_method(tree, method)) | _called_methods(_method(tree, method))
        assert "check_priority" in asks or "enqueue_many" in asks, method
    assert "check_priority" in _calls(_method(tree, "enqueue_many"))
    assert "mark_path_failed" in _calls(_method(tree, "fail"))
    assert "versions_after" in _calls(_method(tree, "_migrate"))


async def test_a_priority_outside_0_to_3_is_refused(store):
    for priority in (-1, 4):
        with pytest.raises(ValueError, match="priority must be 0-3"):
            await store.enqueue("s", "/a", priority)
        with pytest.raises(ValueError, match="priority must be 0-3"):
            await store.enqueue_many("s", [("/a", 0)], priority)
    assert await store.get_path("s", "/a") is None


async def test_a_failed_capture_keeps_its_snapshot_and_the_start_of_its_error(store):
    await store.enqueue("s", "/a", 1)
    await store.claim("me", 60)
    outcome = CaptureOutcome(html="<p>kept</p>", status=200, headers={}, final_url="u",
                             expires_at=0)
    assert await store.complete("s", "/a", "me", outcome)
    await store.enqueue("s", "/a", 1, force=True)
    await store.claim("me", 60)
    assert not await store.fail("s", "/a", "another", error="x", retry_at=5.0)
    assert await store.fail("s", "/a", "me", error="é" * 600, retry_at=5.0, status=503)
    record = await store.get_path("s", "/a")
    assert (record.state, record.error, record.status) == ("error", "é" * ERROR_KEPT, 503)
    snapshot = await store.get_snapshot("s", "/a")
    assert snapshot is not None and snapshot.html == "<p>kept</p>"


async def test_a_database_at_a_version_this_snapshotd_does_not_know_is_refused(store):
    newer = "INSERT INTO schema_migrations (version, applied_at) VALUES (1000, 0)"
    if isinstance(store, SQLiteStore):
        await store._writer.execute(newer)
        again = SQLiteStore(store.path)
    else:
        await store._db.execute(newer)
        again = PostgresStore(store.dsn)
    await store.close()
    with pytest.raises(StoreError, match="schema version 1000 is newer than this snapshotd"):
        await again.open()
    await again.close()


def test_the_interface_takes_the_outcome_whole():
    complete = _method(_tree("interface.py"), "complete")
    assert [a.arg for a in complete.args.args] == ["self", "site", "path", "owner", "outcome"]


def test_a_copy_cannot_take_over_a_group_of_copies():
    with pytest.raises(ValueError, match="cannot take over"):
        CaptureOutcome(
            html="x", status=200, headers={}, final_url="u", expires_at=0,
            duplicate_of="/a", takes_over="/b",
        )


@pytest.mark.parametrize(
    ("keep", "shared", "duplicate_of", "keeps"),
    [
        (True, False, None, True),
        (True, True, None, True),
        (True, False, "/a", True),
        (True, True, "/a", False),
        (False, False, None, False),
        (False, True, "/a", False),
    ],
)
def test_a_path_keeps_a_snapshot_unless_crawled_or_a_shared_copy(keep, shared, duplicate_of, keeps):
    outcome = CaptureOutcome(
        html="x", status=200, headers={}, final_url="u", expires_at=0, keep=keep,
        shared=shared, duplicate_of=duplicate_of,
    )
    assert outcome.keeps_snapshot is keeps


@pytest.mark.parametrize("module", ENGINES)
def test_an_engine_takes_its_schema_versions_from_the_one_history(module):
    (assign,) = [
        n for n in _tree(module).body
        if isinstance(n, (ast.Assign, ast.AnnAssign))
        and "MIGRATIONS" in {t.id for t in getattr(n, "targets", [getattr(n, "target", None)])
                             if isinstance(t, ast.Name)}
    ]
    call = assign.value
    assert isinstance(call, ast.Call) and isinstance(call.func, ast.Name)
    assert call.func.id == "migrations"
    assert [a.value for a in call.args] == [module.removesuffix(".py")]


# What enqueue answers for a row it finds: decided by store/queueing.py alone.
ANSWERS = {"fresh", "requeued", "reprioritised"}


@pytest.mark.parametrize("module", ENGINES)
def test_an_engine_enqueues_as_the_shared_decision_says(module):
    tree = _tree(module)
    assert "queueing" in _calls(_method(tree, "_enqueue_one"))
    strings = {n.value for n in ast.walk(tree) if isinstance(n, ast.Constant)}
    assert strings & ANSWERS == set()


@pytest.mark.parametrize(
    ("state", "expires_at", "priority", "hops", "force", "decided"),
    [
        ("processing", None, 3, 0, True, Queueing("processing")),
        ("pending", None, 1, 2, False, Queueing("pending")),
        ("pending", None, 2, 5, False, Queueing("reprioritised", "raise", 2)),
        ("pending", None, 1, 0, False, Queueing("pending", "raise", 0)),
        ("processed", 200.0, 3, 0, False, Queueing("fresh")),
        ("processed", 200.0, 0, 9, True, Queueing("requeued", "requeue", 2)),
        ("processed", 100.0, 0, 1, False, Queueing("requeued", "requeue", 1)),
        ("processed", None, 0, 3, False, Queueing("requeued", "requeue", 2)),
        ("crawled", 200.0, 0, 3, False, Queueing("requeued", "requeue", 2)),
        ("error", 200.0, 0, 3, False, Queueing("requeued", "requeue", 2)),
    ],
)
def test_what_enqueue_does_to_the_row_it_finds(state, expires_at, priority, hops, force, decided):
    # The row: its priority 1, its hops 2; now is 100.
    assert queueing(
        state, 1, 2, expires_at, priority=priority, hops=hops, force=force, now=100.0
    ) == decided
