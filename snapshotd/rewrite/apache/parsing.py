"""The Apache dialect's parsed rules: Cond, Rule, Program and `parse`, which builds them.

Invariants:
- conditions belong to the next RewriteRule; a RewriteCond with no rule after it is an error;
- every pattern is compiled once here (NC folded in), every TestString and Substitution split
  once into literals, server variables and back-references, so evaluation only expands
  and matches;
- what snapshotd cannot honour (RewriteMap, RewriteBase, file tests, expr, P, unknown
  variables, flags and status codes) is refused with a RulesError naming the line, never
  silently ignored; flags that cannot change the path or status are accepted and dropped;
- rules in a file with no RewriteEngine line are refused, since Apache would ignore them
  (RewriteEngine Off keeps them, inert).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import regex

from snapshotd.patterns.bounded_regexes import PatternError, compile_pattern
from snapshotd.rewrite.errors import RulesError

# The status codes httpd 2.4 knows; R= accepts only these.
_APACHE_CODES = frozenset(
    [100, 101, 102, 103, *range(200, 209), 226, *range(300, 309), *range(400, 418), 421, 422,
     423, 424, 425, 426, 428, 429, 431, 451, *range(500, 509), 510, 511]
)  # fmt: skip

MAX_ROUNDS = 10000  # mod_rewrite's REWRITE_MAX_ROUNDS for the N flag
INT_MAX = 2**31 - 1  # where C's atoi, which httpd reads numbers with, stops meaning anything
_DIGITS = re.compile(r"[0-9]+")

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


def leading_number(text: str) -> int:
    """The number ``text``'s leading ASCII digits write (0 for none), at most ``INT_MAX``:
    ``int`` reads other digits ('٣', '３') and refuses a few thousand of them."""
    m = _DIGITS.match(text)
    digits = m.group(0).lstrip("0") if m else ""
    return INT_MAX if len(digits) > 10 else min(int(digits or "0"), INT_MAX)


def _status_code(val: str, filename: str, line: int) -> int:
    names = {"permanent": 301, "temp": 302, "seeother": 303}
    if val.lower() in names:
        return names[val.lower()]
    if _DIGITS.match(val):
        code = leading_number(val)
        if code < 200 and code in _APACHE_CODES:  # an interim status ends no answer
            raise RulesError(filename, line, f"RewriteRule: flag 'R={val}': no answer ends 1xx")
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
            f["max_rounds"] = leading_number(val)
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
        f["skip"] = leading_number(val)
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
