"""Rewrite rules in two dialects (SEO4Ajax's and Apache mod_rewrite's); see SPEC section 6."""

from snapshotd.rewrite.decision import RulesOutcome
from snapshotd.rewrite.errors import RulesError
from snapshotd.rewrite.ruleset import (
    RuleSet,
    load_rules,
    load_site_rules,
    parse_rules,
    rules_file_in,
    site_rules,
)

__all__ = [
    "RulesOutcome",
    "RuleSet",
    "RulesError",
    "load_rules",
    "load_site_rules",
    "parse_rules",
    "rules_file_in",
    "site_rules",
]
