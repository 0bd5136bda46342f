"""What a setting's value may be, wherever it comes from (the config file, ``SNAPSHOTD_*``
variables, the API's JSON, Crawlbot's arguments, ``snapshotd site``, the store): its type,
its range, and text that is text.

Invariants:
- a number is finite: NaN and infinities are refused, as is an integer past what a float
  holds; a ranged number is within its range, ends included;
- a string holds no control character and no lone surrogate (which has no UTF-8 form), so
  every setting can be stored, logged and answered as JSON;
- every refusal is a :class:`ConfigError` of one line naming the key, never echoing text
  that was refused for what it holds.
"""

from __future__ import annotations

import ipaddress
import re
import sys
from collections.abc import Iterable
from typing import Any

__all__ = [
    "MAX_RULES_BYTES",
    "ConfigError",
    "check_type",
    "coerce_env",
    "kind_of",
    "parse_bool",
    "parse_duration",
    "parse_header",
    "ranged",
]


# A rules file, or rules given as text, holds at most this many bytes (UTF-8).
MAX_RULES_BYTES = 1024 * 1024


class ConfigError(Exception):
    """A user error in the configuration: one line, naming the file and key."""


_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhd]?)\s*$")
_UNITS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}
# Text no setting may hold: control characters and lone surrogates (not text: no UTF-8);
# text of several lines (kind "lines") may hold tabs and line ends.
_NOT_TEXT = re.compile("[\x00-\x1f\x7f\ud800-\udfff]")
_NOT_LINES = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f\ud800-\udfff]")


def parse_duration(value: Any, *, key: str = "duration", never: bool = False) -> float:
    """``"7d"`` -> seconds. Numbers are seconds; one past what a float holds is infinite
    (for :func:`ranged` to refuse). ``never``: the key also takes ``"never"`` (said in
    the error), which the caller reads itself."""
    spellings = "'30s', '15m', '12h' or '7d'" + (", or 'never'" if never else "")
    if isinstance(value, bool):
        raise ConfigError(f"{key}: expected a duration like {spellings}, got {value!r}")
    if isinstance(value, int | float):
        if value < 0:
            raise ConfigError(f"{key}: must not be negative")
        return float(value) if value <= sys.float_info.max else float("inf")
    if isinstance(value, str):
        m = _DURATION.match(value)
        if m:
            return float(m.group(1)) * _UNITS[m.group(2)]
    raise ConfigError(f"{key}: expected a duration like {spellings}, got {value!r:.60}")


def check_type(key: str, value: Any, kind: str) -> Any:
    """``value`` as a ``kind`` (str, lines, int, float, bool, list of strings) setting;
    floats are finite and not negative."""
    if kind in ("str", "lines"):
        if not isinstance(value, str):
            raise ConfigError(f"{key}: expected a string, got {value!r:.60}")
        if bad := (_NOT_TEXT if kind == "str" else _NOT_LINES).search(value):
            what = "a lone surrogate" if bad.group() >= "\ud800" else "a control character"
            raise ConfigError(f"{key}: holds {what} (character {bad.start() + 1})")
        return value
    if kind == "int":
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"{key}: expected an integer, got {value!r:.60}")
        return value
    if kind == "float":
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ConfigError(f"{key}: expected a number, got {value!r:.60}")
        if not -sys.float_info.max <= value <= sys.float_info.max:
            raise ConfigError(f"{key}: must be a finite number, got {value!r:.40}")
        if value < 0:
            raise ConfigError(f"{key}: must not be negative")
        return float(value)
    if kind == "bool":
        if not isinstance(value, bool):
            raise ConfigError(f"{key}: expected true or false, got {value!r:.60}")
        return value
    if kind == "list":
        if isinstance(value, str):
            value = [v.strip() for v in value.split(",") if v.strip()]
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise ConfigError(f"{key}: expected a list of strings, got {value!r:.60}")
        return tuple(check_type(f"{key}[{i}]", v, "str") for i, v in enumerate(value))
    raise AssertionError(kind)


def ranged(key: str, value: Any, kind: str, low: float, high: float) -> Any:
    """A number checked as its ``kind`` and within ``low`` to ``high``, ends included."""
    if isinstance(value, int | float) and not isinstance(value, bool) and not low <= value <= high:
        raise ConfigError(f"{key}: must be from {low:.15g} to {high:.15g}, got {value!r:.40}")
    return check_type(key, value, kind)


def kind_of(tp: Any) -> str:
    """The kind :func:`check_type` checks for a dataclass field's type."""
    text = str(tp)
    if "tuple" in text:
        return "list"
    return {"str": "str", "int": "int", "float": "float", "bool": "bool"}[text]


def parse_bool(text: str) -> bool:
    """``1``, ``true``, ``yes``, ``on`` or ``0``, ``false``, ``no``, ``off``, in any case and
    with spaces around; ValueError for anything else."""
    low = text.strip().lower()
    if low in ("1", "true", "yes", "on"):
        return True
    if low in ("0", "false", "no", "off"):
        return False
    raise ValueError(text)


def coerce_env(key: str, raw: str, kind: str) -> Any:
    """Environment values are strings; turn them into the key's type."""
    try:
        if kind == "int":
            return int(raw)
        if kind == "float":
            return float(raw)
        if kind == "bool":
            return parse_bool(raw)
    except ValueError:
        raise ConfigError(f"SNAPSHOTD_{key.upper()}: cannot read {raw!r:.60} as {kind}") from None
    return raw


# Headers the browser itself decides, or that would change what a request is.
_OWN_HEADERS = frozenset({
    "host", "content-length", "transfer-encoding", "connection", "keep-alive", "upgrade",
    "te", "trailer", "proxy-authorization", "proxy-connection", "expect", "x-snapshotd",
})


def parse_header(text: str) -> tuple[str, str]:
    """A ``custom_headers`` entry, ``Name: value``, as (name, value); ValueError says why
    it cannot be one."""
    name, colon, value = text.partition(":")
    name, value = name.strip(), value.strip()
    if not colon or not re.fullmatch(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+", name):
        raise ValueError(f"{text!r} is not a header as Name: value")
    if name.lower() in _OWN_HEADERS:
        raise ValueError(f"{name} cannot be set: the browser sends its own")
    if any(c in value for c in "\r\n\0"):
        raise ValueError(f"the value of {name} holds a line break")
    return name, value


def parse_servers(values: Iterable[str]) -> tuple[tuple[str, int], ...]:
    """Name servers written ``address`` or ``address:port`` (port 53 when left out; an IPv6
    address with a port in brackets, ``[::1]:5353``) as (address, port) pairs; ValueError
    names the first that is none."""
    out = []
    for value in values:
        text, port = value.strip(), "53"
        if text.startswith("["):
            text, bracket, rest = text[1:].partition("]")
            if not bracket or (rest and not rest.startswith(":")):
                text = ""
            port = rest[1:] if rest else port
        elif text.count(":") == 1:
            text, port = text.split(":")
        try:
            address = ipaddress.ip_address(text)
        except ValueError:
            address = None
        if address is None or not (port.isascii() and port.isdigit() and 0 < int(port) < 65536):
            raise ValueError(
                f"{value!r:.60} is not address or address:port (like 127.0.0.1:53 or [::1]:5353)"
            )
        out.append((str(address), int(port)))
    return tuple(out)
