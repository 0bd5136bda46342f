"""The ``snapshotd`` command: flags, help, one-line user errors (exit status 2)."""

from __future__ import annotations

import argparse
import asyncio
import csv
import json
import logging
import os
import sys
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from snapshotd.cli.site import SITE_ACTIONS, SiteCommandError, assign
from snapshotd.config.loading import load_settings, site_from_mapping, site_to_mapping
from snapshotd.config.settings import Settings, SiteSettings
from snapshotd.config.values import ConfigError
from snapshotd.observe.logs import LOG_FORMATS, setup_logging
from snapshotd.recipes import RECIPES, fill_recipe
from snapshotd.render.chromium import BrowserCannotStart
from snapshotd.rewrite import RulesError, RuleSet, load_site_rules
from snapshotd.store import STATES, PathRecord, StoreError, is_postgres, open_store
from snapshotd.store.base import iso_time

log = logging.getLogger("snapshotd")

DESCRIPTION = """\
snapshotd puts a prerender proxy in front of a single-page app: search engines, AI crawlers
and link-preview bots get an HTML snapshot of each page as headless Chromium rendered it;
people get the app itself, passed through untouched. A crawler keeps the snapshots fresh.
The API, the console and the metrics live under /_snapshotd/ on the same port."""

EPILOG = """\
examples:
  snapshotd serve --origin http://127.0.0.1:3000       proxy + API + console + crawler on :8080
  snapshotd serve --config snapshotd.toml               several sites, chosen by Host header
  snapshotd crawl --origin http://127.0.0.1:3000 --seed /pricing
  snapshotd capture http://127.0.0.1:3000/items/3 -o items-3.html
  snapshotd status --db snapshotd.db
  snapshotd report --format jsonl > report.jsonl
  snapshotd rules check rules/shop.rules

Every flag can also be set in the config file or as SNAPSHOTD_<NAME> in the environment
(SNAPSHOTD_ORIGIN, SNAPSHOTD_PORT, SNAPSHOTD_DB, ...). The API and the console need a token:
set SNAPSHOTD_API_TOKEN (or server.api_tokens); without one, `serve` draws one at start and
logs the console URL holding it ("console: http://...#token=...").

Run `snapshotd COMMAND --help` for a command's own flags."""


class UserError(Exception):
    """Stops a command with one line on stderr and exit status 2."""


def _settings(args: argparse.Namespace, *, need_site: bool = False) -> Settings:
    overrides = {
        key: getattr(args, key, None)
        for key in ("host", "port", "db", "origin", "hosts", "miss_wait", "workers")
    }
    settings = load_settings(getattr(args, "config", None), overrides=overrides)
    if need_site and not settings.sites:
        raise UserError("no site to serve: give --origin URL or a [[site]] in the config file")
    return settings


def _with_settings(settings: Settings, assignments: Sequence[str]) -> Settings:
    """``--set KEY=VALUE``: the settings with those site keys changed on every site."""
    if not assignments:
        return settings
    try:
        sites = tuple(
            site_from_mapping(assign(site_to_mapping(s), assignments), "--set")
            for s in settings.sites
        )
    except (ConfigError, SiteCommandError) as exc:
        raise UserError(str(exc)) from None
    return replace(settings, sites=sites)


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


async def _check_browser(settings: Settings) -> None:
    """Start and close the browser once: BrowserCannotStart is one line, said before any
    worker process is made (each would say it again)."""
    from snapshotd.services import default_renderer

    renderer = default_renderer(settings)
    quiet = logging.getLogger("snapshotd.render")
    level = quiet.level
    quiet.setLevel(logging.WARNING)  # this browser is not the one that serves: no "launched"
    try:
        await renderer.start()
    finally:
        await renderer.close()
        quiet.setLevel(level)


async def _check_store(db: str) -> None:
    """Open (creating or upgrading) and close the store: a StoreError is one line."""
    store = open_store(db)
    await store.open()
    await store.close()


# ---------------------------------------------------------------------------- commands


def cmd_serve(args: argparse.Namespace) -> int:
    from snapshotd.server.app import create_app
    from snapshotd.server.run import bind_socket, serve_one, serve_workers

    settings = _settings(args)
    rules = _check_rules(settings)
    _check_chromium(settings)
    asyncio.run(_check_store(settings.db))
    try:
        sock = bind_socket(settings.host, settings.port)
    except OSError as exc:
        reason = (os.strerror(exc.errno) if exc.errno else str(exc)).lower()
        host = f"[{settings.host}]" if ":" in settings.host else settings.host
        raise UserError(f"cannot listen on {host}:{settings.port}: {reason}") from None
    with sock:
        settings = replace(settings, port=sock.getsockname()[1])  # --port 0: the one drawn
        if settings.workers > 1:
            asyncio.run(_check_browser(settings))
            return serve_workers(settings, sock, crawler=not args.no_crawler, rules=rules)
        app = create_app(settings, crawler=not args.no_crawler, rules=rules)
        started = serve_one(app, settings, [sock])
    if app.startup_error is not None:
        raise UserError(str(app.startup_error).strip().splitlines()[0])
    return 0 if started else 2


def cmd_worker(args: argparse.Namespace) -> int:
    from snapshotd.cli.crawl import run_worker

    settings = _settings(args)
    _check_rules(settings)
    _check_chromium(settings)
    return asyncio.run(run_worker(settings))


def cmd_crawl(args: argparse.Namespace) -> int:
    from snapshotd.cli.crawl import run_crawl

    if args.max_pages is not None and args.max_pages < 1:
        raise UserError("--max-pages must be at least 1")
    settings = _with_settings(_settings(args, need_site=True), args.set or ())
    _check_seeds(settings, args.seed or ())
    _check_rules(settings)
    _check_chromium(settings)
    return asyncio.run(run_crawl(settings, seeds=args.seed or None, max_pages=args.max_pages))


def _check_seeds(settings: Settings, seeds: Sequence[str]) -> None:
    """Each ``--seed`` is a path (for every site) or a URL of a configured site."""
    from urllib.parse import urlsplit

    for seed in seeds:
        if seed.startswith("/"):
            continue
        parts = urlsplit(seed)
        if parts.scheme.lower() not in ("http", "https") or not parts.hostname:
            raise UserError(
                f"--seed {seed}: a seed is a path starting with '/' (did you mean "
                f"/{seed.lstrip('/')}?) or a URL of a configured site"
            )
        if settings.site_for_url(seed) is None:
            raise UserError(f"--seed {seed}: belongs to no configured site")


def cmd_capture(args: argparse.Namespace) -> int:
    from snapshotd.cli.capture import capture_command

    settings = _settings(args)
    _check_chromium(settings)
    return asyncio.run(capture_command(args.url, settings, args.output))


def cmd_rules(args: argparse.Namespace) -> int:
    from snapshotd.cli.rules import check_command, eval_command

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


def cmd_recipe(args: argparse.Namespace) -> int:
    settings = _settings(args, need_site=True)
    site = settings.site(args.site) if args.site else settings.sites[0]
    if site is None:
        raise UserError(f"no site is named {args.site!r}")
    try:
        print(fill_recipe(args.server, settings, site, args.listen), end="")
    except ValueError as exc:
        raise UserError(str(exc)) from None
    return 0


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


def cmd_site(args: argparse.Namespace) -> int:
    from snapshotd.cli.site import SiteCommandError, run_site_command

    db = _settings(args).db
    if args.action != "set":
        db = _existing_db(args)
    try:
        return asyncio.run(run_site_command(db, args.action, args.name, args.setting, sys.stdout))
    except SiteCommandError as exc:
        raise UserError(str(exc)) from None


# ---------------------------------------------------------------------------- parser


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("snapshotd")
    except PackageNotFoundError:  # run from a source tree that is not installed
        from snapshotd import __version__

        return __version__


def build_parser() -> argparse.ArgumentParser:
    formatter = argparse.RawDescriptionHelpFormatter
    parser = argparse.ArgumentParser(
        prog="snapshotd", description=DESCRIPTION, epilog=EPILOG, formatter_class=formatter
    )
    parser.add_argument("--version", action="version", version=f"snapshotd {_version()}")

    def logging_flags(p: argparse.ArgumentParser, default: Any) -> None:
        """Before or after the command name alike."""
        p.add_argument(
            "-v", "--verbose", action="store_true", default=default, help="debug logging"
        )
        p.add_argument(
            "--log-format",
            choices=LOG_FORMATS,
            default=default,
            help="log lines as text (the default) or one JSON object a line "
            "(also SNAPSHOTD_LOG_FORMAT)",
        )

    logging_flags(parser, None)
    parser.set_defaults(verbose=False, log_format=os.environ.get("SNAPSHOTD_LOG_FORMAT") or "text")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def command(name: str, help: str, example: str) -> argparse.ArgumentParser:
        p = sub.add_parser(
            name,
            help=help,
            description=help[0].upper() + help[1:] + ".",
            epilog=f"example:\n  {example}",
            formatter_class=formatter,
        )
        logging_flags(p, argparse.SUPPRESS)
        return p

    def common(p: argparse.ArgumentParser, *, origin: bool = False) -> None:
        p.add_argument("--config", metavar="FILE", help="TOML config file (also SNAPSHOTD_CONFIG)")
        p.add_argument(
            "--db",
            metavar="PATH",
            help="SQLite file or postgresql:// URL (default snapshotd.db; also SNAPSHOTD_DB)",
        )
        if origin:
            p.add_argument(
                "--origin",
                metavar="URL",
                help="the app's origin, e.g. http://127.0.0.1:3000: one site named default "
                "(also SNAPSHOTD_ORIGIN)",
            )
            p.add_argument(
                "--hosts",
                metavar="H[,H...]",
                help="the site's public host names (Host headers, render URLs); also "
                "SNAPSHOTD_HOSTS",
            )

    p = command(
        "serve",
        "run the proxy, API, console and crawler",
        "snapshotd serve --origin http://127.0.0.1:3000 --host 0.0.0.0 --port 8080",
    )
    common(p, origin=True)
    p.add_argument(
        "--host", help="address to listen on (default 127.0.0.1; 0.0.0.0 for every interface)"
    )
    p.add_argument("--port", type=int, help="port to listen on (default 8080; 0 picks a free one)")
    p.add_argument(
        "--workers", type=int, metavar="N",
        help="processes sharing the port (default: one per core, up to 4)",
    )
    p.add_argument("--no-crawler", action="store_true", help="do not run the crawler here")
    p.set_defaults(func=cmd_serve)

    p = command(
        "worker",
        "run only the crawler, beside serve processes sharing its database",
        "snapshotd worker --db postgresql://snap@db:5432/snapshots --config snapshotd.toml",
    )
    common(p, origin=True)
    p.set_defaults(func=cmd_worker)

    p = command(
        "crawl",
        "crawl from the seeds until nothing is pending, then print a summary",
        "snapshotd crawl --origin http://127.0.0.1:3000 --seed / --seed /pricing",
    )
    common(p, origin=True)
    p.add_argument(
        "--seed",
        action="append",
        metavar="PATH",
        help="a path starting with / (for every site) or a URL of a site; repeatable; "
        "default: each site's seeds",
    )
    p.add_argument(
        "--max-pages", type=int, metavar="N", help="at most N paths per site (replaces max_pages)"
    )
    p.add_argument(
        "--set", action="append", metavar="KEY=VALUE",
        help="a [[site]] setting for every site crawled, as 'snapshotd site set' takes it "
        "(url_process_pattern=/products/, max_to_process=500, "
        "'custom_headers=[\"Accept-Language: fr\"]'); repeatable",
    )
    p.set_defaults(func=cmd_crawl)

    p = command(
        "capture",
        "render one URL now and print the snapshot",
        "snapshotd capture http://127.0.0.1:3000/items/3 -o items-3.html",
    )
    p.add_argument("url", help="the http(s) URL to render")
    p.add_argument(
        "--config", metavar="FILE", help="take the browser and site settings from this file"
    )
    p.add_argument("--output", "-o", metavar="FILE", help="write the HTML here, not to stdout")
    p.set_defaults(func=cmd_capture)

    p = command(
        "rules", "check or evaluate a rules file", "snapshotd rules check rules/shop.rules"
    )
    rsub = p.add_subparsers(dest="rules_command", required=True, metavar="check|eval")
    rc = rsub.add_parser("check", help="validate a rules file")
    rc.add_argument("file", help="the rules file")
    re_ = rsub.add_parser("eval", help="print what the rules do to URLs, as JSON lines")
    re_.add_argument("--rules", required=True, metavar="FILE", help="the rules file")
    re_.add_argument(
        "-H", "--header", action="append", metavar="'Name: value'",
        help="a request header the rules may test (repeatable)",
    )
    re_.add_argument("--db", help="judge NF against this store")
    re_.add_argument("--config", help="take ignore_params from a site of this config")
    re_.add_argument("--site", metavar="NAME", help="the site of --config to take them from")
    re_.add_argument("url", nargs="+", help="paths or URLs to evaluate")
    p.set_defaults(func=cmd_rules)

    p = command(
        "recipe",
        "print a front server's configuration for a site",
        "snapshotd recipe nginx --origin http://127.0.0.1:3000 --hosts shop.example.com",
    )
    p.add_argument("server", choices=RECIPES, help="the front server")
    common(p, origin=True)
    p.add_argument("--host", help="snapshotd's address as the front server reaches it")
    p.add_argument("--port", type=int, help="snapshotd's port as the front server reaches it")
    p.add_argument("--site", metavar="NAME", help="the site of --config (default: the first)")
    p.add_argument("--listen", metavar="ADDR", help="the front server's listen address")
    p.set_defaults(func=cmd_recipe)

    p = command(
        "status", "counts of paths per state, per site", "snapshotd status --db snapshotd.db"
    )
    common(p)
    p.set_defaults(func=cmd_status)

    p = command(
        "site",
        "list, show, create, change, pause, resume, restart, start a new round of, or delete "
        "the sites in the store "
        "(running processes see it within a second)",
        "snapshotd site set shop origin=http://127.0.0.1:3000 'seeds=[\"/\"]' max_pages=500",
    )
    p.add_argument("action", choices=SITE_ACTIONS, help="what to do")
    p.add_argument("name", nargs="?", help="the site's name (all but list)")
    p.add_argument(
        "setting", nargs="*", metavar="KEY=VALUE",
        help="set: a [[site]] key and a TOML value (max_pages=500, obey_robots=false, "
        "bots.add='[\"MyBot\"]'); the others keep theirs",
    )
    common(p)
    p.set_defaults(func=cmd_site)

    p = command(
        "report", "one row per path, CSV or JSON lines", "snapshotd report --format csv > paths.csv"
    )
    common(p)
    p.add_argument("--format", choices=("csv", "jsonl"), default="csv", help="default csv")
    p.set_defaults(func=cmd_report)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    if extra and args.command == "site" and all("=" in e and e[0] != "-" for e in extra):
        args.setting += extra  # KEY=VALUE after an option: argparse leaves them over
    elif extra:
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    setup_logging(args.verbose, args.log_format)
    try:
        return int(args.func(args) or 0)
    except (ConfigError, UserError, StoreError, BrowserCannotStart) as exc:
        print(f"snapshotd: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return 0
