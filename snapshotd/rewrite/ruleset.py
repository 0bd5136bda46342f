"""Rule sets: reading a rules file, telling its dialect, evaluating URLs."""

from __future__ import annotations

import re
from collections.abc import Callable, Generator, Mapping
from typing import TYPE_CHECKING

from . import apache, seo4ajax
from .common import MAX_URL_LENGTH
from .decision import Decision
from .errors import RulesError

if TYPE_CHECKING:
    from snapshotd.config import Settings

_APACHE_LINE = re.compile(r"rewrite[a-z]*(\s|$)", re.IGNORECASE)


class RuleSet:
    """The parsed rules of one site; `evaluate` decides what happens to a site path."""

    __slots__ = ("dialect", "filename", "_apache", "_seo4ajax")

    def __init__(
        self,
        dialect: str,
        filename: str = "<rules>",
        *,
        apache_program: apache.Program | None = None,
        seo4ajax_rules: tuple[seo4ajax.Rule, ...] = (),
    ) -> None:
        self.dialect = dialect
        self.filename = filename
        self._apache = apache_program
        self._seo4ajax = seo4ajax_rules

    @classmethod
    def empty(cls) -> RuleSet:
        """A rule set that leaves every path alone."""
        return cls("empty")

    def __len__(self) -> int:
        if self._apache is not None:
            return len(self._apache.rules)
        return len(self._seo4ajax)

    def __repr__(self) -> str:
        return f"RuleSet({self.dialect!r}, {self.filename!r}, {len(self)} rules)"

    def ruling(
        self, url: str, *, host: str = "", headers: Mapping[str, str] | None = None
    ) -> Generator[str, bool, Decision]:
        """Decide for one site path, asking the caller by ``yield`` whether a path has been
        captured (``NF``) and receiving the answer; returns the decision."""
        if len(url) > MAX_URL_LENGTH:
            return Decision("status", url, 414)
        if self._apache is not None:
            return apache.run(self._apache, url, host, headers)
        if not self._seo4ajax:
            return Decision("none", url)
        return (yield from seo4ajax.run(self._seo4ajax, url))

    def evaluate(
        self,
        url: str,
        *,
        host: str = "",
        headers: Mapping[str, str] | None = None,
        is_captured: Callable[[str], bool] | None = None,
    ) -> Decision:
        """Decide for one site path (path, optional ?query, optional #! fragment)."""
        ruling = self.ruling(url, host=host, headers=headers)
        try:
            path = next(ruling)
            while True:
                path = ruling.send(bool(is_captured and is_captured(path)))
        except StopIteration as done:
            return done.value  # type: ignore[no-any-return]


def _logical_lines(text: str) -> list[tuple[int, str]]:
    """Non-blank, non-comment lines with their numbers; a trailing backslash continues."""
    out: list[tuple[int, str]] = []
    pending: tuple[int, str] | None = None
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if pending is not None:
            start, acc = pending
            line = acc + line
            number = start
            pending = None
        if line.endswith("\\") and not line.endswith("\\\\"):
            pending = (number, line[:-1])
            continue
        if not line or line.startswith("#"):
            continue
        out.append((number, line))
    if pending is not None and pending[1].strip():
        out.append(pending)
    return out


def parse_rules(text: str, *, filename: str = "<rules>") -> RuleSet:
    """Parse a rules file's text; raise RulesError naming the line of the first problem."""
    if text.startswith("\ufeff"):
        text = text[1:]
    lines = _logical_lines(text)
    if not lines:
        return RuleSet("empty", filename)
    is_apache = bool(_APACHE_LINE.match(lines[0][1]))
    for number, line in lines[1:]:
        if bool(_APACHE_LINE.match(line)) != is_apache:
            other = "SEO4Ajax" if is_apache else "Apache"
            raise RulesError(
                filename,
                number,
                f"{other}-style line in a file whose first rule is "
                f"{'Apache' if is_apache else 'SEO4Ajax'}-style; dialects cannot be mixed",
            )
    if is_apache:
        return RuleSet("apache", filename, apache_program=apache.parse(lines, filename))
    rules = tuple(seo4ajax.parse_line(line, number, filename) for number, line in lines)
    return RuleSet("seo4ajax", filename, seo4ajax_rules=rules)


def load_rules(path: str) -> RuleSet:
    """Read and parse a rules file; raise RulesError (line 0 when it cannot be read)."""
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except OSError as e:
        raise RulesError(path, 0, f"cannot read rules file: {e.strerror or e}") from None
    except UnicodeDecodeError:
        raise RulesError(path, 0, "rules file is not UTF-8 text") from None
    return parse_rules(text, filename=path)


def load_site_rules(settings: Settings) -> dict[str, RuleSet]:
    """Every site's rules, parsed now so a broken file stops start-up (raises RulesError)."""
    return {s.name: load_rules(s.rules) if s.rules else RuleSet.empty() for s in settings.sites}
