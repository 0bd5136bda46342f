"""Rule sets: reading a rules file, telling its dialect, evaluating URLs.

A rules file is read only when it is a regular file of at most ``MAX_RULES_BYTES``: a
device, a pipe or a larger file is refused from what opening it tells, before any of it is
read, and never more than that many bytes are read.
"""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Callable, Generator, Mapping
from typing import TYPE_CHECKING

from snapshotd.config.values import MAX_RULES_BYTES
from snapshotd.rewrite import apache, seo4ajax
from snapshotd.rewrite.decision import RulesOutcome
from snapshotd.rewrite.errors import RulesError
from snapshotd.rewrite.limits import MAX_URL_LENGTH

if TYPE_CHECKING:
    from snapshotd.config.settings import Settings, SiteSettings

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
        seo4ajax_rules: tuple[seo4ajax.Seo4AjaxRule, ...] = (),
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
    ) -> Generator[str, bool, RulesOutcome]:
        """Decide for one site path, asking the caller by ``yield`` whether a path has been
        captured (``NF``) and receiving the answer; returns the decision."""
        if len(url) > MAX_URL_LENGTH:
            return RulesOutcome("status", url, 414)
        if self._apache is not None:
            return apache.run(self._apache, url, host, headers)
        if not self._seo4ajax:
            return RulesOutcome("none", url)
        return (yield from seo4ajax.run(self._seo4ajax, url))

    def evaluate(
        self,
        url: str,
        *,
        host: str = "",
        headers: Mapping[str, str] | None = None,
        is_captured: Callable[[str], bool] | None = None,
    ) -> RulesOutcome:
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
        # Not blocking: opening a pipe with no writer would wait for one.
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as e:
        raise RulesError(path, 0, f"cannot read rules file: {e.strerror or e}") from None
    except ValueError:  # a NUL in the path
        raise RulesError(path, 0, "cannot read rules file: not a file name") from None
    with os.fdopen(fd, "rb") as f:
        info = os.fstat(f.fileno())
        if not stat.S_ISREG(info.st_mode):
            raise RulesError(path, 0, "not a regular file")
        if info.st_size > MAX_RULES_BYTES:
            raise RulesError(path, 0, "larger than 1 MiB")
        try:
            data = f.read(MAX_RULES_BYTES + 1)  # it may have grown since
        except OSError as e:
            raise RulesError(path, 0, f"cannot read rules file: {e.strerror or e}") from None
    if len(data) > MAX_RULES_BYTES:
        raise RulesError(path, 0, "larger than 1 MiB")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise RulesError(path, 0, "rules file is not UTF-8 text") from None
    return parse_rules(text, filename=path)


def site_rules(site: SiteSettings) -> RuleSet:
    """A site's rules: its ``rules_text``, else its ``rules`` file (RulesError when broken)."""
    if site.rules_text:
        return parse_rules(site.rules_text, filename="rules_text")
    return load_rules(site.rules) if site.rules else RuleSet.empty()


def rules_file_in(directory: str, name: str) -> str:
    """The rules file ``name`` names in ``directory`` (a name relative to it, or a path in
    it), links followed; RulesError (line 0) when that is outside the directory."""
    try:
        root = os.path.realpath(directory)
        path = os.path.realpath(os.path.join(root, name))
    except ValueError:  # a NUL in the name
        raise RulesError(name, 0, "not a file name") from None
    if path == root or os.path.commonpath([root, path]) != root:
        raise RulesError(name, 0, "not a file of the rules directory ([server] rules_dir)")
    return path


def load_site_rules(settings: Settings) -> dict[str, RuleSet]:
    """Every site's rules, parsed now so a broken file stops start-up (raises RulesError)."""
    return {s.name: site_rules(s) for s in settings.sites}
