"""What every command shares: its settings from the flags, the config file and the
environment; the checks made before it starts; the one-line user error."""

from __future__ import annotations

import argparse
import os
import re

from snapshotd.config.loading import load_settings
from snapshotd.config.settings import Settings
from snapshotd.rewrite import RulesError, RuleSet, load_site_rules
from snapshotd.store import is_postgres


class UserError(Exception):
    """Stops a command with one line on stderr and exit status 2."""


def settings_of(args: argparse.Namespace, *, need_site: bool = False) -> Settings:
    overrides = {
        key: getattr(args, key, None)
        for key in (
            "host", "port", "db", "origin", "hosts", "miss_wait", "workers", "forwarded_header"
        )
    }
    for key in ("trusted_proxies", "dns_servers"):
        if getattr(args, key, None) is not None:
            overrides[key] = tuple(t for t in re.split(r"[\s,]+", getattr(args, key)) if t)
    settings = load_settings(getattr(args, "config", None), overrides=overrides)
    if need_site and not settings.sites:
        raise UserError("no site to serve: give --origin URL or a [[site]] in the config file")
    return settings


def check_rules(settings: Settings) -> dict[str, RuleSet]:
    try:
        return load_site_rules(settings)
    except RulesError as exc:
        raise UserError(str(exc)) from None


def check_chromium(settings: Settings) -> str:
    from snapshotd.render import ChromiumNotFound, find_chromium

    try:
        return find_chromium(settings.browser)
    except ChromiumNotFound as exc:
        raise UserError(str(exc)) from None


def existing_db(args: argparse.Namespace) -> str:
    settings = settings_of(args)
    if not is_postgres(settings.db) and not os.path.exists(settings.db):
        raise UserError(f"{settings.db}: no such database (give --db PATH)")
    return settings.db
