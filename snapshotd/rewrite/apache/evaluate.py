"""Evaluation of the Apache dialect: `run` applies a Program to one site path the way
mod_rewrite of httpd 2.4 does in server context.

Invariants (each mirrors mod_rewrite's hook_uri2file / apply_rewrite_list):
- the pattern sees the URL-path decoded and normalised (dot segments, merged slashes); the
  query string is only reached through %{QUERY_STRING}, a `#!` fragment only through
  snapshotd's own %{FRAGMENT} (empty in httpd), and the fragment is carried over to the result;
- conditions belong to the next RewriteRule and are checked only after its pattern matched;
- a rule with R but without L goes on, and later rules see the fully qualified URL;
- the result is a redirect when it ends as an absolute URL, a status for F, G and non-3xx R,
  and otherwise a local path, escaped again for use as a site path;
- N (restart) is bounded by its round limit and the shared time budget, so nothing loops.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

import regex

from snapshotd.rewrite.apache.parsing import Cond, Program, Rule, Template, leading_number
from snapshotd.rewrite.apache.uri import (
    absolute_scheme,
    decode_path,
    escape_absolute,
    escape_backref,
    escape_uri,
)
from snapshotd.rewrite.decision import RulesOutcome
from snapshotd.rewrite.limits import MAX_RESULT_LENGTH, Budget, Stop, split_url

# What C's atoi skips and reads before the digits: ASCII white space, one sign.
_SIGN = re.compile(r"[ \t\n\v\f\r]*([+-]?)")


class _Ctx:
    """The request as mod_rewrite sees it while the rules run (r->filename, r->args...)."""

    __slots__ = ("uri", "args", "status", "orig_uri", "raw_url", "fragment", "headers", "host",
                 "port", "rr", "rc", "budget", "unsafe_qmark")  # fmt: skip

    def __init__(
        self, uri: str, args: str | None, raw_url: str, fragment: str,
        headers: Mapping[str, str], host: str, port: str,
    ) -> None:  # fmt: skip
        self.uri: str = uri
        self.orig_uri: str = uri
        self.args: str | None = args
        self.raw_url = raw_url
        self.fragment = fragment
        self.headers = headers
        self.host = host
        self.port = port
        self.status = 302
        self.rr: regex.Match[str] | None = None
        self.rc: regex.Match[str] | None = None
        self.budget = Budget()
        self.unsafe_qmark = False


def _lookup(ctx: _Ctx, var: tuple[str, str]) -> str:
    kind, name = var
    if kind == "header":
        return ctx.headers.get(name, "")
    if name == "REQUEST_URI":
        return ctx.orig_uri
    if name == "QUERY_STRING":
        return ctx.args or ""
    if name in ("REQUEST_FILENAME", "SCRIPT_FILENAME"):
        return ctx.uri
    if name == "REQUEST_METHOD":
        return "GET"
    if name == "THE_REQUEST":
        return f"GET {ctx.raw_url} HTTP/1.1"
    if name == "SERVER_NAME":
        return ctx.host
    if name == "SERVER_PORT":
        return ctx.port or "80"
    if name == "REQUEST_SCHEME":
        return "http"
    if name == "HTTPS":
        return "off"
    if name == "SERVER_PROTOCOL":
        return "HTTP/1.1"
    if name == "FRAGMENT":
        return ctx.fragment[1:]
    return "false"  # IS_SUBREQ


def _expand(tpl: Template, ctx: _Ctx, rule: Rule | None) -> str:
    out: list[str] = []
    for kind, value in tpl:
        if kind == "lit":
            out.append(value)  # type: ignore[arg-type]
        elif kind == "var":
            out.append(_lookup(ctx, value))  # type: ignore[arg-type]
        else:
            m = ctx.rr if kind == "rr" else ctx.rc
            n = int(value)  # type: ignore[call-overload]
            if m is None or n > len(m.groups()):
                continue
            text = m.group(n) or ""
            if not text:
                continue
            if rule is not None and rule.backref_escape:
                text = escape_backref(text, rule.backref_escapes, rule.backref_noplus)
            elif rule is not None and "?" in text:
                ctx.unsafe_qmark = True
            out.append(text)
    return "".join(out)


def _compare(a: str, b: str) -> int:
    """mod_rewrite's compare_lexicography: the longer string is greater, then bytewise."""
    ab, bb = a.encode("utf-8", "surrogateescape"), b.encode("utf-8", "surrogateescape")
    if len(ab) != len(bb):
        return 1 if len(ab) > len(bb) else -1
    return (ab > bb) - (ab < bb)


def _casecmp(a: str, b: str) -> int:
    al, bl = a.lower(), b.lower()
    return (al > bl) - (al < bl)


def _atoi(s: str) -> int:
    """C's atoi of a request's text: ASCII white space, a sign, ASCII digits (bounded)."""
    m = _SIGN.match(s)
    assert m is not None  # every part of it may be empty
    value = leading_number(s[m.end() :])
    return -value if m.group(1) == "-" else value


def _apply_cond(c: Cond, ctx: _Ctx) -> bool:
    value = _expand(c.input, ctx, None)
    if c.kind == "regex":
        assert c.regex is not None
        m = ctx.budget.search(c.regex, value)
        rc = m is not None
        if rc and not c.negate:
            ctx.rc = m
    elif c.kind == "=":
        rc = value.lower() == c.pattern.lower() if c.nocase else value == c.pattern
    elif c.kind in ("<", "<=", ">", ">="):
        cmp = _casecmp(value, c.pattern) if c.nocase else _compare(value, c.pattern)
        rc = {"<": cmp < 0, "<=": cmp <= 0, ">": cmp > 0, ">=": cmp >= 0}[c.kind]
    else:
        a, b = _atoi(value), _atoi(c.pattern)
        rc = {"-eq": a == b, "-lt": a < b, "-le": a <= b, "-gt": a > b, "-ge": a >= b}[c.kind]
    return rc != c.negate


def _splitout_query(ctx: _Ctx, rule: Rule) -> None:
    skip, supports_qs = absolute_scheme(ctx.uri)
    if skip and not supports_qs:
        ctx.args = None
        return
    if rule.qsd:
        ctx.args = None
    q = ctx.uri.rfind("?") if rule.qsl else ctx.uri.find("?")
    if q < 0:
        return
    query = ctx.uri[q + 1 :]
    ctx.uri = ctx.uri[:q]
    if rule.qsa:
        if query:
            ctx.args = query + "&" + (ctx.args or "")
    else:
        ctx.args = query
    if ctx.args is not None:
        if not ctx.args:
            ctx.args = None
        elif ctx.args.endswith("&"):
            ctx.args = ctx.args[:-1]


def _server_prefix(ctx: _Ctx) -> str:
    port = f":{ctx.port}" if ctx.port and ctx.port != "80" else ""
    return f"http://{ctx.host or 'localhost'}{port}"


def _reduce(ctx: _Ctx) -> None:
    """Strip http://ourhost[:port] from a substitution that names this very site."""
    uri = ctx.uri
    if len(uri) <= 7 or uri[:7].lower() != "http://":
        return
    rest = uri[7:]
    end = len(rest)
    for i, ch in enumerate(rest):
        if ch in "/:":
            end = i
            break
    host = rest[:end]
    port = "80"
    url_at = end
    if end < len(rest) and rest[end] == ":":
        j = end + 1
        while j < len(rest) and rest[j] != "/":
            j += 1
        port = str(_atoi(rest[end + 1 : j]))
        url_at = j
    url = rest[url_at:] or "/"
    if host.lower() == (ctx.host or "localhost").lower() and port == (ctx.port or "80"):
        ctx.uri = url


def _apply_rule(rule: Rule, ctx: _Ctx) -> int:
    """0: no match; 1: matched and substituted; 2: matched, nothing substituted."""
    m = ctx.budget.search(rule.regex, ctx.uri)
    if (m is not None) == rule.negate:
        return 0
    ctx.rc = None
    ctx.rr = None if rule.negate else m
    conds = rule.conds
    i = 0
    while i < len(conds):
        c = conds[i]
        ok = _apply_cond(c, ctx)
        if c.ornext:
            if not ok:
                i += 1
                continue
            while i < len(conds) and conds[i].ornext:
                i += 1
        elif not ok:
            return 0
        i += 1
    if rule.output is None:
        return 2
    ctx.unsafe_qmark = False
    new = _expand(rule.output, ctx, rule)
    if ctx.unsafe_qmark and "?" in new and not rule.allow_3f:
        raise Stop(403)  # a decoded %3F would turn into a query separator
    ctx.uri = new
    _splitout_query(ctx, rule)
    if not ctx.uri.startswith("/") and not absolute_scheme(ctx.uri)[0]:
        ctx.uri = "/" + ctx.uri  # httpd 2.4 roots a relative result in server context
    if rule.redirect:
        if not absolute_scheme(ctx.uri)[0]:
            sep = "" if ctx.uri.startswith("/") else "/"
            ctx.uri = _server_prefix(ctx) + sep + ctx.uri
        ctx.status = rule.code
        return 1
    _reduce(ctx)
    if absolute_scheme(ctx.uri)[0]:
        ctx.status = rule.code
    return 1


def run(prog: Program, url: str, host: str, headers: Mapping[str, str] | None) -> RulesOutcome:
    """Apply an Apache-dialect rule set to one site path."""
    if not prog.engine_on or not prog.rules:
        return RulesOutcome("none", url)
    raw_path, query, fragment = split_url(url)
    hdrs = {k.lower(): v for k, v in (headers or {}).items()}
    host_header = hdrs.get("host") or host
    if host_header and "host" not in hdrs:
        hdrs["host"] = host_header
    hostname, _, port = host_header.rpartition(":") if _has_port(host_header) else (
        host_header, "", "")  # fmt: skip
    raw_url = raw_path + ("?" + query if query is not None else "")
    try:
        ctx = _Ctx(decode_path(raw_path or "/"), query or None, raw_url, fragment, hdrs,
                   hostname, port)  # fmt: skip
        oargs = ctx.args
        changed = 0  # 0 unchanged, 1 changed, 2 changed by a rule with NE
        rules = prog.rules
        n = len(rules)
        rounds = 1
        i = 0
        while i < n:
            rule = rules[i]
            rc = _apply_rule(rule, ctx)
            if not rc:
                while i < n and rules[i].chain:
                    i += 1
                i += 1
                continue
            if len(ctx.uri) > MAX_RESULT_LENGTH:
                raise Stop(500)
            if rule.status:
                return RulesOutcome("status", url, rule.code)
            if rc == 1:
                changed = 2 if rule.noescape else 1
            if rule.passthrough or rule.end or rule.last:
                break
            if rule.next_round:
                rounds += 1
                if rounds >= rule.max_rounds:
                    raise Stop(500)
                i = 0
                continue
            i += 1 + rule.skip
        if not changed:
            return RulesOutcome("none", url)
        skip, _ = absolute_scheme(ctx.uri)
        if skip:
            location = ctx.uri if changed == 2 else escape_absolute(ctx.uri, skip)
            if ctx.args:
                plain = changed == 2 or (oargs is not None and ctx.args == oargs)
                location += "?" + (ctx.args if plain else escape_uri(ctx.args))
            status = ctx.status if 300 <= ctx.status < 400 else 302
            prefix = _server_prefix(ctx)
            if location[: len(prefix) + 1].lower() == (prefix + "/").lower():
                location = location[len(prefix) :]
            location += fragment
            return RulesOutcome("redirect", location, status, location)
        if not ctx.uri.startswith("/"):
            raise Stop(400)
        if ctx.args and any(ch <= " " or ch == "\x7f" for ch in ctx.args):
            raise Stop(403)  # mod_rewrite refuses spaces and controls in a rewritten query
        path = escape_uri(ctx.uri) + ("?" + ctx.args if ctx.args else "") + fragment
    except Stop as stop:
        return RulesOutcome("status", url, stop.status)
    return RulesOutcome("none" if path == url else "rewrite", path)


def _has_port(host: str) -> bool:
    if host.startswith("["):
        return "]:" in host
    return ":" in host
