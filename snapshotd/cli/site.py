"""``snapshotd site list|show|set|pause|resume|restart|round|delete``: the sites in the store,
changed there directly; every running process sees a change within a second."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tomllib
from collections.abc import Sequence
from typing import Any, TextIO

from snapshotd.cli.common import UserError, existing_db, settings_of
from snapshotd.config.loading import site_from_mapping, site_to_mapping
from snapshotd.config.settings import SiteSettings
from snapshotd.config.values import ConfigError
from snapshotd.crawl.job_json import PROGRESS, V3, describe_job
from snapshotd.crawl.rounds import start_round
from snapshotd.rewrite import RulesError, site_rules
from snapshotd.sites.registry import site_json
from snapshotd.store import STATES, Store, open_store
from snapshotd.store.interface import SiteRow, iso_time
from snapshotd.store.job_state import job_state, restart_job

__all__ = ["SiteCommandError", "run_site_command"]


class SiteCommandError(Exception):
    """A user error: one line."""


def parse_assignment(text: str) -> tuple[list[str], Any]:
    """``key=value`` (``bots.add=[...]`` for a nested key): the value read as a TOML value
    (``500``, ``true``, ``["/", "/pricing"]``, ``"7d"``), else taken as a string."""
    key, sep, raw = text.partition("=")
    if not sep or not key.strip():
        raise SiteCommandError(f"{text!r}: expected key=value, e.g. max_pages=500")
    try:
        value = tomllib.loads(f"v = {raw}")["v"]
    except tomllib.TOMLDecodeError:
        value = raw
    return key.strip().split("."), value


def assign(settings: dict[str, Any], assignments: Sequence[str]) -> dict[str, Any]:
    out = json.loads(json.dumps(settings))
    for text in assignments:
        keys, value = parse_assignment(text)
        target = out
        for key in keys[:-1]:
            target = target.setdefault(key, {})
            if not isinstance(target, dict):
                raise SiteCommandError(f"{text!r}: {key} is not a table")
        target[keys[-1]] = value
    return out


def _stored_mapping(row: SiteRow) -> dict[str, Any]:
    """A stored site's keys; none when they are not a JSON object (set starts afresh)."""
    try:
        raw = json.loads(row.settings)
    except ValueError:
        return {}
    return raw if isinstance(raw, dict) else {}


def stored_site(row: SiteRow) -> SiteSettings:
    """The site a store row holds, checked as any site is; SiteCommandError says why not
    in one line (a row written by hand, or by another version of snapshotd)."""
    raw = _stored_mapping(row)
    if not raw:
        raise SiteCommandError(f"site {row.name} in the store cannot be read: not a JSON object")
    try:
        return site_from_mapping(raw, "site")
    except ConfigError as exc:
        raise SiteCommandError(f"site {row.name} in the store cannot be read: {exc}") from None


async def run_site_command(
    db: str, action: str, name: str | None, assignments: Sequence[str], out: TextIO
) -> int:
    store = open_store(db)
    await store.open()
    try:
        return await _run(store, action, name, assignments, out)
    finally:
        await store.close()


async def _run(
    store: Store, action: str, name: str | None, assignments: Sequence[str], out: TextIO
) -> int:
    rows = {row.name: row for row in await store.list_sites()}
    if action == "list":
        counts = await store.counts()
        if not rows:
            out.write("(no sites yet: snapshotd site set NAME origin=URL)\n")
            return 0
        width = max(len("site"), *(len(n) for n in rows))
        out.write(f"{'site':<{width}}  {'state':<10}  {'paths':>8}  origin\n")
        for row in rows.values():
            try:  # a site no process can read is listed as such, with why
                origin = stored_site(row).origin
                state = "paused" if row.paused else "active"
            except SiteCommandError as exc:
                origin, state = str(exc), "unreadable"
            total = sum(counts.get(row.name, {}).values())
            out.write(f"{row.name:<{width}}  {state:<10}  {total:>8}  {origin}\n")
        return 0
    if not name:
        raise SiteCommandError(f"site {action}: give the site's name")
    found = rows.get(name)
    if action == "set":
        settings = assign(_stored_mapping(found) if found else {}, assignments)
        try:
            site = site_from_mapping({**settings, "name": name}, "site")
            site_rules(site)
        except (ConfigError, RulesError) as exc:
            raise SiteCommandError(str(exc)) from None
        await store.put_site(name, site_json(site))
        out.write(f"{'changed' if found else 'created'} site {name}\n")
        return 0
    if found is None:
        raise SiteCommandError(f"no site is named {name!r}")
    row = found
    site = stored_site(row)
    if action == "show":
        of_site = (await store.counts()).get(name, {})
        job = await describe_job(
            store, site, paused=row.paused, created=row.created_at, v3_url=V3
        )
        shown = {
            "name": name,
            "paused": row.paused,
            "created_at": iso_time(row.created_at),
            "updated_at": iso_time(row.updated_at),
            "counts": {state: of_site.get(state, 0) for state in STATES},
            "job": {key: job[key] for key in PROGRESS},
            "settings": site_to_mapping(site),
        }
        out.write(json.dumps(shown, indent=2) + "\n")
    elif action in ("pause", "resume"):
        await store.set_site_paused(name, action == "pause")
        out.write(f"{'paused' if action == 'pause' else 'resumed'} site {name}\n")
    elif action == "restart":
        n = await restart_job(store, name)
        out.write(f"restarted site {name}: removed {n} paths; crawling again from its seeds\n")
    elif action == "round":
        n = await start_round(store, site, await job_state(store, name, row.created_at))
        out.write(f"started a new round of site {name}: {n} pages queued again\n")
    elif action == "delete":
        n = await store.clear_site(name, remove=True)
        out.write(f"deleted site {name} and its {n} paths\n")
    return 0


def cmd_site(args: argparse.Namespace) -> int:
    db = settings_of(args).db
    if args.action != "set":
        db = existing_db(args)
    try:
        return asyncio.run(run_site_command(db, args.action, args.name, args.setting, sys.stdout))
    except SiteCommandError as exc:
        raise UserError(str(exc)) from None
