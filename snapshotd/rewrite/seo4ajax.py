"""SEO4Ajax's rule dialect: `<regexp> [<path>] [flags]`, one rule a line.

Invariants:
- each rule's regexp is searched in the whole site path (path, query, `#!` fragment) as the
  previous rule left it; a match replaces the whole path with `<path>` ($1..$n filled in);
- the rules run once, in order, so a rule set cannot loop; `L` or `R=` ends it early;
- `NF` asks the caller whether the matching path is captured (the generator yields it).
"""

from __future__ import annotations

import re
from collections.abc import Generator
from dataclasses import dataclass
from urllib.parse import unquote

import regex

from snapshotd.patterns.bounded_regexes import PatternError, compile_pattern
from snapshotd.rewrite.decision import RulesOutcome
from snapshotd.rewrite.errors import RulesError
from snapshotd.rewrite.limits import MAX_RESULT_LENGTH, Budget, Stop

_FLAG_GROUP = re.compile(r"\[([^\]]*)\]")


@dataclass(frozen=True)
class Seo4AjaxRule:
    line: int
    pattern: regex.Pattern[str]
    template: tuple[tuple[str, str | int], ...] | None
    last: bool = False
    status: int | None = None
    downcase: bool = False
    unescape: bool = False
    not_found: bool = False
    capture: bool = False


def _template(text: str) -> tuple[tuple[str, str | int], ...]:
    """Parse a replacement the way JavaScript's String.replace reads `$` escapes."""
    parts: list[tuple[str, str | int]] = []
    lit: list[str] = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c == "$" and i + 1 < n:
            nxt = text[i + 1]
            if nxt == "$":
                lit.append("$")
                i += 2
                continue
            if nxt == "&":
                parts.append(("lit", "".join(lit)))
                lit = []
                parts.append(("group", 0))
                i += 2
                continue
            if nxt.isdigit() and nxt.isascii():
                two = text[i + 1 : i + 3]
                digits = two if len(two) == 2 and two.isdigit() and two.isascii() else nxt
                parts.append(("lit", "".join(lit)))
                lit = []
                parts.append(("num", digits))
                i += 1 + len(digits)
                continue
            if nxt == "<":
                end = text.find(">", i + 2)
                if end > 0:
                    parts.append(("lit", "".join(lit)))
                    lit = []
                    parts.append(("name", text[i + 2 : end]))
                    i = end + 1
                    continue
        lit.append(c)
        i += 1
    parts.append(("lit", "".join(lit)))
    return tuple(p for p in parts if p != ("lit", ""))


def _expand(template: tuple[tuple[str, str | int], ...], m: regex.Match[str]) -> str:
    out = []
    ngroups = len(m.groups())
    for kind, value in template:
        if kind == "lit":
            out.append(str(value))
        elif kind == "group":
            out.append(m.group(0))
        elif kind == "num":
            digits = str(value)
            # "$12" means group 12 when it exists, else group 1 followed by "2".
            if len(digits) == 2 and 0 < int(digits) <= ngroups:
                out.append(m.group(int(digits)) or "")
            elif 0 < int(digits[0]) <= ngroups:
                out.append((m.group(int(digits[0])) or "") + digits[1:])
            else:
                out.append("$" + digits)
        else:
            name = str(value)
            if name in m.re.groupindex:
                out.append(m.group(name) or "")
            else:
                out.append(f"$<{name}>")
    return "".join(out)


def _drop_empty_query(path: str) -> str:
    """`/p?` and `/p?#!/x` name the same page as `/p` and `/p#!/x`."""
    before, hash_, frag = path.partition("#")
    if before.endswith("?"):
        before = before[:-1]
    return before + hash_ + frag


def parse_line(text: str, line: int, filename: str) -> Seo4AjaxRule:
    """Parse one non-comment line."""
    words = text.split(None, 2)
    pattern_text = words[0]
    rest_words = words[1:]
    template = None
    if rest_words and not rest_words[0].startswith("["):
        template = _template(rest_words[0])
        rest_words = rest_words[1:]
    flags_text = " ".join(rest_words)
    flags: dict[str, object] = {}
    rest = flags_text.strip()
    while rest:
        m = _FLAG_GROUP.match(rest)
        if not m:
            raise RulesError(filename, line, f"expected '<regexp> [<path>] [flags]', got {rest!r}")
        for raw in m.group(1).split(","):
            _flag(raw.strip(), flags, filename, line)
        rest = rest[m.end() :].lstrip()
    try:
        pattern = compile_pattern(pattern_text, icase=bool(flags.get("nc")))
    except PatternError as e:
        raise RulesError(filename, line, str(e)) from None
    status = flags.get("status")
    return Seo4AjaxRule(
        line=line,
        pattern=pattern,
        template=template,
        last=bool(flags.get("last")) or status is not None,
        status=status if isinstance(status, int) else None,
        downcase=bool(flags.get("d")),
        unescape=bool(flags.get("u")),
        not_found=bool(flags.get("nf")),
        capture=bool(flags.get("c")),
    )


def _flag(raw: str, flags: dict[str, object], filename: str, line: int) -> None:
    name, eq, value = raw.partition("=")
    key = name.strip().upper()
    if key == "R" and eq:
        value = value.strip()
        # Three ASCII digits (int() reads '３０１' and refuses a few thousand digits), and
        # not 1xx: an interim status ends no answer.
        if not re.fullmatch(r"[2-5][0-9][0-9]", value):
            raise RulesError(
                filename, line, f"R needs an HTTP status code from 200 to 599 (R=301): {raw!r}"
            )
        flags["status"] = int(value)
        return
    simple = {"L": "last", "NC": "nc", "D": "d", "U": "u", "NF": "nf", "C": "c"}
    if key in simple and not eq:
        flags[simple[key]] = True
        return
    if key == "R":
        raise RulesError(filename, line, "R needs an HTTP status code (R=301)")
    raise RulesError(filename, line, f"unknown flag {raw!r} (known: L, R=xxx, NC, D, U, NF, C)")


def run(rules: tuple[Seo4AjaxRule, ...], url: str) -> Generator[str, bool, RulesOutcome]:
    """Apply the rules to `url`; yields a path to ask whether it is captured (NF)."""
    budget = Budget()
    path = url
    capture = False
    try:
        for rule in rules:
            m = budget.search(rule.pattern, path)
            if m is None:
                continue
            if rule.not_found and (yield path):
                continue
            capture = capture or rule.capture
            new = _expand(rule.template, m) if rule.template is not None else path
            if rule.unescape:
                new = unquote(new, errors="surrogateescape")
            if rule.downcase:
                new = new.lower()
            if len(new) > MAX_RESULT_LENGTH:
                raise Stop(500)
            path = new
            if rule.status is not None:
                if 300 <= rule.status < 400:
                    target = _drop_empty_query(path)
                    return RulesOutcome("redirect", target, rule.status, target, capture)
                return RulesOutcome("status", url, rule.status, None, capture)
            if rule.last:
                break
    except Stop as stop:
        return RulesOutcome("status", url, stop.status, None, capture)
    path = _drop_empty_query(path)
    return RulesOutcome("none" if path == url else "rewrite", path, capture=capture)
