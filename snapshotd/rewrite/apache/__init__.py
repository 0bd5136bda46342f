"""The Apache dialect: mod_rewrite of httpd 2.4 in server context.

`rules` parses a file into a Program (Cond, Rule), `evaluate` runs a Program on one site path,
`uri` holds the decoding and escaping both rely on; each module states its invariants.
"""

from snapshotd.rewrite.apache.evaluate import run
from snapshotd.rewrite.apache.parsing import MAX_ROUNDS, Cond, Program, Rule, Template, parse
from snapshotd.rewrite.apache.uri import absolute_scheme, escape_uri

__all__ = [
    "MAX_ROUNDS", "Cond", "Program", "Rule", "Template",
    "absolute_scheme", "escape_uri", "parse", "run",
]  # fmt: skip
