"""The process's log: one line per event, times in ISO 8601 UTC, as text or JSON.

Text lines read ``2024-05-01T10:00:00.123Z INFO snapshotd.capture.service captured site=shop ...``.
JSON lines are objects with ``time``, ``level``, ``logger`` and ``message``, plus the fields
an event carries (``extra=``), e.g. an access line's ``bot``, ``path``, ``result``, ``ms``.

A failure that can repeat many times a second (the store gone away, under every request and
every background loop) is logged through :func:`throttled`: one line per kind per
``THROTTLE_EVERY`` seconds, the next saying how many were left out.
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import sys
import time
from typing import Any, cast

__all__ = [
    "LOG_FORMATS", "THROTTLE_EVERY", "JSONFormatter", "Throttle", "UTCFormatter", "flush", "info",
    "iso_utc", "setup_logging", "throttled",
]

LOG_FORMATS = ("text", "json")

# The attributes every LogRecord has; anything else was given as ``extra``.
_STANDARD = set(vars(logging.makeLogRecord({}))) | {"message", "asctime", "taskName"}


@functools.lru_cache(maxsize=4)
def _iso_second(second: int) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(second))


def iso_utc(created: float) -> str:
    """``2024-05-01T10:00:00.123Z`` for a Unix time."""
    return f"{_iso_second(int(created))}.{int(created % 1 * 1000):03d}Z"


class _LineFormatter(logging.Formatter):
    """A formatter that makes a line from its parts too, without a ``LogRecord``."""

    def line(
        self, created: float, level: str, name: str, message: str, fields: dict[str, Any]
    ) -> str:
        raise NotImplementedError


class UTCFormatter(_LineFormatter):
    """``TIME LEVEL LOGGER MESSAGE``, the time in ISO 8601 UTC to the millisecond."""

    def line(
        self, created: float, level: str, name: str, message: str, fields: dict[str, Any]
    ) -> str:
        return f"{iso_utc(created)} {level} {name} {message}"

    def format(self, record: logging.LogRecord) -> str:
        text = self.line(record.created, record.levelname, record.name, record.getMessage(), {})
        if record.exc_info:
            text += "\n" + self.formatException(record.exc_info)
        if record.stack_info:
            text += "\n" + self.formatStack(record.stack_info)
        return text


class JSONFormatter(_LineFormatter):
    """One JSON object a line."""

    def line(
        self, created: float, level: str, name: str, message: str, fields: dict[str, Any]
    ) -> str:
        out = {"time": iso_utc(created), "level": level, "logger": name, "message": message}
        return json.dumps({**out, **fields}, ensure_ascii=False, default=str)

    def format(self, record: logging.LogRecord) -> str:
        fields = {
            key: value
            for key, value in vars(record).items()
            if key not in _STANDARD and not key.startswith("_")
        }
        if record.exc_info:
            fields["exception"] = self.formatException(record.exc_info)
        return self.line(
            record.created, record.levelname, record.name, record.getMessage(), fields
        )


class _Stderr(logging.StreamHandler):  # type: ignore[type-arg]
    """A handler on the process's stderr as it is when each line is written, so a line
    never goes to a stream that was replaced and closed since.

    Lines logged in one turn of a running event loop (a busy server's access lines) go out
    in one write at the end of that turn; elsewhere each line is written at once."""

    def __init__(self) -> None:
        super().__init__()
        self._lines: list[str] = []
        self._flusher: asyncio.AbstractEventLoop | None = None  # the loop that will flush

    @property  # type: ignore[override]
    def stream(self) -> Any:
        return sys.stderr

    @stream.setter
    def stream(self, value: Any) -> None:
        pass

    def emit(self, record: logging.LogRecord) -> None:
        try:
            line = self.format(record)
        except Exception:
            self.handleError(record)
            return
        self.add(line)

    def add(self, line: str) -> None:
        """Write ``line`` (formatted) as :meth:`emit` writes a record's."""
        self.acquire()
        try:
            self._lines.append(line + "\n")
            if self._flusher is not None and self._flusher.is_running():
                return  # goes out with the lines before it, at the end of the loop's turn
            try:
                self._flusher = asyncio.get_running_loop()
            except RuntimeError:
                self.flush()
                return
            self._flusher.call_soon(self.flush)
        finally:
            self.release()

    def flush(self) -> None:
        self.acquire()
        try:
            lines, self._lines, self._flusher = self._lines, [], None
            if lines:
                self._write("".join(lines))
        finally:
            self.release()

    def _write(self, text: str) -> None:
        try:
            stream = sys.stderr
            stream.write(text)
            stream.flush()
        except Exception:
            pass  # stderr gone: nowhere left to say so


def info(logger: logging.Logger, message: str, fields: dict[str, Any]) -> None:
    """``logger.info(message, extra=fields)``. When the line goes only to the handler of
    :func:`setup_logging` (a filter or another handler anywhere on its way says otherwise), it
    is written by that handler from its parts, without the logging module's record: about
    a third of the cost, on the way of every bot request."""
    handler = _only_handler(logger)
    if handler is not None:
        formatter = cast(_LineFormatter, handler.formatter)
        try:
            line = formatter.line(time.time(), "INFO", logger.name, message, fields)
        except Exception:  # a field it cannot write: logging decides
            pass
        else:
            handler.add(line)
            return
    logger.info("%s", message, extra=fields)


def _only_handler(logger: logging.Logger) -> _Stderr | None:
    """The handler of :func:`setup_logging` when an INFO line of ``logger`` goes to it and
    to no other handler, through no filter; else None."""
    if not logger.isEnabledFor(logging.INFO):
        return None
    found: _Stderr | None = None
    current: logging.Logger | None = logger
    while current is not None:
        if current.filters or current.disabled:
            return None
        for handler in current.handlers:
            if (
                found is not None
                or not isinstance(handler, _Stderr)
                or handler.filters
                or handler.level > logging.INFO
                or not isinstance(handler.formatter, _LineFormatter)
            ):
                return None
            found = handler
        current = current.parent if current.propagate else None
    return found


THROTTLE_EVERY = 10.0  # seconds between two lines of one kind of failure


class Throttle:
    """At most one line of each kind (a logger and a message, before its arguments fill it
    in) per ``every`` seconds; the next one after some were left out says how many."""

    def __init__(self, every: float = THROTTLE_EVERY, clock: Any = time.monotonic) -> None:
        self.every = every
        self.clock = clock
        # kind -> [when its next line may go out, how many were left out since the last]
        self._kinds: dict[tuple[str, str], list[Any]] = {}

    def log(self, logger: logging.Logger, level: int, message: str, *args: Any) -> None:
        now = self.clock()
        kind = self._kinds.setdefault((logger.name, message), [now, 0])
        if now < kind[0]:
            kind[1] += 1
            return
        left_out, kind[0], kind[1] = kind[1], now + self.every, 0
        if left_out:
            message += f" ({left_out} more since the last one)"
        logger.log(level, message, *args)


_throttle = Throttle()


def throttled(logger: logging.Logger, level: int, message: str, *args: Any) -> None:
    """``logger.log(level, message, *args)``, unless a line of the same ``message`` (a
    constant: the kind of failure) went out less than ``THROTTLE_EVERY`` seconds ago."""
    _throttle.log(logger, level, message, *args)


def flush() -> None:
    """Write out the lines the handlers keep (before the process ends without Python's
    exit, by a signal or ``os._exit``)."""
    for handler in logging.getLogger().handlers:
        handler.flush()


def setup_logging(verbose: bool = False, fmt: str = "text") -> None:
    """Log to stderr at INFO (DEBUG when ``verbose``) in ``fmt`` (``text`` or ``json``)."""
    handler = _Stderr()
    handler.setFormatter(JSONFormatter() if fmt == "json" else UTCFormatter())
    handler.set_name("snapshotd")
    root = logging.getLogger()
    for old in list(root.handlers):
        if old.get_name() == "snapshotd":  # set up before, in this process
            root.removeHandler(old)
    root.addHandler(handler)
    # No line says where in the code, in which thread or process it was logged: not looked up
    # (the logging module's documented optimisation; a busy proxy logs every bot request).
    logging._srcfile = None  # type: ignore[attr-defined]
    logging.logThreads = logging.logProcesses = logging.logMultiprocessing = False
    root.setLevel(logging.DEBUG if verbose else logging.INFO)
    # httpx logs every request at INFO: far too much for a proxy's log.
    for name in ("httpx", "httpcore"):
        logging.getLogger(name).setLevel(logging.WARNING)
