"""Real front servers for tests: Debian's nginx, Apache httpd, Caddy and HAProxy on loopback
ports.

Each runs in the foreground from a throw-away directory holding its configuration, and is
stopped, by its pid, when the test is done. Without the server
installed, a test is skipped on a laptop and fails under ``CI=true``.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.apache.harness import APACHE, MODULES

NGINX = "/usr/sbin/nginx"
CADDY = "/usr/bin/caddy"
HAPROXY = "/usr/sbin/haproxy"
RECIPES = Path(__file__).resolve().parent.parent / "docs" / "integrations"


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def require(path: str, package: str) -> None:
    if not os.path.exists(path):
        missing = f"{path} is missing: apt-get install {package} (make test installs it)"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(missing)
        pytest.skip(missing)


def recipe(name: str, **values: str) -> str:
    """The shipped recipe ``docs/integrations/<name>`` with its ``{{NAME}}`` slots filled."""
    text = (RECIPES / name).read_text()
    for key, value in values.items():
        text = text.replace("{{" + key + "}}", value)
    assert "{{" not in text, f"unfilled slot in {name}"
    return text


@contextmanager
def _running(
    argv: list[str], port: int, workdir: Path, env: dict[str, str] | None = None
) -> Iterator[None]:
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
    try:
        deadline = time.monotonic() + 15
        while True:
            if proc.poll() is not None:
                err = proc.stderr.read().decode() if proc.stderr else ""
                raise RuntimeError(f"{argv[0]} did not start: {err.strip()[-800:]}")
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                    break
            except OSError:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{argv[0]} did not listen on {port}") from None
                time.sleep(0.05)
        yield
    finally:
        stop(proc)
        shutil.rmtree(workdir, ignore_errors=True)


def stop(proc: subprocess.Popen) -> None:
    """Stop a server this test started (by its pid), reading what it printed."""
    proc.terminate()
    try:
        proc.communicate(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()


@contextmanager
def nginx(server_block: str, port: int) -> Iterator[None]:
    """nginx serving ``server_block`` (which listens on 127.0.0.1:``port``)."""
    require(NGINX, "nginx")
    d = Path(tempfile.mkdtemp(prefix="snapshotd-nginx-"))
    os.chmod(d, 0o755)
    user = "user nobody nogroup;\n" if os.geteuid() == 0 else ""
    (d / "nginx.conf").write_text(
        f"{user}daemon off;\nworker_processes 1;\npid {d}/nginx.pid;\n"
        f"error_log {d}/error.log warn;\nevents {{ worker_connections 1024; }}\n"
        f"http {{\n  access_log off;\n  client_body_temp_path {d}/body;\n"
        f"  proxy_temp_path {d}/proxy;\n  fastcgi_temp_path {d}/fcgi;\n"
        f"  uwsgi_temp_path {d}/uwsgi;\n  scgi_temp_path {d}/scgi;\n"
        f"{server_block}\n}}\n"
    )
    with _running([NGINX, "-p", str(d), "-c", str(d / "nginx.conf"), "-e", "stderr"], port, d):
        yield


@contextmanager
def apache(vhost: str, port: int) -> Iterator[None]:
    """Apache httpd serving ``vhost`` (a ``Listen`` plus a ``<VirtualHost>`` on ``port``)."""
    require(APACHE, "apache2")
    d = Path(tempfile.mkdtemp(prefix="snapshotd-httpd-"))
    os.chmod(d, 0o755)
    modules = ("mpm_event", "authz_core", "rewrite", "proxy", "proxy_http", "headers")
    lines = [f"ServerRoot {d}"]
    lines += [f"LoadModule {m}_module {MODULES}/mod_{m}.so" for m in modules]
    if os.geteuid() == 0:
        lines += ["User nobody", "Group nogroup"]
    lines += [
        f"PidFile {d}/httpd.pid",
        f"DefaultRuntimeDir {d}",
        f"ErrorLog {d}/error.log",
        "LogLevel warn",
        "ServerName localhost",
        vhost,
    ]
    (d / "httpd.conf").write_text("\n".join(lines) + "\n")
    argv = [APACHE, "-f", str(d / "httpd.conf"), "-d", str(d), "-DFOREGROUND"]
    with _running(argv, port, d):
        yield


@contextmanager
def caddy(site_block: str, port: int) -> Iterator[None]:
    """Caddy serving ``site_block`` (whose address is ``http://NAME:port``), bound to
    127.0.0.1, with no admin endpoint and its state in a throw-away directory."""
    require(CADDY, "caddy")
    d = Path(tempfile.mkdtemp(prefix="snapshotd-caddy-"))
    options = "{\n\tadmin off\n\tdefault_bind 127.0.0.1\n\tauto_https off\n}\n\n"
    (d / "Caddyfile").write_text(options + site_block)
    env = {"PATH": os.environ.get("PATH", ""), "HOME": str(d), "XDG_DATA_HOME": str(d),
           "XDG_CONFIG_HOME": str(d)}
    argv = [CADDY, "run", "--config", str(d / "Caddyfile"), "--adapter", "caddyfile"]
    with _running(argv, port, d, env):
        yield


@contextmanager
def haproxy(sections: str, port: int) -> Iterator[None]:
    """HAProxy serving ``sections`` (a frontend binding 127.0.0.1:``port`` and its backends)
    in the foreground."""
    require(HAPROXY, "haproxy")
    d = Path(tempfile.mkdtemp(prefix="snapshotd-haproxy-"))
    (d / "haproxy.cfg").write_text(
        f"global\n    pidfile {d}/haproxy.pid\n\ndefaults\n    mode http\n\n{sections}"
    )
    with _running([HAPROXY, "-db", "-f", str(d / "haproxy.cfg")], port, d):
        yield
