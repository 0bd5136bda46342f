"""Patterns from rules files: JavaScript/PCRE syntax translated, checked and compiled.

Invariants:
- a pattern is translated to Python `re` syntax, parsed by `re`'s own parser (so errors read
  as Python's), checked for nested quantifiers that backtrack exponentially, then compiled
  with the `regex` module, whose matching takes a timeout;
- `\\d`, `\\w`, `\\s` and case folding are ASCII-only, as in PCRE and JavaScript without `u`.
"""

from __future__ import annotations

import re
import warnings
from re import _constants as C  # type: ignore[attr-defined]
from re import _parser as P  # type: ignore[attr-defined]

import regex


class PatternError(ValueError):
    """A pattern that cannot be used; the message is meant for the user."""


_POSIX = {
    "alpha": "a-zA-Z",
    "digit": "0-9",
    "alnum": "a-zA-Z0-9",
    "upper": "A-Z",
    "lower": "a-z",
    "space": r" \t\n\r\f\v",
    "blank": r" \t",
    "punct": r"!-/:-@\[-`{-~",
    "xdigit": "0-9A-Fa-f",
    "word": r"\w",
    "cntrl": r"\x00-\x1f\x7f",
    "print": r" -~",
    "graph": r"!-~",
}

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def translate(pattern: str) -> str:
    """Rewrite the JavaScript/PCRE constructs users write into Python `re` syntax."""
    out: list[str] = []
    i, n = 0, len(pattern)
    while i < n:
        c = pattern[i]
        if c == "\\":
            nxt = pattern[i + 1 : i + 2]
            if nxt == "k" and pattern[i + 2 : i + 3] == "<":
                end = pattern.find(">", i + 3)
                name = pattern[i + 3 : end] if end > 0 else ""
                if not _NAME.fullmatch(name):
                    raise PatternError(f"bad named back-reference at position {i}")
                out.append(f"(?P={name})")
                i = end + 1
                continue
            if nxt == "z":
                out.append(r"\Z")
                i += 2
                continue
            if nxt in ("c", "Q", "E", "R", "h", "K"):
                raise PatternError(f"\\{nxt} at position {i} is not supported")
            out.append(pattern[i : i + 2])
            i += 2
            continue
        if c == "[":
            i = _translate_class(pattern, i, out)
            continue
        if pattern.startswith("(?<", i) and pattern[i + 3 : i + 4] not in ("=", "!"):
            end = pattern.find(">", i + 3)
            name = pattern[i + 3 : end] if end > 0 else ""
            if not _NAME.fullmatch(name):
                raise PatternError(f"bad group name at position {i}")
            out.append(f"(?P<{name}>")
            i = end + 1
            continue
        out.append(c)
        i += 1
    return "".join(out)


def _translate_class(pattern: str, start: int, out: list[str]) -> int:
    """Copy one bracket expression starting at `start`; return the index after it."""
    i = start + 1
    n = len(pattern)
    parts = ["["]
    if pattern[i : i + 1] == "^":
        parts.append("^")
        i += 1
    if pattern[i : i + 1] == "]":
        if parts[-1] == "^":
            raise PatternError(f"[^] at position {start} is not supported; write [\\s\\S]")
        raise PatternError(f"empty character class [] at position {start}")
    while i < n:
        c = pattern[i]
        if c == "\\":
            parts.append(pattern[i : i + 2])
            i += 2
            continue
        if c == "]":
            parts.append("]")
            out.append("".join(parts))
            return i + 1
        if c == "[" and pattern[i + 1 : i + 2] == ":":
            end = pattern.find(":]", i + 2)
            name = pattern[i + 2 : end] if end > 0 else ""
            if name in _POSIX:
                parts.append(_POSIX[name])
                i = end + 2
                continue
            raise PatternError(f"unknown POSIX class at position {i}")
        if c == "[":
            parts.append("\\[")
            i += 1
            continue
        parts.append(c)
        i += 1
    raise PatternError(f"unterminated character set at position {start}")


# Character sets as bitmasks over bytes 0..255; bit 256 stands for any non-ASCII character.
_ALL = (1 << 257) - 1
_NONASCII = 1 << 256


def _bits(chars: str) -> int:
    m = 0
    for ch in chars:
        m |= 1 << ord(ch)
    return m


_CATEGORIES = {
    C.CATEGORY_DIGIT: _bits("0123456789"),
    C.CATEGORY_SPACE: _bits(" \t\n\r\f\v"),
    C.CATEGORY_WORD: _bits("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_"),
}
_CATEGORIES[C.CATEGORY_NOT_DIGIT] = _ALL & ~_CATEGORIES[C.CATEGORY_DIGIT]
_CATEGORIES[C.CATEGORY_NOT_SPACE] = _ALL & ~_CATEGORIES[C.CATEGORY_SPACE]
_CATEGORIES[C.CATEGORY_NOT_WORD] = _ALL & ~_CATEGORIES[C.CATEGORY_WORD]

_REPEATS = (C.MAX_REPEAT, C.MIN_REPEAT)


def _char(c: int, icase: bool) -> int:
    if c > 255:
        return _NONASCII
    m = 1 << c
    if icase and chr(c).isascii() and chr(c).isalpha():
        m |= 1 << ord(chr(c).swapcase())
    return m


def _chars(items: list, icase: bool, first: bool = False) -> int:
    """Characters a sequence can consume (only its first character when `first`)."""
    m = 0
    for op, av in items:
        if op is C.LITERAL:
            m |= _char(av, icase)
        elif op is C.NOT_LITERAL:
            m |= _ALL & ~_char(av, icase)
        elif op is C.ANY:
            m |= _ALL
        elif op is C.IN:
            m |= _set_chars(av, icase)
        elif op is C.SUBPATTERN:
            m |= _chars(av[3], icase, first)
        elif op is C.ATOMIC_GROUP:
            m |= _chars(av, icase, first)
        elif op is C.BRANCH:
            for alt in av[1]:
                m |= _chars(alt, icase, first)
        elif op in _REPEATS or op is C.POSSESSIVE_REPEAT:
            m |= _chars(av[2], icase, first)
            if first and av[0] > 0:
                return m
            continue
        elif op is C.GROUPREF_EXISTS:
            m |= _chars(av[1], icase, first) | _chars(av[2] or [], icase, first)
        elif op is C.GROUPREF:
            m |= _ALL
        else:  # zero-width: anchors and look-arounds
            continue
        if first:
            return m
    return m


def _set_chars(items: list, icase: bool) -> int:
    m = 0
    negate = False
    for op, av in items:
        if op is C.NEGATE:
            negate = True
        elif op is C.LITERAL:
            m |= _char(av, icase)
        elif op is C.RANGE:
            lo, hi = av
            for c in range(lo, min(hi, 255) + 1):
                m |= _char(c, icase)
            if hi > 255:
                m |= _NONASCII
        elif op is C.CATEGORY:
            m |= _CATEGORIES.get(av, _ALL)
        else:
            m |= _ALL
    return (_ALL & ~m) | _NONASCII if negate else m


def _single_char(op: object, av: object) -> bool:
    return op in (C.LITERAL, C.NOT_LITERAL, C.ANY, C.IN)


def _inner_variable(items: list, icase: bool) -> int:
    """Characters of the backtracking (variable-length) repeats inside a sequence."""
    m = 0
    for op, av in items:
        if op in _REPEATS:
            lo, hi, sub = av
            if lo != hi:
                m |= _chars(sub, icase)
            m |= _inner_variable(sub, icase)
        elif op is C.SUBPATTERN:
            m |= _inner_variable(av[3], icase)
        elif op is C.BRANCH:
            widths = {_width(alt) for alt in av[1]}
            for alt in av[1]:
                if len(widths) > 1:
                    m |= _chars(alt, icase)
                m |= _inner_variable(alt, icase)
        elif op is C.GROUPREF_EXISTS:
            m |= _inner_variable(av[1], icase) | _inner_variable(av[2] or [], icase)
    return m


def _width(items: list) -> tuple[int, int]:
    return P.SubPattern(P.State(), list(items)).getwidth()


def _separators(items: list, icase: bool) -> list[int]:
    """Character sets of the single characters every match of the sequence must consume."""
    seps = []
    for op, av in items:
        if _single_char(op, av):
            seps.append(_chars([(op, av)], icase))
        elif op in _REPEATS and av[0] >= 1 and len(av[2]) == 1 and _single_char(*av[2][0]):
            seps.append(_chars(av[2], icase))
        elif op is C.SUBPATTERN:
            seps.extend(_separators(av[3], icase))
    return seps


def _ambiguous_branch(items: list, icase: bool) -> bool:
    for op, av in items:
        if op is C.SUBPATTERN and _ambiguous_branch(av[3], icase):
            return True
        if op is C.BRANCH:
            firsts = [_chars(alt, icase, first=True) for alt in av[1]]
            for a in range(len(firsts)):
                for b in range(a + 1, len(firsts)):
                    if firsts[a] & firsts[b]:
                        return True
    return False


def _check(items: list, icase: bool, pattern: str) -> None:
    for op, av in items:
        if op in _REPEATS:
            lo, hi, sub = av
            if hi > 1:
                inner = _inner_variable(sub, icase)
                if inner:
                    # A mandatory character the inner repeats cannot eat splits iterations.
                    safe = any(s and not s & inner for s in _separators(sub, icase))
                else:
                    safe = not _ambiguous_branch(sub, icase)
                if not safe:
                    raise PatternError(
                        "nested quantifier can backtrack catastrophically "
                        f"(like (a+)+) in {pattern!r}; make the inner part unambiguous"
                    )
            _check(sub, icase, pattern)
        elif op is C.POSSESSIVE_REPEAT:
            _check(av[2], icase, pattern)
        elif op is C.SUBPATTERN:
            _check(av[3], icase, pattern)
        elif op is C.ATOMIC_GROUP:
            _check(av, icase, pattern)
        elif op is C.BRANCH:
            for alt in av[1]:
                _check(alt, icase, pattern)
        elif op in (C.ASSERT, C.ASSERT_NOT):
            _check(av[1], icase, pattern)
        elif op is C.GROUPREF_EXISTS:
            _check(av[1], icase, pattern)
            _check(av[2] or [], icase, pattern)


def compile_pattern(pattern: str, *, icase: bool = False) -> regex.Pattern[str]:
    """Translate, check and compile one pattern; raise PatternError with the reason."""
    source = translate(pattern)
    flags = re.ASCII | (re.IGNORECASE if icase else 0)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            parsed = P.parse(source, flags)
    except re.error as e:
        raise PatternError(f"bad regular expression {pattern!r}: {e}") from None
    _check(parsed.data, icase or bool(parsed.state.flags & re.IGNORECASE), pattern)
    try:
        return regex.compile(source, regex.ASCII | regex.V0 | (regex.IGNORECASE if icase else 0))
    except regex.error as e:
        raise PatternError(f"bad regular expression {pattern!r}: {e}") from None
