"""Run a real Apache httpd on loopback and ask it what mod_rewrite does with a URL.

Each rules text gets its own port and `<VirtualHost>` (server context, `RewriteEngine On`).
An internal rewrite is revealed by mod_rewrite's own trace log ("local path result: ...",
tagged with the request's X-Row header) plus the final query string, which mod_headers echoes
back as X-Args. Traffic goes to 127.0.0.1 only.
"""

from __future__ import annotations

import http.client
import os
import re
import shutil
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

APACHE = "/usr/sbin/apache2"
MODULES = "/usr/lib/apache2/modules"
HOST = "www.example.com"


def apache_available() -> bool:
    return os.path.exists(APACHE) and os.path.exists(f"{MODULES}/mod_rewrite.so")


@dataclass(frozen=True)
class Outcome:
    """What Apache did: kind is "local" (path and query), "redirect" or "status"."""

    kind: str
    status: int
    path: str = ""
    query: str = ""
    location: str = ""


def _free_ports(n: int) -> list[int]:
    """``n`` distinct free loopback ports (all held open together, so none repeats)."""
    sockets = [socket.socket(socket.AF_INET, socket.SOCK_STREAM) for _ in range(n)]
    try:
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


def _unescape_log(text: str) -> str:
    """Undo the escaping Apache applies to error-log messages (\\xHH, \\\\, \\")."""
    raw = bytearray()
    i = 0
    data = text.encode("latin-1", "surrogateescape")
    while i < len(data):
        c = data[i]
        if c == 0x5C and data[i + 1 : i + 2] == b"x" and i + 3 < len(data) + 1:
            try:
                raw.append(int(data[i + 2 : i + 4], 16))
                i += 4
                continue
            except ValueError:
                pass
        if c == 0x5C and data[i + 1 : i + 2] in (b"\\", b'"'):
            raw += data[i + 1 : i + 2]
            i += 2
            continue
        raw.append(c)
        i += 1
    return raw.decode("utf-8", "surrogateescape")


class ApacheServer:
    """One apache2 process serving one port per rules text."""

    def __init__(self, rule_texts: list[str]) -> None:
        self.rule_texts = rule_texts
        self.ports: list[int] = []
        self.dir = Path(tempfile.mkdtemp(prefix="snapshotd-apache-"))
        self.proc: subprocess.Popen[bytes] | None = None
        self._row = 0
        self._log_offset = 0

    def _config(self) -> str:
        d = self.dir
        lines = [
            f"ServerRoot {d}",
            f"LoadModule mpm_event_module {MODULES}/mod_mpm_event.so",
            f"LoadModule authz_core_module {MODULES}/mod_authz_core.so",
            f"LoadModule rewrite_module {MODULES}/mod_rewrite.so",
            f"LoadModule headers_module {MODULES}/mod_headers.so",
            f"PidFile {d}/httpd.pid",
            f"DefaultRuntimeDir {d}",
            f"ErrorLog {d}/error.log",
            'ErrorLogFormat "%{X-Row}i\t%M"',
            "LogLevel warn rewrite:trace3",
            "ServerName localhost",
            "StartServers 1",
            f"DocumentRoot {d}/docroot",
            "<Directory />",
            "  Require all granted",
            "</Directory>",
            'Header always set X-Args "expr=%{QUERY_STRING}"',
        ]
        if os.geteuid() == 0:
            lines[5:5] = ["User nobody", "Group nogroup"]
        for port, text in zip(self.ports, self.rule_texts, strict=True):
            lines += [
                f"Listen 127.0.0.1:{port}",
                f"<VirtualHost 127.0.0.1:{port}>",
                # The rows' Host; with its port, substitutions naming it reduce to a path.
                f"ServerName {HOST}:80",
                "RewriteEngine On",
                text,
                "</VirtualHost>",
            ]
        return "\n".join(lines) + "\n"

    def start(self) -> None:
        try:
            self._start()
        except BaseException:
            self.stop()
            raise

    def _start(self) -> None:
        (self.dir / "docroot").mkdir()
        os.chmod(self.dir, 0o755)
        os.chmod(self.dir / "docroot", 0o755)
        self.ports = _free_ports(len(self.rule_texts))
        conf = self.dir / "httpd.conf"
        conf.write_text(self._config())
        self.proc = subprocess.Popen(
            [APACHE, "-f", str(conf), "-d", str(self.dir), "-DFOREGROUND"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                err = self.proc.stderr.read().decode() if self.proc.stderr else ""
                raise RuntimeError(f"apache2 did not start: {err}")
            try:
                with socket.create_connection(("127.0.0.1", self.ports[-1]), timeout=0.2):
                    return
            except OSError:
                time.sleep(0.05)
        raise RuntimeError("apache2 did not start listening")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self.proc is not None and self.proc.stderr:
            self.proc.stderr.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self) -> ApacheServer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _log_lines(self, row: str) -> list[str]:
        # Errors are logged before the response is sent, so they are on disk by now.
        with open(self.dir / "error.log", "rb") as f:
            f.seek(self._log_offset)
            data = f.read()
        self._log_offset += len(data)
        out = []
        for line in data.decode("latin-1").splitlines():
            tag, _, msg = line.partition("\t")
            if tag == row:
                out.append(_unescape_log(msg))
        return out

    def ask(self, index: int, url: str, headers: dict[str, str] | None = None) -> Outcome:
        """Send GET url to the rules text number index and say what Apache did."""
        self._row += 1
        row = f"row{self._row}"
        headers = dict(headers or {})
        conn = http.client.HTTPConnection("127.0.0.1", self.ports[index], timeout=10)
        try:
            conn.putrequest("GET", url, skip_host=True, skip_accept_encoding=True)
            conn.putheader("Host", headers.pop("Host", HOST))
            conn.putheader("X-Row", row)
            for name, value in headers.items():
                conn.putheader(name, value)
            conn.endheaders()
            resp = conn.getresponse()
            resp.read()
            status = resp.status
            location = resp.getheader("Location") or ""
            args = resp.getheader("X-Args") or ""
        finally:
            conn.close()
        lines = self._log_lines(row)
        if 300 <= status < 400 and location:
            return Outcome("redirect", status, location=location)
        for line in reversed(lines):
            m = re.search(r"\] local path result: (.*)$", line)
            if m:
                path = m.group(1)
                if not path.startswith("/"):
                    return Outcome("status", status)
                return Outcome("local", status, path=path, query=args)
        for line in lines:
            m = re.search(r"\] pass through (.*)$", line)
            if m:
                return Outcome("local", status, path=m.group(1), query=args)
        return Outcome("status", status)
