"""The process's log: one line per event, times in ISO 8601 UTC, as text or JSON.

Text lines read ``2024-05-01T10:00:00.123Z INFO snapshotd.capture captured site=shop ...``.
JSON lines are objects with ``time``, ``level``, ``logger`` and ``message``, plus the fields
an event carries (``extra=``), e.g. an access line's ``bot``, ``path``, ``result``, ``ms``.
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import sys
import time
from typing import Any

__all__ = ["LOG_FORMATS", "JSONFormatter", "UTCFormatter", "iso_utc", "setup_logging"]

LOG_FORMATS = ("text", "json")

# The attributes every LogRecord has; anything else was given as ``extra``.
_STANDARD = set(vars(logging.makeLogRecord({}))) | {"message", "asctime", "taskName"}


@functools.lru_cache(maxsize=4)
def _iso_second(second: int) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(second))


def iso_utc(created: float) -> str:
    """``2024-05-01T10:00:00.123Z`` for a Unix time."""
    return f"{_iso_second(int(created))}.{int(created % 1 * 1000):03d}Z"


class UTCFormatter(logging.Formatter):
    """``TIME LEVEL LOGGER MESSAGE``, the time in ISO 8601 UTC to the millisecond."""

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s %(message)s")

    def formatTime(self, record: logging.LogRecord, datefmt: str | None = None) -> str:  # noqa: N802
        return iso_utc(record.created)


class JSONFormatter(logging.Formatter):
    """One JSON object a line."""

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "time": iso_utc(record.created),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        for key, value in vars(record).items():
            if key not in _STANDARD and not key.startswith("_"):
                out[key] = value
        if record.exc_info:
            out["exception"] = self.formatException(record.exc_info)
        return json.dumps(out, ensure_ascii=False, default=str)


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
            line = self.format(record) + "\n"
        except Exception:
            self.handleError(record)
            return
        self._lines.append(line)
        if self._flusher is not None and self._flusher.is_running():
            return  # goes out with the lines before it, at the end of the loop's turn
        try:
            self._flusher = asyncio.get_running_loop()
        except RuntimeError:
            self.flush()
            return
        self._flusher.call_soon(self.flush)

    def flush(self) -> None:
        self.acquire()
        try:
            lines, self._lines, self._flusher = self._lines, [], None
        finally:
            self.release()
        if lines:
            self._write("".join(lines))

    def _write(self, text: str) -> None:
        try:
            stream = sys.stderr
            stream.write(text)
            stream.flush()
        except Exception:
            pass  # stderr gone: nowhere left to say so


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
