"""The ``snapshotd`` command (SPEC section 1). User errors print one line and exit 2."""

from __future__ import annotations

import argparse
import asyncio
import csv
import json
import logging
import os
import sys
from collections.abc import Sequence
from typing import Any

from snapshotd.config import ConfigError, Settings, SiteSettings, load_settings
from snapshotd.rewrite import RulesError, RuleSet, load_site_rules
from snapshotd.store import STATES, PathRecord, StoreError, is_postgres, open_store
from snapshotd.store.base import iso_time

log = logging.getLogger("snapshotd")


class UserError(Exception):
    """Stops a command with one line on stderr and exit status 2."""


def _setup_logging(verbose: bool = False) -> None:
    logging.basicConfig(
        level=logging.DEBUG if verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s %(message)s",
        stream=sys.stderr,
    )
    # httpx logs every request at INFO: far too much for a proxy's log.
    for name in ("httpx", "httpcore"):
        logging.getLogger(name).setLevel(logging.WARNING)


def _settings(args: argparse.Namespace, *, need_site: bool = False) -> Settings:
    overrides = {
        key: getattr(args, key, None)
        for key in ("host", "port", "db", "origin", "miss_wait", "workers")
    }
    settings = load_settings(getattr(args, "config", None), overrides=overrides)
    if need_site and not settings.sites:
        raise UserError("no site to serve: give --origin URL or a [[site]] in the config file")
    return settings


def _check_rules(settings: Settings) -> dict[str, RuleSet]:
    try:
        return load_site_rules(settings)
    except RulesError as exc:
        raise UserError(str(exc)) from None


def _check_chromium(settings: Settings) -> str:
    from snapshotd.render import ChromiumNotFound, find_chromium

    try:
        return find_chromium(settings.browser)
    except ChromiumNotFound as exc:
        raise UserError(str(exc)) from None


async def _check_store(db: str) -> None:
    """Open (creating or upgrading) and close the store: a StoreError is one line."""
    store = open_store(db)
    await store.open()
    await store.close()


# ---------------------------------------------------------------------------- commands


def cmd_serve(args: argparse.Namespace) -> int:
    from snapshotd.app import create_app
    from snapshotd.serving import serve_one, serve_workers

    settings = _settings(args, need_site=True)
    rules = _check_rules(settings)
    _check_chromium(settings)
    asyncio.run(_check_store(settings.db))
    if settings.workers > 1:
        try:
            return serve_workers(settings, crawler=not args.no_crawler, rules=rules)
        except OSError as exc:
            raise UserError(
                f"cannot listen on {settings.host}:{settings.port}: {exc.strerror or exc}"
            ) from None
    app = create_app(settings, crawler=not args.no_crawler, rules=rules)
    log.info("listening on http://%s:%d", settings.host, settings.port)
    return 0 if serve_one(app, settings) else 2


def cmd_worker(args: argparse.Namespace) -> int:
    from snapshotd.crawl.commands import run_worker

    settings = _settings(args, need_site=True)
    _check_rules(settings)
    _check_chromium(settings)
    return asyncio.run(run_worker(settings))


def cmd_crawl(args: argparse.Namespace) -> int:
    from snapshotd.crawl.commands import run_crawl

    if args.max_pages is not None and args.max_pages < 1:
        raise UserError("--max-pages must be at least 1")
    settings = _settings(args, need_site=True)
    _check_rules(settings)
    _check_chromium(settings)
    return asyncio.run(run_crawl(settings, seeds=args.seed or None, max_pages=args.max_pages))


def cmd_capture(args: argparse.Namespace) -> int:
    from snapshotd.render import capture_command

    settings = _settings(args)
    _check_chromium(settings)
    return asyncio.run(capture_command(args.url, settings, args.output))


def cmd_rules(args: argparse.Namespace) -> int:
    from snapshotd.rewrite.cli import check_command, eval_command

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


REPORT_COLUMNS = (
    "site", "path", "state", "priority", "status", "captured_at", "expires_at", "hops",
    "duplicate_of", "error",
)


def report_row(r: PathRecord) -> dict[str, Any]:
    return {
        "site": r.site,
        "path": r.path,
        "state": r.state,
        "priority": r.priority,
        "status": r.status,
        "captured_at": iso_time(r.captured_at) or "",
        "expires_at": iso_time(r.expires_at) or "",
        "hops": r.hops,
        "duplicate_of": r.duplicate_of,
        "error": r.error,
    }


async def _status(db: str, out: Any) -> int:
    store = open_store(db)
    await store.open()
    try:
        counts = await store.counts()
    finally:
        await store.close()
    width = max([len("site"), *(len(s) for s in counts)])
    out.write(f"{'site':<{width}}  " + "  ".join(f"{s:>10}" for s in (*STATES, "total")) + "\n")
    for site in sorted(counts):
        row = [counts[site].get(s, 0) for s in STATES]
        out.write(f"{site:<{width}}  " + "  ".join(f"{n:>10}" for n in (*row, sum(row))) + "\n")
    if not counts:
        out.write("(no paths yet)\n")
    return 0


async def _report(db: str, fmt: str, out: Any) -> int:
    store = open_store(db)
    await store.open()
    try:
        writer = csv.DictWriter(out, fieldnames=REPORT_COLUMNS, lineterminator="\n")
        if fmt == "csv":
            writer.writeheader()
        async for record in store.iter_paths():
            row = report_row(record)
            if fmt == "csv":
                writer.writerow({k: "" if v is None else v for k, v in row.items()})
            else:
                out.write(json.dumps(row, ensure_ascii=False) + "\n")
    finally:
        await store.close()
    return 0


def _existing_db(args: argparse.Namespace) -> str:
    import os

    settings = _settings(args)
    if not is_postgres(settings.db) and not os.path.exists(settings.db):
        raise UserError(f"{settings.db}: no such database (give --db PATH)")
    return settings.db


def cmd_status(args: argparse.Namespace) -> int:
    return asyncio.run(_status(_existing_db(args), sys.stdout))


def cmd_report(args: argparse.Namespace) -> int:
    return asyncio.run(_report(_existing_db(args), args.format, sys.stdout))


# ---------------------------------------------------------------------------- parser


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="snapshotd", description=__doc__)
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def common(p: argparse.ArgumentParser, *, origin: bool = False) -> None:
        p.add_argument("--config", help="TOML config file (also SNAPSHOTD_CONFIG)")
        p.add_argument("--db", help="SQLite path (default snapshotd.db)")
        if origin:
            p.add_argument("--origin", help="the site's origin URL, e.g. http://127.0.0.1:3000")

    p = sub.add_parser("serve", help="run the proxy, API, console and crawler")
    common(p, origin=True)
    p.add_argument("--host")
    p.add_argument("--port", type=int)
    p.add_argument(
        "--workers", type=int, metavar="N",
        help="processes sharing the port (default: one per core, up to 4)",
    )
    p.add_argument("--no-crawler", action="store_true", help="do not run the crawler here")
    p.set_defaults(func=cmd_serve)

    p = sub.add_parser("worker", help="run only the crawler")
    common(p)
    p.set_defaults(func=cmd_worker)

    p = sub.add_parser("crawl", help="crawl from the seeds until nothing is pending")
    common(p, origin=True)
    p.add_argument("--seed", action="append", metavar="PATH", help="start path (repeatable)")
    p.add_argument("--max-pages", type=int, metavar="N")
    p.set_defaults(func=cmd_crawl)

    p = sub.add_parser("capture", help="render one URL now and print the snapshot")
    p.add_argument("url")
    p.add_argument("--config")
    p.add_argument("--output", "-o", metavar="FILE")
    p.set_defaults(func=cmd_capture)

    p = sub.add_parser("rules", help="check or evaluate a rules file")
    rsub = p.add_subparsers(dest="rules_command", required=True, metavar="check|eval")
    rc = rsub.add_parser("check", help="validate a rules file")
    rc.add_argument("file")
    re_ = rsub.add_parser("eval", help="print what the rules do to URLs, as JSON lines")
    re_.add_argument("--rules", required=True, metavar="FILE")
    re_.add_argument("-H", "--header", action="append", metavar="'Name: value'")
    re_.add_argument("--db", help="judge NF against this store")
    re_.add_argument("--config", help="take ignore_params from a site of this config")
    re_.add_argument("--site", metavar="NAME", help="the site of --config to take them from")
    re_.add_argument("url", nargs="+")
    p.set_defaults(func=cmd_rules)

    p = sub.add_parser("status", help="counts of paths per state, per site")
    p.add_argument("--db")
    p.add_argument("--config")
    p.set_defaults(func=cmd_status)

    p = sub.add_parser("report", help="one row per path, CSV or JSON lines")
    p.add_argument("--db")
    p.add_argument("--config")
    p.add_argument("--format", choices=("csv", "jsonl"), default="csv")
    p.set_defaults(func=cmd_report)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    _setup_logging(args.verbose)
    try:
        return int(args.func(args) or 0)
    except (ConfigError, UserError, StoreError) as exc:
        print(f"snapshotd: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return 0
