"""The Apache dialect: mod_rewrite of httpd 2.4 in server context.

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
from dataclasses import dataclass, field

import regex

from .common import MAX_RESULT_LENGTH, Budget, Stop, split_url
from .decision import Decision
from .errors import RulesError
from .regexes import PatternError, compile_pattern

# Characters ap_escape_uri leaves alone (besides letters and digits).
_URI_SAFE = frozenset(b"$-_.+!*'(),:;@&=/~")
_ALNUM = frozenset(b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789")
_UNRESERVED = frozenset(b"-._~") | _ALNUM
_HEX = "0123456789abcdefABCDEF"

_SCHEMES = (
    ("ajp://", True), ("balancer://", True), ("ftp://", False), ("fcgi://", True),
    ("gopher://", False), ("http://", True), ("https://", True), ("h2://", True),
    ("h2c://", True), ("ldap://", False), ("mailto:", True), ("news:", False),
    ("nntp://", False), ("scgi://", True), ("ws://", True), ("wss://", True),
)  # fmt: skip

# The status codes httpd 2.4 knows; R= accepts only these.
_APACHE_CODES = frozenset(
    [100, 101, 102, 103, *range(200, 209), 226, *range(300, 309), *range(400, 418), 421, 422,
     423, 424, 425, 426, 428, 429, 431, 451, *range(500, 509), 510, 511]
)  # fmt: skip

MAX_ROUNDS = 10000  # mod_rewrite's REWRITE_MAX_ROUNDS for the N flag

_HEADER_VARS = {
    "HTTP_HOST": "host",
    "HTTP_USER_AGENT": "user-agent",
    "HTTP_REFERER": "referer",
    "HTTP_COOKIE": "cookie",
    "HTTP_ACCEPT": "accept",
    "HTTP_FORWARDED": "forwarded",
    "HTTP_PROXY_CONNECTION": "proxy-connection",
}
_OTHER_VARS = frozenset(
    {
        "REQUEST_URI", "QUERY_STRING", "REQUEST_FILENAME", "SCRIPT_FILENAME",
        "REQUEST_METHOD", "THE_REQUEST", "SERVER_NAME", "SERVER_PORT", "REQUEST_SCHEME",
        "HTTPS", "SERVER_PROTOCOL", "IS_SUBREQ", "FRAGMENT",
    }
)  # fmt: skip


def escape_uri(text: str) -> str:
    """ap_escape_uri: percent-encode (lower-case hex) what may not stand in a URL path."""
    out = []
    for b in text.encode("utf-8", "surrogateescape"):
        if b in _ALNUM or b in _URI_SAFE:
            out.append(chr(b))
        else:
            out.append(f"%{b:02x}")
    return "".join(out)


def _escape_backref(text: str, escapes: str | None, noplus: bool) -> str:
    """The B flag: escape a back-reference as mod_rewrite's escape_backref does."""
    out = []
    chosen = escapes.encode() if escapes else None
    for b in text.encode("utf-8", "surrogateescape"):
        if chosen is None:
            escape = not (b in _ALNUM or b == 0x5F)
        else:
            escape = b in chosen
        if not escape:
            out.append(chr(b))
        elif b == 0x20 and not noplus:
            out.append("+")
        else:
            out.append(f"%{b:02x}")
    return "".join(out).encode("latin-1").decode("utf-8", "surrogateescape")


def absolute_scheme(uri: str) -> tuple[int, bool]:
    """Length of a known scheme prefix (0 when the URI is not absolute), query support."""
    if uri.startswith("/") or len(uri) <= 5:
        return 0, False
    low = uri[:12].lower()
    for prefix, qs in _SCHEMES:
        if low.startswith(prefix):
            return len(prefix), qs
    return 0, False


def _escape_absolute(uri: str, skip: int) -> str:
    cp = skip
    if uri[skip - 1] == "/":
        while cp < len(uri) and uri[cp] != "/":
            cp += 1
        if cp >= len(uri) or cp + 1 >= len(uri):
            return uri
        cp += 1
    return uri[:cp] + escape_uri(uri[cp:])


def _decode_path(raw: str) -> str:
    """The URL-path as Apache hands it to mod_rewrite: normalised, then decoded."""
    data = raw.encode("utf-8", "surrogateescape")
    # %XX of unreserved characters is decoded first, so %2e%2e counts as "..".
    out = bytearray()
    i = 0
    while i < len(data):
        if data[i] == 0x25:
            h = data[i + 1 : i + 3].decode("latin-1")
            if len(h) < 2 or h[0] not in _HEX or h[1] not in _HEX:
                raise Stop(400)
            v = int(h, 16)
            if v in _UNRESERVED:
                out.append(v)
            else:
                out += data[i : i + 3]
            i += 3
            continue
        out.append(data[i])
        i += 1
    segments: list[bytes] = []
    parts = bytes(out).split(b"/")
    for n, seg in enumerate(parts[1:], 1):
        last = n == len(parts) - 1
        if seg == b".":
            if last:
                segments.append(b"")
            continue
        if seg == b"..":
            if not segments:
                raise Stop(400)
            segments.pop()
            if last:
                segments.append(b"")
            continue
        if seg == b"" and not last:
            continue  # MergeSlashes
        segments.append(seg)
    path = b"/" + b"/".join(segments)
    decoded = bytearray()
    i = 0
    while i < len(path):
        if path[i] == 0x25:
            v = int(path[i + 1 : i + 3], 16)
            if v in (0x2F, 0x00):
                raise Stop(404)  # AllowEncodedSlashes Off; NUL is never allowed
            decoded.append(v)
            i += 3
            continue
        decoded.append(path[i])
        i += 1
    return decoded.decode("utf-8", "surrogateescape")


# --- parsed rules -----------------------------------------------------------------------

Template = tuple[tuple[str, object], ...]


@dataclass(frozen=True)
class Cond:
    line: int
    input: Template
    kind: str  # "regex", "=", "<", "<=", ">", ">=", "-eq", "-lt", "-le", "-gt", "-ge"
    pattern: str
    regex: regex.Pattern[str] | None
    negate: bool
    nocase: bool
    ornext: bool


@dataclass(frozen=True)
class Rule:
    line: int
    regex: regex.Pattern[str]
    negate: bool
    output: Template | None  # None for "-"
    conds: tuple[Cond, ...] = ()
    last: bool = False
    end: bool = False
    chain: bool = False
    skip: int = 0
    next_round: bool = False
    max_rounds: int = MAX_ROUNDS
    redirect: bool = False
    code: int = 302
    status: bool = False  # F, G, or R with a code outside 3xx: answer `code`, no substitution
    qsa: bool = False
    qsd: bool = False
    qsl: bool = False
    noescape: bool = False
    backref_escape: bool = False
    backref_escapes: str | None = None
    backref_noplus: bool = False
    passthrough: bool = False
    allow_3f: bool = False


@dataclass
class Program:
    engine_on: bool = False
    rules: list[Rule] = field(default_factory=list)


def _parse_template(text: str, filename: str, line: int) -> Template:
    """Split a TestString or Substitution into literals, variables and back-references."""
    parts: list[tuple[str, object]] = []
    lit: list[str] = []

    def flush() -> None:
        if lit:
            parts.append(("lit", "".join(lit)))
            lit.clear()

    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c == "\\":
            lit.append(text[i + 1] if i + 1 < n else "\\")
            i += 2
            continue
        if c in "$%" and text[i + 1 : i + 2] == "{":
            end = _closing_curly(text, i + 2)
            if end < 0:
                lit.append(text[i : i + 2])
                i += 2
                continue
            inner = text[i + 2 : end]
            if c == "$":
                if _char_in_curlies(inner, ":"):
                    raise RulesError(
                        filename, line, f"RewriteMap lookups are not supported: ${{{inner}}}"
                    )
                lit.append("${")
                i += 2
                continue
            flush()
            parts.append(("var", _variable(inner, filename, line)))
            i = end + 1
            continue
        if c in "$%" and i + 1 < n and text[i + 1].isdigit() and text[i + 1].isascii():
            flush()
            parts.append(("rr" if c == "$" else "rc", int(text[i + 1])))
            i += 2
            continue
        lit.append(c)
        i += 1
    flush()
    return tuple(parts)


def _closing_curly(text: str, start: int) -> int:
    depth = 1
    for i in range(start, len(text)):
        if text[i] == "}":
            depth -= 1
            if depth == 0:
                return i
        elif text[i] == "{":
            depth += 1
    return -1


def _char_in_curlies(text: str, ch: str) -> bool:
    depth = 0
    for c in text:
        if c == ch and depth == 0:
            return True
        if c == "{":
            depth += 1
        elif c == "}":
            depth -= 1
    return False


def _variable(name: str, filename: str, line: int) -> tuple[str, str]:
    if name.upper().startswith("HTTP:") and len(name) > 5:
        return ("header", name[5:].lower())
    if name in _HEADER_VARS:
        return ("header", _HEADER_VARS[name])
    if name in _OTHER_VARS:
        return ("server", name)
    raise RulesError(
        filename,
        line,
        f"server variable %{{{name}}} is not supported (use REQUEST_URI, QUERY_STRING, "
        "HTTP_HOST, HTTP_USER_AGENT, HTTP_REFERER, HTTP_COOKIE, HTTP_ACCEPT or HTTP:Name)",
    )


def _split_args(text: str) -> list[str]:
    """Apache's parseargline: whitespace-separated, optionally quoted, `\\ ` keeps a space."""
    args: list[str] = []
    i, n = 0, len(text)
    while True:
        while i < n and text[i].isspace():
            i += 1
        if i >= n:
            return args
        quote = text[i] if text[i] in "\"'" else ""
        if quote:
            i += 1
        start = i
        while i < n:
            c = text[i]
            if (c.isspace() and not quote) or (quote and c == quote):
                break
            if c == "\\" and i + 1 < n and text[i + 1].isspace():
                i += 2
                continue
            i += 1
        args.append(text[start:i])
        i += 1


_COND_FLAGS = {"NC": "nocase", "NOCASE": "nocase", "OR": "ornext", "ORNEXT": "ornext",
               "NV": "novary", "NOVARY": "novary"}  # fmt: skip


def _flag_items(text: str, filename: str, line: int, what: str) -> list[tuple[str, str]]:
    if not (text.startswith("[") and text.endswith("]")):
        raise RulesError(filename, line, f"{what}: bad flag delimiters in {text!r}")
    items = []
    for raw in text[1:-1].split(","):
        raw = raw.strip()
        if not raw:
            continue
        key, _, val = raw.partition("=")
        items.append((key.strip(), val))
    return items


def _parse_cond(args: list[str], filename: str, line: int) -> Cond:
    if len(args) < 2 or len(args) > 3:
        raise RulesError(filename, line, "RewriteCond needs TestString CondPattern [flags]")
    flags = set()
    if len(args) == 3:
        for key, _ in _flag_items(args[2], filename, line, "RewriteCond"):
            name = _COND_FLAGS.get(key.upper())
            if name is None:
                raise RulesError(filename, line, f"RewriteCond: unknown flag '{key}'")
            flags.add(name)
    test, pat = args[0], args[1]
    if test.lower() == "expr":
        raise RulesError(filename, line, "RewriteCond expr is not supported")
    negate = pat.startswith("!")
    if negate:
        pat = pat[1:]
    kind = "regex"
    if len(pat) >= 2:
        if pat[0] == "-" and len(pat) == 2 and pat[1] in "fsdxhLlUF":
            raise RulesError(
                filename,
                line,
                f"RewriteCond {pat}: file and sub-request tests are not "
                "supported (snapshotd has no document root)",
            )
        if pat[0] == "-" and len(pat) > 3 and pat[1:3] in ("lt", "le", "gt", "ge", "eq", "ne"):
            op = pat[1:3]
            pat = pat[3:]
            if op == "ne":
                op, negate = "eq", not negate
            kind = "-" + op
        elif pat[0] in "<>":
            kind = pat[0]
            pat = pat[1:]
            if pat.startswith("="):
                kind += "="
                pat = pat[1:]
        elif pat[0] == "=":
            kind = "="
            pat = pat[1:]
            if pat == '""':
                pat = ""
    nocase = "nocase" in flags
    if kind.startswith("-"):
        nocase = False  # Apache ignores NC on integer comparisons
    compiled = None
    if kind == "regex":
        try:
            compiled = compile_pattern(pat, icase=nocase)
        except PatternError as e:
            raise RulesError(filename, line, f"RewriteCond: {e}") from None
    return Cond(
        line=line,
        input=_parse_template(test, filename, line),
        kind=kind,
        pattern=pat,
        regex=compiled,
        negate=negate,
        nocase=nocase,
        ornext="ornext" in flags,
    )


def _status_code(val: str, filename: str, line: int) -> int:
    names = {"permanent": 301, "temp": 302, "seeother": 303}
    if val.lower() in names:
        return names[val.lower()]
    if val[:1].isdigit():
        m = re.match(r"\d+", val)
        code = int(m.group(0)) if m else 0
        if code not in _APACHE_CODES:
            raise RulesError(
                filename, line, f"RewriteRule: invalid HTTP response code '{val}' for flag 'R'"
            )
        return code
    raise RulesError(filename, line, f"RewriteRule: invalid redirect code '{val}' for flag 'R'")


def _parse_rule(args: list[str], conds: list[Cond], filename: str, line: int) -> Rule:
    if len(args) < 2 or len(args) > 3:
        raise RulesError(filename, line, "RewriteRule needs Pattern Substitution [flags]")
    f: dict[str, object] = {}
    if len(args) == 3:
        for key, val in _flag_items(args[2], filename, line, "RewriteRule"):
            _rule_flag(key, val, f, filename, line)
    pat = args[0]
    negate = pat.startswith("!")
    if negate:
        pat = pat[1:]
    try:
        compiled = compile_pattern(pat, icase=bool(f.pop("nocase", False)))
    except PatternError as e:
        raise RulesError(filename, line, f"RewriteRule: {e}") from None
    nosub = args[1] == "-" or bool(f.get("status"))
    return Rule(
        line=line,
        regex=compiled,
        negate=negate,
        output=None if nosub else _parse_template(args[1], filename, line),
        conds=tuple(conds),
        **f,  # type: ignore[arg-type]
    )


def _rule_flag(key: str, val: str, f: dict[str, object], filename: str, line: int) -> None:
    k = key.lower()
    if k in ("b", "backrefescaping"):
        f["backref_escape"] = True
        if val:
            f["backref_escapes"] = val
    elif k in ("bnp", "backrefnoplus"):
        f["backref_noplus"] = True
    elif k in ("c", "chain"):
        f["chain"] = True
    elif k in ("co", "cookie", "e", "env", "t", "type", "h", "handler", "ns", "nosubreq"):
        pass  # cookies, environment, MIME type and handler do not change the path or status
    elif k.startswith("d") and (k in ("d", "dpi", "discardpath")):
        pass  # PATH_INFO does not exist in server context
    elif k == "end":
        f["end"] = True
    elif k in ("f", "forbidden"):
        f["status"], f["code"] = True, 403
    elif k in ("g", "gone"):
        f["status"], f["code"] = True, 410
    elif k in ("l", "last"):
        f["last"] = True
    elif k in ("ne", "noescape"):
        f["noescape"] = True
    elif k in ("n", "next"):
        f["next_round"] = True
        if val:
            m = re.match(r"\d+", val)
            f["max_rounds"] = int(m.group(0)) if m else 0
    elif k in ("nc", "nocase"):
        f["nocase"] = True
    elif k in ("p", "proxy"):
        raise RulesError(filename, line, "RewriteRule: flag 'P' (proxy) is not supported")
    elif k in ("pt", "passthrough"):
        f["passthrough"] = True
    elif k in ("qsa", "qsappend"):
        f["qsa"] = True
    elif k in ("qsd", "qsdiscard"):
        f["qsd"] = True
    elif k in ("qsl", "qslast"):
        f["qsl"] = True
    elif k in ("r", "redirect"):
        f["redirect"] = True
        if val:
            code = _status_code(val, filename, line)
            f["code"] = code
            if not 300 <= code < 400:
                f["status"] = True
    elif k in ("s", "skip"):
        m = re.match(r"\d+", val)
        f["skip"] = int(m.group(0)) if m else 0
    elif k == "unsafeallow3f":
        f["allow_3f"] = True
    elif k == "unsafeprefixstat":
        pass  # no file system here
    else:
        raise RulesError(filename, line, f"RewriteRule: unknown flag '{key}'")


def parse(lines: list[tuple[int, str]], filename: str) -> Program:
    """Parse the (line number, text) directives of an Apache-dialect file."""
    prog = Program()
    conds: list[Cond] = []
    cond_line = 0
    for line, text in lines:
        name, _, rest = text.partition(" ")
        if "\t" in name:
            name, _, more = name.partition("\t")
            rest = more + " " + rest
        directive = name.lower()
        args = _split_args(rest)
        if directive == "rewriteengine":
            if len(args) != 1 or args[0].lower() not in ("on", "off"):
                raise RulesError(filename, line, "RewriteEngine takes On or Off")
            prog.engine_on = args[0].lower() == "on"
        elif directive == "rewritecond":
            conds.append(_parse_cond(args, filename, line))
            cond_line = cond_line or line
        elif directive == "rewriterule":
            prog.rules.append(_parse_rule(args, conds, filename, line))
            conds, cond_line = [], 0
        elif directive == "rewriteoptions":
            if any(a.lower() not in ("inherit", "inheritbefore") for a in args):
                raise RulesError(
                    filename, line, "RewriteOptions other than Inherit are not supported"
                )
        elif directive == "rewritebase":
            raise RulesError(
                filename, line, "RewriteBase: only valid in per-directory config files"
            )
        elif directive == "rewritemap":
            raise RulesError(filename, line, "RewriteMap is not supported")
        else:
            raise RulesError(filename, line, f"{name}: not a mod_rewrite directive")
    if conds:
        raise RulesError(filename, cond_line, "RewriteCond without a RewriteRule after it")
    if (
        prog.rules
        and not prog.engine_on
        and not any(t.lower().startswith("rewriteengine") for _, t in lines)
    ):
        raise RulesError(
            filename, lines[0][0], "RewriteEngine On is missing: Apache would ignore these rules"
        )
    return prog


# --- evaluation -------------------------------------------------------------------------


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
                text = _escape_backref(text, rule.backref_escapes, rule.backref_noplus)
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
    m = re.match(r"\s*([+-]?\d+)", s)
    return int(m.group(1)) if m else 0


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


def run(prog: Program, url: str, host: str, headers: Mapping[str, str] | None) -> Decision:
    """Apply an Apache-dialect rule set to one site path."""
    if not prog.engine_on or not prog.rules:
        return Decision("none", url)
    raw_path, query, fragment = split_url(url)
    hdrs = {k.lower(): v for k, v in (headers or {}).items()}
    host_header = hdrs.get("host") or host
    if host_header and "host" not in hdrs:
        hdrs["host"] = host_header
    hostname, _, port = host_header.rpartition(":") if _has_port(host_header) else (
        host_header, "", "")  # fmt: skip
    raw_url = raw_path + ("?" + query if query is not None else "")
    try:
        ctx = _Ctx(_decode_path(raw_path or "/"), query or None, raw_url, fragment, hdrs,
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
                return Decision("status", url, rule.code)
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
            return Decision("none", url)
        skip, _ = absolute_scheme(ctx.uri)
        if skip:
            location = ctx.uri if changed == 2 else _escape_absolute(ctx.uri, skip)
            if ctx.args:
                plain = changed == 2 or (oargs is not None and ctx.args == oargs)
                location += "?" + (ctx.args if plain else escape_uri(ctx.args))
            status = ctx.status if 300 <= ctx.status < 400 else 302
            prefix = _server_prefix(ctx)
            if location[: len(prefix) + 1].lower() == (prefix + "/").lower():
                location = location[len(prefix) :]
            location += fragment
            return Decision("redirect", location, status, location)
        if not ctx.uri.startswith("/"):
            raise Stop(400)
        if ctx.args and any(ch <= " " or ch == "\x7f" for ch in ctx.args):
            raise Stop(403)  # mod_rewrite refuses spaces and controls in a rewritten query
        path = escape_uri(ctx.uri) + ("?" + ctx.args if ctx.args else "") + fragment
    except Stop as stop:
        return Decision("status", url, stop.status)
    return Decision("none" if path == url else "rewrite", path)


def _has_port(host: str) -> bool:
    if host.startswith("["):
        return "]:" in host
    return ":" in host
