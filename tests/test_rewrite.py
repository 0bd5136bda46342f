"""Rewrite rules: SEO4Ajax dialect, parsing and errors, safety bounds, CLI, shipped files.

The Apache dialect's behaviour is pinned against Apache httpd in test_rewrite_apache.py.
"""

from __future__ import annotations

import io
import json
import os
import sqlite3
import threading
from pathlib import Path

import pytest

from snapshotd.cli.rules import check_command, eval_command
from snapshotd.config.settings import SiteSettings
from snapshotd.rewrite import RulesError, RuleSet, RulesOutcome, load_rules, parse_rules
from snapshotd.rewrite.apache import MAX_ROUNDS
from snapshotd.rewrite.limits import TIME_BUDGET, Budget
from snapshotd.sites.admission import StoreFacts, admit, decide
from snapshotd.store.outcome import CaptureOutcome

ROOT = Path(__file__).resolve().parent.parent

# --- SEO4Ajax dialect: (rules, url, captured paths, expected JSON of `rules eval`) ---------

SEO4AJAX_ROWS = [
    # The documented examples.
    ("drop trailing slash", r"^/(.*)\/$ /$1", "/path/index/", (),
     {"action": "rewrite", "path": "/path/index"}),
    ("collapse before #!", r"^[^#]*(.*) /$1", "/path/index?param=value&param2=value2#!/catalog/145",
     (), {"action": "rewrite", "path": "/#!/catalog/145"}),
    ("remove parameter", "^(.*)a_query_parameter=[^&]*&?(.*)$ $1$2\n^(.*)&$ $1",
     "/p?x=1&a_query_parameter=2&y=3", (), {"action": "rewrite", "path": "/p?x=1&y=3"}),
    ("remove last parameter", "^(.*)a_query_parameter=[^&]*&?(.*)$ $1$2\n^(.*)&$ $1",
     "/p?x=1&a_query_parameter=2", (), {"action": "rewrite", "path": "/p?x=1"}),
    ("spec tracking example", r"^(.*)utm_[a-z]+=[^&]*&?(.*)$ $1$2", "/p?utm_source=x", (),
     {"action": "rewrite", "path": "/p"}),
    # Whole-path matching: query and fragment are part of what the regexp sees.
    ("matches query", r"^/p\?id=(\d+)$ /item/$1", "/p?id=7", (),
     {"action": "rewrite", "path": "/item/7"}),
    ("matches fragment", r"^/#!/old/(.*)$ /#!/new/$1", "/#!/old/a", (),
     {"action": "rewrite", "path": "/#!/new/a"}),
    ("no match", r"^/a$ /b", "/c", (), {"action": "none", "path": "/c"}),
    ("same result is none", r"^/a$ /a", "/a", (), {"action": "none", "path": "/a"}),
    ("no path keeps it", r"^/a [L]", "/a", (), {"action": "none", "path": "/a"}),
    # Chaining until L.
    ("chained", "^/a$ /b\n^/b$ /c", "/a", (), {"action": "rewrite", "path": "/c"}),
    ("L stops", "^/a$ /b [L]\n^/b$ /c", "/a", (), {"action": "rewrite", "path": "/b"}),
    ("L only when matched", "^/x$ /y [L]\n^/a$ /b", "/a", (), {"action": "rewrite", "path": "/b"}),
    # R=xxx.
    ("R=301", r"^/old/(.*)$ /new/$1 [R=301]", "/old/a?x=1", (),
     {"action": "redirect", "status": 301, "location": "/new/a?x=1"}),
    ("R=302 no path", r"^/tmp [R=302]", "/tmp", (),
     {"action": "redirect", "status": 302, "location": "/tmp"}),
    ("R implies L", "^/a$ /b [R=301]\n^/b$ /c", "/a", (),
     {"action": "redirect", "status": 301, "location": "/b"}),
    ("R=404", r"^/gone [R=404]", "/gone/x", (), {"action": "status", "status": 404}),
    ("R=410", r"^/old-shop/ /x [R=410]", "/old-shop/a", (), {"action": "status", "status": 410}),
    ("R=403", r"^/admin [R=403]", "/admin", (), {"action": "status", "status": 403}),
    ("R after rewrite", "^/a$ /b\n^/b$ [R=301]", "/a", (),
     {"action": "redirect", "status": 301, "location": "/b"}),
    # NC, D, U.
    ("case sensitive", r"^/About$ /about", "/ABOUT", (), {"action": "none", "path": "/ABOUT"}),
    ("NC", r"^/About$ /about [NC]", "/ABOUT", (), {"action": "rewrite", "path": "/about"}),
    ("D", r"^/(.*)$ /$1 [D]", "/Shoes/Red?Size=M", (),
     {"action": "rewrite", "path": "/shoes/red?size=m"}),
    ("U", r"^/(.*)$ /$1 [U]", "/a%2Ab%20c", (), {"action": "rewrite", "path": "/a*b c"}),
    # NF consults the store, C marks a capture.
    ("NF not captured", r"^/p/(.*)$ /q/$1 [NF]", "/p/a", (),
     {"action": "rewrite", "path": "/q/a"}),
    ("NF captured", r"^/p/(.*)$ /q/$1 [NF]", "/p/a", ("/p/a",),
     {"action": "none", "path": "/p/a"}),
    ("NF asks the chained path", "^/a$ /b\n^/b$ /c [NF]", "/a", ("/b",),
     {"action": "rewrite", "path": "/b"}),
    ("C", r"^/cart$ [C]", "/cart", (), {"action": "none", "path": "/cart", "capture": True}),
    ("C with rewrite", r"^/cart/(.*)$ /basket/$1 [C,L]", "/cart/1", (),
     {"action": "rewrite", "path": "/basket/1", "capture": True}),
    ("C not matched", r"^/cart$ [C]", "/other", (), {"action": "none", "path": "/other"}),
    # Flags written several ways.
    ("flag groups", r"^/A$ /b [NC] [L]" + "\n^/b$ /c", "/a", (),
     {"action": "rewrite", "path": "/b"}),
    ("flag spaces", r"^/A$ /b [NC, L]" + "\n^/b$ /c", "/a", (),
     {"action": "rewrite", "path": "/b"}),
    # JavaScript replacement and regexp syntax.
    ("$& and $$", r"^/(a)$ /x$&$$", "/a", (), {"action": "rewrite", "path": "/x/a$"}),
    ("$10", r"^/(1)(2)(3)(4)(5)(6)(7)(8)(9)(10)$ /$10-$1", "/12345678910", (),
     {"action": "rewrite", "path": "/10-1"}),
    ("$2 without group", r"^/(a)$ /$1$2", "/a", (), {"action": "rewrite", "path": "/a$2"}),
    ("unmatched group", r"^/(a)?b$ /x$1", "/b", (), {"action": "rewrite", "path": "/x"}),
    ("named group", r"^/(?<id>\d+)$ /item/$<id>", "/42", (),
     {"action": "rewrite", "path": "/item/42"}),
    ("named back-reference", r"^/(?<w>[a-z]+)-\k<w>$ /$1", "/ab-ab", (),
     {"action": "rewrite", "path": "/ab"}),
    ("\\d is ASCII", r"^/(\d+)$ /n/$1", "/\u0661", (), {"action": "none", "path": "/\u0661"}),
    ("POSIX class", r"^/([[:alpha:]]+)$ /w/$1", "/abc", (),
     {"action": "rewrite", "path": "/w/abc"}),
    ("empty query dropped before #!", r"^/p\?x=1(.*)$ /p?$1", "/p?x=1#!/a", (),
     {"action": "rewrite", "path": "/p#!/a"}),
]  # fmt: skip


@pytest.mark.parametrize(
    ("rules", "url", "captured", "expected"),
    [r[1:] for r in SEO4AJAX_ROWS],
    ids=[r[0] for r in SEO4AJAX_ROWS],
)
def test_seo4ajax(rules, url, captured, expected):
    ruleset = parse_rules(rules)
    assert ruleset.dialect == "seo4ajax"
    decision = ruleset.evaluate(url, is_captured=lambda p: p in captured)
    assert decision.to_json(url) == {"url": url, **expected}


@pytest.mark.parametrize(
    ("rules", "url", "captured", "expected"),
    [r[1:] for r in SEO4AJAX_ROWS if "NF" in r[1]],
    ids=[r[0] for r in SEO4AJAX_ROWS if "NF" in r[1]],
)
async def test_seo4ajax_async_store(rules, url, captured, expected):
    asked = []

    class Facts(StoreFacts):
        async def captured(self, path: str) -> bool:
            asked.append(path)
            return path in captured

        async def record(self, path: str) -> None:
            return None

    site = SiteSettings(name="s", origin="http://shop.test")
    decision = await admit(
        decide(site, parse_rules(rules), url, source="api", now=0.0), Facts(None, "s")  # type: ignore[arg-type]
    )
    assert decision.path == expected["path"]
    assert asked, "NF asks the store"


def test_nf_asks_only_when_the_pattern_matches():
    asked = []
    parse_rules(r"^/p/ [NF]").evaluate("/q", is_captured=lambda p: asked.append(p) or False)
    assert asked == []


def test_apache_async_and_sync_agree():
    rules = parse_rules("RewriteEngine On\nRewriteRule ^/a$ /b [R=301]")
    expected = RulesOutcome("redirect", "/b", 301, "/b")
    assert rules.evaluate("/a") == expected


# --- RulesOutcome JSON (SPEC section 6) ---------------------------------------------------


@pytest.mark.parametrize(
    ("decision", "url", "expected"),
    [
        (RulesOutcome("redirect", "/new/a?x=1", 301, "/new/a?x=1"), "/old/a?x=1",
         {"url": "/old/a?x=1", "action": "redirect", "status": 301, "location": "/new/a?x=1"}),
        (RulesOutcome("rewrite", "/p"), "/p?utm_source=x",
         {"url": "/p?utm_source=x", "action": "rewrite", "path": "/p"}),
        (RulesOutcome("status", "/admin", 403), "/admin",
         {"url": "/admin", "action": "status", "status": 403}),
        (RulesOutcome("none", "/same"), "/same",
         {"url": "/same", "action": "none", "path": "/same"}),
        (RulesOutcome("none", "/c", capture=True), "/c",
         {"url": "/c", "action": "none", "path": "/c", "capture": True}),
    ],
)  # fmt: skip
def test_decision_json(decision, url, expected):
    assert decision.to_json(url) == expected


# --- Dialects, comments, empty rule sets --------------------------------------------------


@pytest.mark.parametrize(
    ("text", "dialect", "count"),
    [
        ("", "empty", 0),
        ("# only a comment\n\n   \n", "empty", 0),
        ("# c\nRewriteEngine On\n# c\nRewriteRule ^/a /b\n", "apache", 1),
        ("rewriteengine on\nrewriterule ^/a /b\n", "apache", 1),
        ("RewriteEngine On\nRewriteRule ^/a \\\n   /b [L]\n", "apache", 1),
        ("# c\n^/a /b\n  # indented comment\n^/c [L]\n", "seo4ajax", 2),
        ("\ufeff^/a /b\n", "seo4ajax", 1),
    ],
)
def test_dialect_and_count(text, dialect, count):
    rules = parse_rules(text)
    assert (rules.dialect, len(rules)) == (dialect, count)


def test_empty_ruleset_is_none():
    assert RuleSet.empty().evaluate("/a?b=1#!/c") == RulesOutcome("none", "/a?b=1#!/c")
    assert RuleSet.empty().dialect == "empty"


def test_engine_off_changes_nothing():
    rules = parse_rules("RewriteEngine Off\nRewriteRule ^ - [F]")
    assert rules.evaluate("/a").action == "none"


def test_apache_fragment_is_kept_and_visible_as_FRAGMENT():
    rules = parse_rules(
        "RewriteEngine On\nRewriteCond %{FRAGMENT} ^!/(.*)$\nRewriteRule ^/x$ /y/%1 [L]"
    )
    assert rules.evaluate("/x?q=1#!/cat").path == "/y/cat?q=1#!/cat"
    assert rules.evaluate("/x").action == "none"


def test_apache_host_argument_feeds_http_host():
    rules = parse_rules(
        "RewriteEngine On\nRewriteCond %{HTTP_HOST} ^shop\\.\nRewriteRule ^/ /shop [L]"
    )
    assert rules.evaluate("/", host="shop.example.com").path == "/shop"
    assert rules.evaluate("/", headers={"host": "shop.example.com"}).path == "/shop"
    assert rules.evaluate("/", host="www.example.com").action == "none"


# --- Errors name file, line and reason ----------------------------------------------------

ERROR_ROWS = [
    ("mixed dialects", "RewriteEngine On\n^/a /b\n", 2, "cannot be mixed"),
    ("mixed the other way", "^/a /b\nRewriteRule ^/a /b\n", 2, "cannot be mixed"),
    ("bad regexp", "# x\n^/(a /b\n", 2, "bad regular expression"),
    ("unknown seo flag", "^/a /b [X]\n", 1, "unknown flag"),
    ("R without code", "^/a /b [R]\n", 1, "R needs an HTTP status code"),
    ("bad R code", "^/a /b [R=9999]\n", 1, "R needs an HTTP status code"),
    ("extra word", "^/a /b c\n", 1, "expected '<regexp> [<path>] [flags]'"),
    ("unclosed flags", "^/a /b [L\n", 1, "expected '<regexp> [<path>] [flags]'"),
    ("JS any-char class", "^/[^]$ /b\n", 1, "[^]"),
    ("unsupported escape", "^/\\cA /b\n", 1, "not supported"),
    ("nested quantifier", "^/(a+)+$ /b\n", 1, "nested quantifier"),
    ("apache bad regexp", "RewriteEngine On\nRewriteRule ^/(a /b\n", 2, "bad regular expression"),
    ("apache unknown flag", "RewriteEngine On\nRewriteRule ^/a /b [Q]\n", 2,
     "unknown flag 'Q'"),
    ("apache proxy flag", "RewriteEngine On\nRewriteRule ^/a http://x/ [P]\n", 2, "proxy"),
    ("apache R code Apache refuses", "RewriteEngine On\nRewriteRule ^/a - [R=418]\n", 2,
     "invalid HTTP response code"),
    ("apache flag delimiters", "RewriteEngine On\nRewriteRule ^/a /b L\n", 2,
     "bad flag delimiters"),
    ("apache too many args", "RewriteEngine On\nRewriteRule ^/a /b [L] x\n", 2, "RewriteRule"),
    ("apache one arg", "RewriteEngine On\nRewriteRule ^/a\n", 2, "RewriteRule needs"),
    ("apache unknown variable", "RewriteEngine On\nRewriteCond %{REMOTE_ADDR} ^1\n"
     "RewriteRule ^ - [F]\n", 2, "%{REMOTE_ADDR} is not supported"),
    ("apache file test", "RewriteEngine On\nRewriteCond %{REQUEST_FILENAME} !-f\n"
     "RewriteRule ^ /index.html\n", 2, "file and sub-request tests"),
    ("apache map", "RewriteEngine On\nRewriteRule ^/(.*) /${m:$1}\n", 2, "RewriteMap"),
    ("apache cond flag", "RewriteEngine On\nRewriteCond %{QUERY_STRING} a [X]\n"
     "RewriteRule ^ - [F]\n", 2, "unknown flag 'X'"),
    ("apache dangling cond", "RewriteEngine On\nRewriteRule ^/a /b\n"
     "RewriteCond %{QUERY_STRING} a\n", 3, "without a RewriteRule"),
    ("apache engine missing", "# c\nRewriteRule ^/a /b\n", 2, "RewriteEngine On is missing"),
    ("apache base", "RewriteEngine On\nRewriteBase /x\n", 2, "per-directory"),
    ("apache other directive", "RewriteEngine On\nRewriteFoo x\n", 2, "not a mod_rewrite"),
    ("apache nested quantifier", "RewriteEngine On\nRewriteRule ^/(\\w+\\s?)+$ /b\n", 2,
     "nested quantifier"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("text", "line", "reason"), [r[1:] for r in ERROR_ROWS], ids=[r[0] for r in ERROR_ROWS]
)
def test_errors_name_file_and_line(text, line, reason):
    with pytest.raises(RulesError) as info:
        parse_rules(text, filename="site.rules")
    e = info.value
    assert (e.file, e.line) == ("site.rules", line)
    assert reason in e.reason
    assert str(e) == f"site.rules:{line}: {e.reason}"


def test_load_rules_missing_file(tmp_path):
    with pytest.raises(RulesError) as info:
        load_rules(str(tmp_path / "nope.rules"))
    assert "cannot read rules file" in str(info.value)


def count_file_reads(monkeypatch) -> list[int]:
    """The sizes of the reads made from the files opened by ``os.fdopen`` in binary mode (as
    the rules loader opens them), from now until the test ends."""
    read: list[int] = []
    opened = os.fdopen

    class Counted(io.BufferedReader):
        def read(self, size: int | None = -1) -> bytes:
            data = super().read(size)
            read.append(len(data))
            return data

    def counted_fdopen(fd: int, mode: str = "r", *args: object, **kwargs: object):
        f = opened(fd, mode, *args, **kwargs)  # type: ignore[arg-type]
        return Counted(f.detach()) if mode == "rb" else f  # type: ignore[attr-defined]

    monkeypatch.setattr(os, "fdopen", counted_fdopen)
    return read


def test_a_rules_file_is_a_regular_file_of_at_most_1_mib_and_nothing_more_is_read(
    tmp_path, monkeypatch
):

    fifo = tmp_path / "fifo.rules"
    os.mkfifo(fifo)  # opening it for reading would wait for a writer for ever
    sparse = tmp_path / "sparse.rules"
    with sparse.open("wb") as f:
        f.truncate(400 * 1024 * 1024)  # 400 MB of nothing, on no disk
    at_cap = tmp_path / "cap.rules"
    line = b"^/a /b [R=301]\n"
    at_cap.write_bytes(line * (1024 * 1024 // len(line)))
    errors: dict[str, str] = {}

    def load(path: str) -> None:
        try:
            load_rules(path)
        except RulesError as exc:
            errors[path] = exc.reason

    # What the loader reads of a file, whatever machine it runs on: nothing of these three.
    read = count_file_reads(monkeypatch)
    for path, reason in (("/dev/zero", "not a regular file"), (str(fifo), "not a regular file"),
                         (str(sparse), "larger than 1 MiB")):
        reader = threading.Thread(target=load, args=(path,), daemon=True)
        reader.start()
        reader.join(60)  # only stops a hang
        assert not reader.is_alive(), f"{path}: still reading"
        assert errors[path] == reason, errors
        assert read == [], (path, read)  # refused by what the file is, before a byte
    assert len(load_rules(str(at_cap))) == 1024 * 1024 // len(line)


# --- Nothing hangs: rejected at load, or bounded while evaluating -------------------------

REJECTED_AT_LOAD = [r"^(a+)+$", r"^(a*)*b", r"(\w+\s?)+$", r"^(.*/)+x", r"(a|aa)+$", r"(x+x+)+y"]
ACCEPTED = [
    r"^/([a-z0-9-]+/)*[a-z]+$",
    r"^(.*)utm_[a-z]+=[^&]*&?(.*)$",
    r"^/(en|fr)/(.*)$",
    r"(foo|bar)+",
    r"(a+)++",
    r"(x|xy)*z",
]


@pytest.mark.parametrize("pattern", REJECTED_AT_LOAD)
@pytest.mark.parametrize("dialect", ["seo4ajax", "apache"])
def test_catastrophic_patterns_rejected_at_load(pattern, dialect):
    text = (
        f"{pattern} /x" if dialect == "seo4ajax" else f"RewriteEngine On\nRewriteRule {pattern} /x"
    )
    with pytest.raises(RulesError, match="nested quantifier"):
        parse_rules(text)


@pytest.mark.parametrize("pattern", ACCEPTED)
def test_safe_patterns_accepted(pattern):
    parse_rules(f"{pattern} /x")


@pytest.mark.parametrize(
    "text",
    [
        # Polynomial backtracking the load check lets through: the time budget stops it.
        r"^(.*)(.*)(.*)(.*)(.*)[0-9]$ /y",
        "RewriteEngine On\nRewriteRule ^(.*)(.*)(.*)(.*)(.*)[0-9]$ /y",
        "RewriteEngine On\nRewriteCond %{QUERY_STRING} ^(.*)(.*)(.*)(.*)(.*)[0-9]$\n"
        "RewriteRule ^ - [F]",
    ],
)
def test_slow_match_is_bounded(text, monkeypatch):
    rules = parse_rules(text)
    url = "/" + "a" * 3000 + "?" + "a" * 3000
    looks = counted_budget_clock(monkeypatch)
    decision = evaluate_or_hang(rules, url)
    assert (decision.action, decision.status) == ("status", 500)
    # Unbounded, this search would run for ages; it was stopped by its time (the regex
    # module's time-out, given what was left of the budget), and nothing ran after it.
    assert len(looks) <= 3, looks


@pytest.fixture(autouse=True)
def budget_clock_stopped(monkeypatch) -> None:
    """The evaluation budget's clock stopped, in every test here: a busy machine that pauses
    this process between two patterns ends no evaluation (a test of the budget sets its own
    clock; a slow search is still ended by its own time-out)."""
    counted_budget_clock(monkeypatch)


def counted_budget_clock(monkeypatch, step: float = 0.0) -> list[float]:
    """The evaluation budget's clock, each read recorded, moving ``step`` each read
    (0: stopped, so only the round and length limits can end an evaluation)."""
    looks: list[float] = []

    def clock() -> float:
        looks.append(len(looks) * step)
        return looks[-1]

    monkeypatch.setattr(Budget, "clock", staticmethod(clock))
    return looks


def evaluate_or_hang(rules, url: str):  # type: ignore[no-untyped-def]
    """``rules.evaluate(url)`` in a thread, failing the test if it has not ended in 60 s."""
    done: list[object] = []
    worker = threading.Thread(target=lambda: done.append(rules.evaluate(url)), daemon=True)
    worker.start()
    worker.join(60)  # only stops a hang
    assert done, "evaluation still running"
    return done[0]


def test_too_long_url_is_414():
    rules = parse_rules("^/ /x")
    assert rules.evaluate("/" + "a" * 9000).status == 414


@pytest.mark.parametrize(
    "text",
    [
        "RewriteEngine On\nRewriteRule ^/(.*)$ /a$1 [N]",  # grows without end
        "RewriteEngine On\nRewriteRule ^/x$ /x [N]",  # never changes, restarts forever
        "RewriteEngine On\nRewriteRule ^/x$ /x [N=50]",
    ],
)
def test_apache_next_round_cannot_loop(text, monkeypatch):
    # With the budget's clock stopped, the round limit (or the length limit) alone ends it.
    looks = counted_budget_clock(monkeypatch)
    decision = evaluate_or_hang(parse_rules(text), "/x")
    assert (decision.action, decision.status) == ("status", 500)
    assert len(looks) <= MAX_ROUNDS + 1, len(looks)
    # With a clock that moves a millisecond a search, the budget ends it first.
    looks = counted_budget_clock(monkeypatch, step=0.001)
    decision = evaluate_or_hang(parse_rules(text), "/x")
    assert (decision.action, decision.status) == ("status", 500)
    assert len(looks) <= TIME_BUDGET / 0.001 + 2, len(looks)


def test_seo4ajax_growth_is_bounded():
    rules = parse_rules("\n".join([r"^(.*)$ $1$1"] * 40))
    assert parse_rules(r"^(.*)$ $1$1").evaluate("/a").path == "/a/a"
    assert rules.evaluate("/a").status == 500


# --- Shipped rules files ------------------------------------------------------------------

SHIPPED_ROWS = [
    ("/admin", {"action": "status", "status": 403}),
    ("/admin/users?x=1", {"action": "status", "status": 403}),
    ("/administrator", {"action": "none", "path": "/administrator"}),
    ("/old-shop/item/3", {"action": "status", "status": 410}),
    ("/beta/feature", {"action": "status", "status": 404}),
    ("/blog/2019/hello?ref=1",
     {"action": "redirect", "status": 301, "location": "/articles/hello?ref=1"}),
    ("/index.html?ref=x#!/catalog/145", {"action": "rewrite", "path": "/#!/catalog/145"}),
    ("/p?utm_source=a&b=2&gclid=z", {"action": "rewrite", "path": "/p?b=2"}),
    ("/p?a=1&utm_medium=b", {"action": "rewrite", "path": "/p?a=1"}),
    ("/p?utm_source=x", {"action": "rewrite", "path": "/p"}),
    ("/", {"action": "none", "path": "/"}),
    ("/catalog/shoes", {"action": "none", "path": "/catalog/shoes"}),
]  # fmt: skip

SHIPPED_FILES = sorted((ROOT / "rules").glob("*.rules"))


def test_rules_directory_has_both_dialects():
    dialects = {load_rules(str(f)).dialect for f in SHIPPED_FILES}
    assert dialects == {"apache", "seo4ajax"}


@pytest.mark.parametrize("path", SHIPPED_FILES, ids=lambda p: p.name)
@pytest.mark.parametrize(("url", "expected"), SHIPPED_ROWS)
def test_shipped_rules(path, url, expected):
    rules = load_rules(str(path))
    assert rules.evaluate(url, host="www.example.com").to_json(url) == {"url": url, **expected}


@pytest.mark.parametrize(
    ("file", "url", "expected"),
    [
        ("seo4ajax.rules", "/shoes/?a=1", {"action": "rewrite", "path": "/shoes?a=1"}),
        ("apache.rules", "/shoes/?a=1",
         {"action": "redirect", "status": 301, "location": "/shoes?a=1"}),
    ],
)  # fmt: skip
def test_shipped_trailing_slash(file, url, expected):
    rules = load_rules(str(ROOT / "rules" / file))
    assert rules.evaluate(url, host="www.example.com").to_json(url) == {"url": url, **expected}


# --- The CLI functions ----------------------------------------------------------------------


def test_check_ok(tmp_path, capsys):
    f = tmp_path / "site.rules"
    f.write_text("# c\nRewriteEngine On\nRewriteRule ^/a /b\nRewriteRule ^/c - [F]\n")
    assert check_command(str(f)) == 0
    out, err = capsys.readouterr()
    assert out == f"{f}: OK (2 rules, apache dialect)\n"
    assert err == ""


def test_check_error(tmp_path, capsys):
    f = tmp_path / "site.rules"
    f.write_text("^/a /b\n^/(c /d\n")
    assert check_command(str(f)) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err.startswith(f"{f}:2: bad regular expression")
    assert len(err.strip().splitlines()) == 1


def test_check_missing_file(tmp_path, capsys):
    assert check_command(str(tmp_path / "missing.rules")) == 2
    assert "cannot read rules file" in capsys.readouterr().err


def test_eval_prints_spec_lines(tmp_path, capsys):
    f = tmp_path / "site.rules"
    f.write_text(
        "RewriteEngine On\n"
        "RewriteRule ^/old/(.*)$ /new/$1 [R=301,L]\n"
        "RewriteRule ^/admin - [F]\n"
        "RewriteCond %{QUERY_STRING} (^|&)utm_\n"
        "RewriteRule ^ %{REQUEST_URI}? [L]\n"
        "RewriteCond %{HTTP_HOST} ^m\\.\n"
        "RewriteRule ^/(.*)$ /mobile/$1 [L]\n"
    )
    urls = ["/old/a?x=1", "/p?utm_source=x", "/admin", "/same"]
    assert eval_command(str(f), [], urls, None, SiteSettings(ignore_params=())) == 0
    lines = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    assert lines == [
        {"url": "/old/a?x=1", "action": "redirect", "status": 301, "location": "/new/a?x=1"},
        {"url": "/p?utm_source=x", "action": "rewrite", "path": "/p"},
        {"url": "/admin", "action": "status", "status": 403},
        {"url": "/same", "action": "none", "path": "/same"},
    ]
    assert eval_command(str(f), ["Host: m.example.com", "X-A: b"], ["/x"], None) == 0
    assert json.loads(capsys.readouterr().out)["path"] == "/mobile/x"


def test_eval_drops_ignored_parameters_before_the_rules(tmp_path, capsys):
    f = tmp_path / "site.rules"
    f.write_text("^/p\\?a=1$ /q\n")
    urls = ["/p?fbclid=1&a=1&utm_source=x", "http://h/p?a=1&gclid=2", "/p?a=1&sid=3", "/x%zz"]
    assert eval_command(str(f), [], urls, None) == 0
    lines = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    assert [x.get("path") for x in lines[:3]] == ["/q", "/q", "/p?a=1&sid=3"]
    assert lines[3] == {"url": "/x%zz", "action": "status", "status": 400}
    assert eval_command(str(f), [], urls[2:3], None, SiteSettings(ignore_params=("sid",))) == 0
    assert json.loads(capsys.readouterr().out)["path"] == "/q"


def test_eval_bad_header(tmp_path, capsys):
    f = tmp_path / "site.rules"
    f.write_text("^/a /b\n")
    assert eval_command(str(f), ["no colon"], ["/a"], None) == 2
    assert "bad header" in capsys.readouterr().err


def test_eval_bad_rules(tmp_path, capsys):
    f = tmp_path / "site.rules"
    f.write_text("^/a /b [Z]\n")
    assert eval_command(str(f), [], ["/a"], None) == 2
    assert capsys.readouterr().err.startswith(f"{f}:1: unknown flag")


@pytest.mark.parametrize(
    ("setup", "expected_path"),
    [
        ("none", "/q/a"),  # no database file
        ("no table", "/q/a"),
        ("pending", "/q/a"),
        ("processed", "/p/a"),
    ],
)
def test_eval_nf_reads_the_store(tmp_path, capsys, setup, expected_path):
    rules = tmp_path / "site.rules"
    rules.write_text("^/p/(.*)$ /q/$1 [NF]\n")
    db = tmp_path / "store.db"
    if setup != "none":
        conn = sqlite3.connect(db)
        if setup != "no table":
            conn.execute("CREATE TABLE paths (site TEXT, path TEXT, captured_at REAL)")
            captured_at = 1.0 if setup == "processed" else None
            conn.execute("INSERT INTO paths VALUES ('default', '/p/a', ?)", (captured_at,))
        conn.commit()
        conn.close()
    assert eval_command(str(rules), [], ["/p/a"], str(db)) == 0
    assert json.loads(capsys.readouterr().out)["path"] == expected_path


async def test_eval_nf_reads_the_store_given_whichever_engine(store, tmp_path, capsys):
    import asyncio

    await store.enqueue("shop", "/done", 1)
    await store.claim_path("shop", "/done", "w", 60)
    await store.complete(
        "shop", "/done", "w", CaptureOutcome(html="<p>x</p>", status=200, headers={}, final_url="",
            expires_at=9e9),
    )
    await store.enqueue("shop", "/queued", 1)
    await store.enqueue("other", "/elsewhere", 1)
    await store.claim_path("other", "/elsewhere", "w", 60)
    await store.complete(
        "other", "/elsewhere", "w", CaptureOutcome(
            html="<p>y</p>", status=200, headers={}, final_url="",
            expires_at=9e9),
    )
    f = tmp_path / "site.rules"
    f.write_text("^/(.*)$ /fallback [NF]\n")
    db = getattr(store, "dsn", None) or store.path
    urls = ["/done", "/queued", "/elsewhere"]
    shop = SiteSettings(name="shop")
    status = await asyncio.to_thread(eval_command, str(f), [], urls, db, shop)
    assert status == 0
    lines = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    # As the server judges NF: captured on this site; another site's capture does not count.
    assert [line["path"] for line in lines] == ["/done", "/fallback", "/fallback"]


def test_eval_with_an_unreachable_postgresql_store_is_one_line(tmp_path, capsys):
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    f = tmp_path / "site.rules"
    f.write_text("^/(.*)$ /fallback [NF]\n")
    assert eval_command(str(f), [], ["/a"], f"postgresql://u:pw@127.0.0.1:{port}/x") == 2
    err = capsys.readouterr().err
    assert err.startswith(f"snapshotd: postgresql://127.0.0.1:{port}/x: ") and "pw" not in err
