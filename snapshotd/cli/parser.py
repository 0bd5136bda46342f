"""The ``snapshotd`` command line: its flags and help, and :func:`main`, which runs the
command named (one module each in :mod:`snapshotd.cli`) and turns a user error into one
line on stderr and exit status 2."""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import sys
from collections.abc import Callable, Sequence
from typing import Any

from snapshotd.crawlers.devices import PROFILE_NAMES
from snapshotd.observe.logs import LOG_FORMATS, setup_logging
from snapshotd.recipes import RECIPES

log = logging.getLogger("snapshotd")

# What `snapshotd site` does (snapshotd.cli.site runs each).
SITE_ACTIONS = ("list", "show", "set", "pause", "resume", "restart", "round", "delete")

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
logs the console URL holding it ("console: http://...#token=..."). A middleware takes a
render token (SNAPSHOTD_RENDER_TOKEN or server.render_tokens): the render endpoint alone.

Run `snapshotd COMMAND --help` for a command's own flags."""


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
        "--trusted-proxies",
        metavar="A[,A...]",
        help="front servers (addresses, networks) whose forwarding header names the client; "
        "also SNAPSHOTD_TRUSTED_PROXIES",
    )
    p.add_argument(
        "--forwarded-header",
        choices=("x-forwarded-for", "forwarded"),
        help="the header those front servers write the client's address in (default "
        "x-forwarded-for); also SNAPSHOTD_FORWARDED_HEADER",
    )
    p.add_argument(
        "--dns-servers",
        metavar="S[,S...]",
        help="name servers that verify crawlers, address or address:port ([::1]:5353); "
        "default the system's; also SNAPSHOTD_DNS_SERVERS",
    )
    p.add_argument(
        "--host", help="address to listen on (default 127.0.0.1; 0.0.0.0 for every interface)"
    )
    p.add_argument("--port", type=int, help="port to listen on (default 8080; 0 picks a free one)")
    p.add_argument(
        "--workers", type=int, metavar="N",
        help="processes sharing the port (default: one per core, up to 4)",
    )
    p.add_argument("--no-crawler", action="store_true", help="do not run the crawler here")
    p.set_defaults(func="serve:cmd_serve")

    p = command(
        "worker",
        "run only the crawler, beside serve processes sharing its database",
        "snapshotd worker --db postgresql://snap@db:5432/snapshots --config snapshotd.toml",
    )
    common(p, origin=True)
    p.set_defaults(func="crawl:cmd_worker")

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
    p.set_defaults(func="crawl:cmd_crawl")

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
    p.add_argument(
        "--device",
        choices=PROFILE_NAMES,
        default="mobile",
        help="render as this crawler's device: mobile (Googlebot Smartphone, the default) or "
        "desktop",
    )
    p.set_defaults(func="capture:cmd_capture")

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
    p.set_defaults(func="rules:cmd_rules")

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
    p.set_defaults(func="recipe:cmd_recipe")

    p = command(
        "metrics-token",
        "make the read-only token for /_snapshotd/metrics, kept in the store (shown once)",
        "snapshotd metrics-token --db snapshotd.db > /etc/prometheus/snapshotd.token",
    )
    common(p)
    p.add_argument("--rotate", action="store_true", help="replace the token kept")
    p.set_defaults(func="metrics_token:cmd_metrics_token")

    p = command(
        "status", "counts of paths per state, per site", "snapshotd status --db snapshotd.db"
    )
    common(p)
    p.set_defaults(func="status:cmd_status")

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
    p.set_defaults(func="site:cmd_site")

    p = command(
        "report", "one row per path, CSV or JSON lines", "snapshotd report --format csv > paths.csv"
    )
    common(p)
    p.add_argument("--format", choices=("csv", "jsonl"), default="csv", help="default csv")
    p.set_defaults(func="report:cmd_report")
    return parser


def _command(where: str) -> Callable[[argparse.Namespace], int | None]:
    """A command's function, ``module:function`` of this package, imported when it runs:
    a command loads what it uses alone (``site list`` neither Chromium's driver nor the
    HTTP client), so the command line starts in a fraction of the time."""
    module, _, name = where.partition(":")
    function: Callable[[argparse.Namespace], int | None] = getattr(
        importlib.import_module(f"snapshotd.cli.{module}"), name
    )
    return function


def _said_to_the_user() -> tuple[type[Exception], ...]:
    """The errors a command reports in one line (exit status 2), of the modules it loaded:
    an error of a module not loaded cannot have been raised."""
    kinds: list[type[Exception]] = []
    for module, name in (
        ("snapshotd.config.values", "ConfigError"),
        ("snapshotd.cli.common", "UserError"),
        ("snapshotd.store", "StoreError"),
        ("snapshotd.render.chromium", "BrowserCannotStart"),
    ):
        if module in sys.modules:
            kinds.append(getattr(sys.modules[module], name))
    return tuple(kinds)


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    if extra and args.command == "site" and all("=" in e and e[0] != "-" for e in extra):
        args.setting += extra  # KEY=VALUE after an option: argparse leaves them over
    elif extra:
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    setup_logging(args.verbose, args.log_format)
    try:
        return int(_command(args.func)(args) or 0)
    except _said_to_the_user() as exc:
        print(f"snapshotd: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return 0
