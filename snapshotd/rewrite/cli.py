"""`snapshotd rules check` and `snapshotd rules eval`: print, then return the exit code."""

from __future__ import annotations

import json
import os
import sqlite3
import sys
from collections.abc import Callable

from .errors import RulesError
from .ruleset import load_rules


def check_command(path: str) -> int:
    """Validate a rules file: "FILE: OK (N rules, DIALECT dialect)" or "FILE:LINE: reason"."""
    try:
        rules = load_rules(path)
    except RulesError as e:
        print(e, file=sys.stderr)
        return 2
    print(f"{path}: OK ({len(rules)} rules, {rules.dialect} dialect)")
    return 0


def _parse_headers(headers: list[str]) -> dict[str, str] | str:
    out: dict[str, str] = {}
    for h in headers:
        name, colon, value = h.partition(":")
        if not colon or not name.strip() or name.strip() != name.rstrip():
            return h
        out[name.strip()] = value.strip()
    return out


def _captured_in(db: str | None) -> tuple[Callable[[str], bool], Callable[[], None]]:
    """An NF oracle reading the store's `paths` table; a missing file or table means none."""
    if not db or not os.path.exists(db):
        return (lambda path: False), (lambda: None)
    try:
        conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    except sqlite3.Error:
        return (lambda path: False), (lambda: None)

    def captured(path: str) -> bool:
        try:
            row = conn.execute(
                "SELECT 1 FROM paths WHERE path = ? AND state = 'processed'", (path,)
            ).fetchone()
        except sqlite3.Error:
            return False
        return row is not None

    return captured, conn.close


def eval_command(rules_path: str, headers: list[str], urls: list[str], db: str | None) -> int:
    """Print one JSON object per URL (SPEC section 6); exit 2 on a bad file or header."""
    try:
        rules = load_rules(rules_path)
    except RulesError as e:
        print(e, file=sys.stderr)
        return 2
    parsed = _parse_headers(headers)
    if isinstance(parsed, str):
        print(f"bad header {parsed!r}: expected 'Name: value'", file=sys.stderr)
        return 2
    host = next((v for k, v in parsed.items() if k.lower() == "host"), "")
    captured, close = _captured_in(db)
    try:
        for url in urls:
            decision = rules.evaluate(url, host=host, headers=parsed, is_captured=captured)
            print(json.dumps(decision.to_json(url)))
    finally:
        close()
    return 0
