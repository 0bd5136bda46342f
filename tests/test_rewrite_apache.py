"""The Apache dialect against Apache httpd itself.

The table below was recorded from a real Debian apache2 (mod_rewrite, server context). Every row
is checked against the evaluator everywhere, and against a live apache2 when one is installed
(required under CI=true when /usr/sbin/apache2 exists).
"""

from __future__ import annotations

import os
from pathlib import Path
from urllib.parse import unquote

import pytest

from snapshotd.rewrite import RulesOutcome, parse_rules
from tests.apache.harness import HOST, ApacheServer, Outcome, apache_available
from tests.test_rewrite import budget_clock_stopped  # noqa: F401  (autouse here too)

ROOT = Path(__file__).resolve().parent.parent

APACHE_RULES = {
    "internal": "RewriteRule ^/old/(.*)$ /new/$1 [L]",
    "nocase": "RewriteRule ^/old/(.*)$ /new/$1 [NC,L]",
    "redirect_default": "RewriteRule ^/r/(.*)$ /x/$1 [R,L]",
    "redirect_301": "RewriteRule ^/p/(.*)$ /q/$1 [R=301,L]",
    "redirect_codes": (
        "RewriteRule ^/perm$ /x [R=permanent,L]\n"
        "RewriteRule ^/see$ /x [R=seeother,L]\n"
        "RewriteRule ^/t307$ /x [R=307,L]\n"
        "RewriteRule ^/t308$ /x [R=308,L]"
    ),
    "non_3xx_r": (
        "RewriteRule ^/gone-r - [R=404]\n"
        "RewriteRule ^/sub-410$ /elsewhere [R=410]\n"
        "RewriteRule ^/teapot$ - [R=451]"
    ),
    "forbidden": "RewriteRule ^/admin - [F]",
    "gone": "RewriteRule ^/old-section/ - [G]",
    "cond_host": (
        "RewriteCond %{HTTP_HOST} ^example\\.com$ [NC]\n"
        "RewriteRule ^/(.*)$ http://www.example.com/$1 [R=301,L]"
    ),
    "cond_or": (
        "RewriteCond %{HTTP_USER_AGENT} googlebot [NC,OR]\n"
        "RewriteCond %{HTTP_USER_AGENT} bingbot [NC]\n"
        "RewriteRule ^/ua$ /bot [L]"
    ),
    "cond_not": ("RewriteCond %{REQUEST_URI} !^/keep\nRewriteRule ^/(.*)$ /all/$1 [L]"),
    "cond_backref": (
        "RewriteCond %{QUERY_STRING} (^|&)id=([0-9]+)\nRewriteRule ^/item$ /items/%2? [R=301,L]"
    ),
    "qsa": ("RewriteRule ^/s/(.*)$ /search?q=$1 [QSA,L]\nRewriteRule ^/n/(.*)$ /search?q=$1 [L]"),
    "qsd": ("RewriteRule ^/d/(.*)$ /e/$1 [QSD,L]\nRewriteRule ^/dr/(.*)$ /e/$1 [QSD,R=301,L]"),
    "trailing_qmark": ("RewriteRule ^/t/(.*)$ /u/$1? [R=301,L]\nRewriteRule ^/tl/(.*)$ /u/$1? [L]"),
    "dash": ("RewriteRule ^/dash - [QSD]\nRewriteRule ^/dash - [R=301]"),
    "noescape": (
        "RewriteRule ^/ne/(.*)$ /x/$1#frag [NE,R,L]\nRewriteRule ^/esc/(.*)$ /x/$1#frag [R,L]"
    ),
    "end": ("RewriteRule ^/e1$ /e2 [END]\nRewriteRule ^/e2$ /e3"),
    "no_l_chain": ("RewriteRule ^/a/(.*)$ /b/$1\nRewriteRule ^/b/(.*)$ /c/$1"),
    "r_without_l": ("RewriteRule ^/ra(.*)$ /rb$1 [R]\nRewriteRule ^(.*)$ $1/more"),
    "http_header": ("RewriteCond %{HTTP:X-Lang} ^(fr|de)$\nRewriteRule ^/home$ /%1/home [L]"),
    "trailing_slash": "RewriteRule ^/(.+)/$ /$1 [R=301,L]",
    "tracking": (
        "RewriteCond %{QUERY_STRING} (^|&)utm_[a-z]+=\nRewriteRule ^/(.*)$ /$1? [R=301,L]"
    ),
    "decoding": "RewriteRule ^/loc/(.*)$ /x/$1 [L]",
    "b_flag": (
        "RewriteRule ^/bq/(.*)$ /x?p=$1 [B,L]\n"
        "RewriteRule ^/bnp/(.*)$ /x?p=$1 [B,BNP,L]\n"
        "RewriteRule ^/bsel/(.*)$ /x?p=$1 [B=&?,L]"
    ),
    "absolute": (
        "RewriteRule ^/same/(.*)$ http://www.example.com/x/$1\n"
        "RewriteRule ^/ext/(.*)$ http://other.example.org/y/$1"
    ),
    "skip": ("RewriteRule ^/s1$ /s1b [S=1]\nRewriteRule ^/s1b$ /never\nRewriteRule ^/s1b$ /s1c"),
    "chain_flag": (
        "RewriteRule ^/c1/(.*)$ /c2/$1 [C]\nRewriteRule ^/c2/x$ /c3 [C]\nRewriteRule ^(.*)$ /c4$1"
    ),
    "cond_compare": (
        "RewriteCond %{QUERY_STRING} =a=1\n"
        "RewriteRule ^/eq$ /yes [L]\n"
        "RewriteCond %{QUERY_STRING} -gt5\n"
        "RewriteRule ^/num$ /big [L]\n"
        "RewriteCond %{QUERY_STRING} <bbb\n"
        "RewriteRule ^/lex$ /less [L]"
    ),
    "trailing_or": ("RewriteCond %{QUERY_STRING} zzz [OR]\nRewriteRule ^/trail$ /applied [L]"),
    "missing_groups": "RewriteRule ^/(b)(c)?$ /r[$1][$2][$3] [L]",
    "request_uri_original": (
        "RewriteRule ^/first$ /second\n"
        "RewriteCond %{REQUEST_URI} ^/first$\n"
        "RewriteRule ^/second$ /third?seen=%{REQUEST_URI}"
    ),
    "qsl": ("RewriteRule ^/ql/(.*)$ /x?a=1?b=$1 [QSL,L]\nRewriteRule ^/qf/(.*)$ /x?a=1?b=$1 [L]"),
    "backslash": "RewriteRule ^/bs/(.*)$ /x\\$1/$1 [L]",
    "next_round": "RewriteRule ^/nn/(.*)a(.*)$ /nn/$1b$2 [N]",
    "negated_rule": "RewriteRule !^/keep - [F]",
    "qsa_empty": ("RewriteRule ^/qe$ /x? [QSA]\nRewriteRule ^/qc$ /x?c=3 [QSA,R]"),
    "query_escaping": "RewriteRule ^/qv$ /x?v=%{QUERY_STRING} [R]",
    "relative": "RewriteRule ^/rel/(.*)$ rel/$1 [L]",
    "relative_redirect": "RewriteRule ^/noslash(.*)$ noslash$1 [R,L]",
    "dash_last": ("RewriteRule ^/tracking$ - [L]\nRewriteRule ^/(.*)$ /app/$1"),
}

APACHE_RULES["shipped"] = (ROOT / "rules" / "apache.rules").read_text()

# (rules, url, request headers, what Apache 2.4.71 did), recorded by tests/apache/harness.py
APACHE_ROWS = [
    ("internal", "/old/a", {}, ("local", "/new/a", "")),
    ("internal", "/old/a?x=1", {}, ("local", "/new/a", "x=1")),
    ("internal", "/other", {}, ("local", "/other", "")),
    ("internal", "/old/", {}, ("local", "/new/", "")),
    ("internal", "/OLD/a", {}, ("local", "/OLD/a", "")),
    ("nocase", "/OLD/a?k=v", {}, ("local", "/new/a", "k=v")),
    ("redirect_default", "/r/a?q=1", {}, ("redirect", 302, "/x/a?q=1")),
    ("redirect_default", "/r/a%20b", {}, ("redirect", 302, "/x/a%20b")),
    ("redirect_default", "/r/caf%C3%A9", {}, ("redirect", 302, "/x/caf%c3%a9")),
    (
        "redirect_default",
        "/r/%22%3C%3E%5B%5D%7B%7D%7C%5C%5E%60%25",
        {},
        ("redirect", 302, "/x/%22%3c%3e%5b%5d%7b%7d%7c%5c%5e%60%25"),
    ),
    ("redirect_default", "/r/;,$!*'()@&=+~:", {}, ("redirect", 302, "/x/;,$!*'()@&=+~:")),
    ("redirect_301", "/p/a", {}, ("redirect", 301, "/q/a")),
    ("redirect_301", "/p/a?b=%41", {}, ("redirect", 301, "/q/a?b=%41")),
    ("redirect_codes", "/perm", {}, ("redirect", 301, "/x")),
    ("redirect_codes", "/see", {}, ("redirect", 303, "/x")),
    ("redirect_codes", "/t307", {}, ("redirect", 307, "/x")),
    ("redirect_codes", "/t308", {}, ("redirect", 308, "/x")),
    ("non_3xx_r", "/gone-r", {}, ("status", 404)),
    ("non_3xx_r", "/gone-r/x", {}, ("status", 404)),
    ("non_3xx_r", "/sub-410", {}, ("status", 410)),
    ("non_3xx_r", "/teapot", {}, ("status", 451)),
    ("forbidden", "/admin", {}, ("status", 403)),
    ("forbidden", "/admin/users?x=1", {}, ("status", 403)),
    ("forbidden", "/administrator", {}, ("status", 403)),
    ("forbidden", "/public", {}, ("local", "/public", "")),
    ("gone", "/old-section/page", {}, ("status", 410)),
    ("gone", "/old-section", {}, ("local", "/old-section", "")),
    (
        "cond_host",
        "/a?x=1",
        {"Host": "example.com"},
        ("redirect", 301, "http://www.example.com/a?x=1"),
    ),
    ("cond_host", "/a", {"Host": "EXAMPLE.com"}, ("redirect", 301, "http://www.example.com/a")),
    ("cond_host", "/a", {}, ("local", "/a", "")),
    (
        "cond_or",
        "/ua",
        {"User-Agent": "Mozilla/5.0 (compatible; Googlebot/2.1)"},
        ("local", "/bot", ""),
    ),
    ("cond_or", "/ua", {"User-Agent": "bingbot/2.0"}, ("local", "/bot", "")),
    ("cond_or", "/ua", {"User-Agent": "curl/8"}, ("local", "/ua", "")),
    ("cond_not", "/keep/x", {}, ("local", "/keep/x", "")),
    ("cond_not", "/drop/x", {}, ("local", "/all/drop/x", "")),
    ("cond_backref", "/item?id=42", {}, ("redirect", 301, "/items/42")),
    ("cond_backref", "/item?a=1&id=7&b=2", {}, ("redirect", 301, "/items/7")),
    ("cond_backref", "/item?id=x", {}, ("local", "/item", "id=x")),
    ("qsa", "/s/shoes?page=2", {}, ("local", "/search", "q=shoes&page=2")),
    ("qsa", "/s/shoes", {}, ("local", "/search", "q=shoes")),
    ("qsa", "/n/shoes?page=2", {}, ("local", "/search", "q=shoes")),
    ("qsd", "/d/x?a=1", {}, ("local", "/e/x", "")),
    ("qsd", "/dr/x?a=1", {}, ("redirect", 301, "/e/x")),
    ("trailing_qmark", "/t/x?a=1", {}, ("redirect", 301, "/u/x")),
    ("trailing_qmark", "/tl/x?a=1", {}, ("local", "/u/x", "")),
    ("dash", "/dash?a=1", {}, ("local", "/dash", "a=1")),
    ("noescape", "/ne/a%20b", {}, ("redirect", 302, "/x/a b#frag")),
    ("noescape", "/esc/a%20b", {}, ("redirect", 302, "/x/a%20b%23frag")),
    ("end", "/e1", {}, ("local", "/e2", "")),
    ("end", "/e2", {}, ("local", "/e3", "")),
    ("no_l_chain", "/a/x", {}, ("local", "/c/x", "")),
    ("no_l_chain", "/b/y", {}, ("local", "/c/y", "")),
    ("r_without_l", "/ra1?x=1", {}, ("local", "/rb1/more", "x=1")),
    ("http_header", "/home", {"X-Lang": "fr"}, ("local", "/fr/home", "")),
    ("http_header", "/home", {"X-Lang": "es"}, ("local", "/home", "")),
    ("http_header", "/home", {}, ("local", "/home", "")),
    ("trailing_slash", "/dir/", {}, ("redirect", 301, "/dir")),
    ("trailing_slash", "/dir/sub/?x=1", {}, ("redirect", 301, "/dir/sub?x=1")),
    ("trailing_slash", "/", {}, ("local", "/", "")),
    ("tracking", "/page?utm_source=x", {}, ("redirect", 301, "/page")),
    ("tracking", "/page?a=1", {}, ("local", "/page", "a=1")),
    ("decoding", "/loc/a%20b", {}, ("local", "/x/a b", "")),
    ("decoding", "/loc/a%3Fb", {}, ("status", 403)),
    ("decoding", "/loc/a%2Fb", {}, ("status", 404)),
    ("decoding", "/loc/../loc/y", {}, ("local", "/x/y", "")),
    ("decoding", "/loc//z//w", {}, ("local", "/x/z/w", "")),
    ("decoding", "/loc/caf%C3%A9", {}, ("local", "/x/café", "")),
    ("decoding", "/loc/%7euser", {}, ("local", "/x/~user", "")),
    ("b_flag", "/bq/a%20b%26c", {}, ("local", "/x", "p=a+b%26c")),
    ("b_flag", "/bnp/a%20b", {}, ("local", "/x", "p=a%20b")),
    ("b_flag", "/bsel/a%26b%20c", {}, ("status", 403)),
    ("absolute", "/same/a?k=1", {}, ("local", "/x/a", "k=1")),
    ("absolute", "/ext/a?k=1", {}, ("redirect", 302, "http://other.example.org/y/a?k=1")),
    ("skip", "/s1", {}, ("local", "/s1c", "")),
    ("chain_flag", "/c1/x", {}, ("local", "/c4/c3", "")),
    ("chain_flag", "/c1/y", {}, ("local", "/c2/y", "")),
    ("chain_flag", "/zz", {}, ("local", "/zz", "")),
    ("cond_compare", "/eq?a=1", {}, ("local", "/yes", "a=1")),
    ("cond_compare", "/eq?a=12", {}, ("local", "/eq", "a=12")),
    ("cond_compare", "/num?17", {}, ("local", "/big", "17")),
    ("cond_compare", "/num?3", {}, ("local", "/num", "3")),
    ("cond_compare", "/lex?aaa", {}, ("local", "/less", "aaa")),
    ("cond_compare", "/lex?cc", {}, ("local", "/less", "cc")),
    ("cond_compare", "/lex?cccc", {}, ("local", "/lex", "cccc")),
    ("trailing_or", "/trail", {}, ("local", "/applied", "")),
    ("missing_groups", "/b", {}, ("local", "/r[b][][]", "")),
    ("request_uri_original", "/first", {}, ("local", "/third", "seen=/first")),
    ("qsl", "/ql/z", {}, ("local", "/x?a=1", "b=z")),
    ("qsl", "/qf/z", {}, ("local", "/x", "a=1?b=z")),
    ("backslash", "/bs/q", {}, ("local", "/x$1/q", "")),
    ("next_round", "/nn/banana", {}, ("local", "/nn/bbnbnb", "")),
    ("negated_rule", "/keep/a", {}, ("local", "/keep/a", "")),
    ("negated_rule", "/other", {}, ("status", 403)),
    ("qsa_empty", "/qe?a=1", {}, ("local", "/x", "a=1")),
    ("qsa_empty", "/qc?a=%41", {}, ("redirect", 302, "/x?c=3&a=%2541")),
    ("query_escaping", "/qv?a=%41", {}, ("redirect", 302, "/x?v=a=%2541")),
    ("relative", "/rel/x", {}, ("local", "/rel/x", "")),
    ("relative_redirect", "/noslash/x", {}, ("redirect", 302, "/noslash/x")),
    ("dash_last", "/tracking", {}, ("local", "/tracking", "")),
    ("dash_last", "/x", {}, ("local", "/app/x", "")),
    # The shipped example file, as httpd reads it (%{FRAGMENT} is empty there).
    ("shipped", "/admin", {}, ("status", 403)),
    ("shipped", "/admin/users?x=1", {}, ("status", 403)),
    ("shipped", "/administrator", {}, ("local", "/administrator", "")),
    ("shipped", "/old-shop/item/3", {}, ("status", 410)),
    ("shipped", "/old-shop", {}, ("status", 410)),
    ("shipped", "/beta/feature", {}, ("status", 404)),
    ("shipped", "/blog/2019/hello?ref=1", {}, ("redirect", 301, "/articles/hello?ref=1")),
    ("shipped", "/p?utm_source=a&b=2&gclid=z", {}, ("local", "/p", "b=2")),
    ("shipped", "/p?a=1&utm_medium=b", {}, ("local", "/p", "a=1")),
    ("shipped", "/p?utm_source=x", {}, ("local", "/p", "")),
    ("shipped", "/p?fbclid=1&utm_campaign=2&mc_eid=3", {}, ("local", "/p", "")),
    ("shipped", "/shoes/", {}, ("redirect", 301, "/shoes")),
    ("shipped", "/shoes/?a=1&utm_source=q", {}, ("redirect", 301, "/shoes?a=1")),
    ("shipped", "/", {}, ("local", "/", "")),
    ("shipped", "/catalog/shoes", {}, ("local", "/catalog/shoes", "")),
]


def ours(decision: RulesOutcome) -> tuple[object, ...]:
    """A decision in the shape the table records: local path decoded, as Apache logs it."""
    if decision.action == "status":
        return ("status", decision.status)
    if decision.action == "redirect":
        return ("redirect", decision.status, decision.location)
    path, _, query = decision.path.partition("?")
    return ("local", unquote(path, errors="surrogateescape"), query)


def theirs(outcome: Outcome, host: str) -> tuple[object, ...]:
    if outcome.kind == "status":
        return ("status", outcome.status)
    if outcome.kind == "redirect":
        location = outcome.location
        own = f"http://{host}"
        if location.startswith(own + "/"):
            location = location[len(own) :]
        return ("redirect", outcome.status, location)
    return ("local", outcome.path, outcome.query)


RULESETS = {name: parse_rules("RewriteEngine On\n" + text) for name, text in APACHE_RULES.items()}


@pytest.mark.parametrize(
    ("rules", "url", "headers", "expected"),
    APACHE_ROWS,
    ids=[f"{r[0]}:{r[1]}" for r in APACHE_ROWS],
)
def test_evaluator_matches_recorded_apache(rules, url, headers, expected):
    decision = RULESETS[rules].evaluate(url, host=HOST, headers=headers)
    assert ours(decision) == expected


def test_table_is_large():
    assert len(APACHE_ROWS) >= 60
    assert set(APACHE_RULES) == {r[0] for r in APACHE_ROWS}


_REQUIRED = os.environ.get("CI") == "true" and os.path.exists("/usr/sbin/apache2")


@pytest.fixture(scope="module")
def apache():
    if not apache_available():
        if _REQUIRED:
            pytest.fail("apache2 with mod_rewrite is required under CI")
        pytest.skip("apache2 with mod_rewrite is not installed")
    names = list(APACHE_RULES)
    server = ApacheServer([APACHE_RULES[n] for n in names])
    server.start()
    try:
        yield server, {n: i for i, n in enumerate(names)}
    finally:
        server.stop()


@pytest.mark.timeout(120)
def test_live_apache_agrees_with_table_and_evaluator(apache):
    server, index = apache
    mismatches = []
    for rules, url, headers, expected in APACHE_ROWS:
        got = theirs(server.ask(index[rules], url, dict(headers)), headers.get("Host", HOST))
        mine = ours(RULESETS[rules].evaluate(url, host=HOST, headers=headers))
        if got != expected or mine != got:
            mismatches.append(f"{rules} {url}: apache {got}, table {expected}, ours {mine}")
    assert not mismatches, "\n".join(mismatches)
