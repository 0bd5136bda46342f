"""`snapshotd rules check` and `snapshotd rules eval`: print, then return the exit code."""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING

from snapshotd.cli.common import UserError
from snapshotd.config.loading import load_settings
from snapshotd.config.settings import SiteSettings
from snapshotd.http_text.urls import TRACKING, BadRequest, site_path_from_url
from snapshotd.rewrite.errors import RulesError
from snapshotd.rewrite.ruleset import load_rules
from snapshotd.store.interface import StoreError

if TYPE_CHECKING:
    from snapshotd.config.settings import SiteSettings


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


# The server's NF question (``StoreFacts.captured``): was this path of this site ever captured?
_CAPTURED = "SELECT 1 FROM paths WHERE site = {} AND path = {} AND captured_at IS NOT NULL"


def _captured_in_postgres(db: str, site: str) -> tuple[Callable[[str], bool], Callable[[], None]]:
    """The NF oracle on a PostgreSQL store; one clear error when it cannot be reached."""
    import asyncio

    import asyncpg

    from snapshotd.store.postgres import CONNECT_ERRORS, PostgresStore

    loop = asyncio.new_event_loop()
    try:
        conn = loop.run_until_complete(asyncpg.connect(db, timeout=10))
    except CONNECT_ERRORS as exc:
        loop.close()
        raise PostgresStore(db).failure(exc) from None

    def captured(path: str) -> bool:
        try:
            query = conn.fetchval(_CAPTURED.format("$1", "$2"), site, path)
            return loop.run_until_complete(query) is not None
        except asyncpg.UndefinedTableError:  # no store there yet
            return False

    def close() -> None:
        loop.run_until_complete(conn.close())
        loop.close()

    return captured, close


def _captured_in(db: str | None, site: str) -> tuple[Callable[[str], bool], Callable[[], None]]:
    """An NF oracle reading the store's `paths` table; a missing file or table means none."""
    from snapshotd.store import is_postgres

    if db and is_postgres(db):
        return _captured_in_postgres(db, site)
    if not db or not os.path.exists(db):
        return (lambda path: False), (lambda: None)
    try:
        conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    except sqlite3.Error:
        return (lambda path: False), (lambda: None)

    def captured(path: str) -> bool:
        try:
            row = conn.execute(_CAPTURED.format("?", "?"), (site, path)).fetchone()
        except sqlite3.Error:
            return False
        return row is not None

    return captured, conn.close


def eval_command(
    rules_path: str,
    headers: list[str],
    urls: list[str],
    db: str | None,
    site: SiteSettings | None = None,
) -> int:
    """Print one JSON object per URL (SPEC section 6); exit 2 on a bad file or header.

    Each URL is first made a site path as the proxy makes one for ``site`` (its ignored
    query parameters dropped; without a site, the default ones); one the proxy would refuse
    is printed as that status. ``NF`` asks whether that path of that site (``default``
    without one) was ever captured, as the server does."""
    ignore = site.ignored_params if site is not None else TRACKING
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
    try:
        captured, close = _captured_in(db, site.name if site is not None else "default")
    except StoreError as exc:
        print(f"snapshotd: {exc}", file=sys.stderr)
        return 2
    try:
        for url in urls:
            try:
                path = site_path_from_url(url, ignore)
                if path is None:
                    raise BadRequest("not an http(s) URL")
            except BadRequest as exc:
                print(json.dumps({"url": url, "action": "status", "status": exc.status}))
                continue
            decision = rules.evaluate(path, host=host, headers=parsed, is_captured=captured)
            print(json.dumps(decision.to_json(url)))
    finally:
        close()
    return 0


def cmd_rules(args: argparse.Namespace) -> int:
    if args.rules_command == "check":
        return check_command(args.file)
    return eval_command(args.rules, args.header or [], args.url, args.db, _eval_site(args))


def _eval_site(args: argparse.Namespace) -> SiteSettings | None:
    """The site ``rules eval`` evaluates for (its ignored parameters, its paths for ``NF``):
    ``--site`` of ``--config``, else the site whose rules file is the one evaluated, else the
    first site; None without a config."""
    if not args.config:
        if args.site:
            raise UserError("--site names a site of --config, and no --config was given")
        return None
    sites = load_settings(args.config).sites
    if args.site:
        site = next((s for s in sites if s.name == args.site), None)
        if site is None:
            raise UserError(f"{args.config}: no site is named {args.site!r}")
        return site
    rules = os.path.realpath(args.rules)
    site = next((s for s in sites if s.rules and os.path.realpath(s.rules) == rules), None)
    return site or (sites[0] if sites else None)
