"""``snapshotd recipe``: a front server's configuration for a site, filled in."""

from __future__ import annotations

import argparse

from snapshotd.cli.common import UserError, settings_of
from snapshotd.recipes import fill_recipe


def cmd_recipe(args: argparse.Namespace) -> int:
    settings = settings_of(args, need_site=True)
    site = settings.site(args.site) if args.site else settings.sites[0]
    if site is None:
        raise UserError(f"no site is named {args.site!r}")
    try:
        print(fill_recipe(args.server, settings, site, args.listen), end="")
    except ValueError as exc:
        raise UserError(str(exc)) from None
    return 0
