#!/usr/bin/env python3
"""Start compose.yaml's services from the image, where no Docker daemon runs, as
scripts/buildah-image.sh starts the image: ``buildah run`` (chroot isolation) of
``localhost/snapshotd:check`` (which that script builds), with each service's command and
environment as compose.yaml writes them, then its health check as written, inside it.

    sh scripts/buildah-image.sh && .venv/bin/python scripts/buildah-compose.py

Run as root, with buildah, node and tests/deploy's npm packages (compose.yaml is read by
tests/deploy/validate.js, which also checks it against the Compose Specification's schema).
The ``postgres`` service is this host's PostgreSQL ($SNAPSHOTD_TEST_POSTGRES, default
postgresql://postgres@127.0.0.1:5432/test): a role and a database of the script's own, named
apart from compose's (dropped at the end), stand in for the image's. chroot isolation shares
this host's network, so the service names are 127.0.0.1 and the ports free ones. Then a
bot's request through snapshotd must come back rendered by the Chromium inside the image.
Everything talks to loopback only. Takes a minute; ``make test`` does not run it.
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
import uuid
from contextlib import ExitStack
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

REPO = Path(__file__).resolve().parent.parent
IMAGE = "localhost/snapshotd:check"
BUILDAH = ["buildah", "--storage-driver", "vfs"]
POSTGRES = os.environ.get("SNAPSHOTD_TEST_POSTGRES", "postgresql://postgres@127.0.0.1:5432/test")
BOT = "Mozilla/5.0 (compatible; Googlebot/2.1; +http://www.google.com/bot.html)"
TOKEN = "buildah-compose"


def say(text: str) -> None:
    print(f"buildah-compose: {text}", flush=True)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def interpolate(value: str, env: dict[str, str]) -> str:
    """Compose's ``${NAME}``, ``${NAME:-default}`` and ``${NAME:?error}``."""
    import re

    def one(m: re.Match[str]) -> str:
        name, op, arg = m.group(1), m.group(2), m.group(3)
        if env.get(name):
            return env[name]
        if op == ":-":
            return arg
        raise SystemExit(f"{name} is required: {arg}")

    return re.sub(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?:(:-|:\?)([^}]*))?\}", one, value)


def stop(proc: subprocess.Popen) -> None:
    """Stop what ``buildah run`` started, by the ids of its processes (scripts/stop-tree.py)."""
    subprocess.run([sys.executable, str(REPO / "scripts" / "stop-tree.py"), str(proc.pid)],
                   check=False)
    proc.wait(timeout=10)


async def sql(*statements: str) -> None:
    import asyncpg

    conn = await asyncpg.connect(POSTGRES, timeout=5)
    try:
        for statement in statements:
            await conn.execute(statement)
    finally:
        await conn.close()


def main() -> int:
    done = subprocess.run(["node", str(REPO / "tests" / "deploy" / "validate.js"),
                           str(REPO / "compose.yaml")], capture_output=True, text=True, check=True)
    checked = json.loads(done.stdout)
    if not checked["valid"]:
        say(f"FAILED: compose.yaml is not valid: {checked['errors']}")
        return 1
    services = checked["document"]["services"]
    outer = {"SNAPSHOTD_API_TOKEN": TOKEN}
    pg = {k: interpolate(v, outer) for k, v in services["postgres"]["environment"].items()}
    name = f"snapshotd_compose_{uuid.uuid4().hex[:8]}"
    asyncio.run(sql(f"CREATE ROLE {name} LOGIN PASSWORD '{pg['POSTGRES_PASSWORD']}'",
                    f"CREATE DATABASE {name} OWNER {name}"))
    app_port, port = free_port(), free_port()
    with ExitStack() as stack:
        stack.callback(lambda: asyncio.run(sql(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)",
                                               f"DROP ROLE {name}")))

        def container() -> str:
            ctr = subprocess.run([*BUILDAH, "from", IMAGE], capture_output=True, text=True,
                                 check=True).stdout.strip()
            stack.callback(lambda: subprocess.run([*BUILDAH, "rm", ctr], capture_output=True))
            return ctr

        def run(ctr: str, env: dict[str, str], argv: list[str], volumes: list[str] = (),
                **kw) -> list[str]:
            cmd = [*BUILDAH, "run", "--isolation", "chroot", "--user", "snapshotd"]
            for key, value in env.items():
                cmd += ["--env", f"{key}={value}"]
            for volume in volumes:
                host, _, rest = volume.partition(":")
                cmd += ["--volume", f"{(REPO / host).resolve()}:{rest}"]
            return [*cmd, ctr, "--", *argv]

        # app: its entrypoint, its volume, on a free loopback port.
        app = services["app"]
        app_ctr = container()
        argv = [a.replace("0.0.0.0", "127.0.0.1").replace("3000", str(app_port))
                for a in app["entrypoint"]]
        volumes = app.get("volumes", [])
        proc = subprocess.Popen(run(app_ctr, {}, argv, volumes), stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL)
        stack.callback(stop, proc)
        check = [a.replace("3000", str(app_port)) for a in app["healthcheck"]["test"][1:]]
        wait_healthy("app", lambda: subprocess.run(run(app_ctr, {}, check, volumes),
                                                   capture_output=True).returncode == 0)

        # snapshotd: compose's environment, the database and the app on this host.
        env = {k: interpolate(v, outer) for k, v in services["snapshotd"]["environment"].items()}
        db = urlsplit(env["SNAPSHOTD_DB"])
        env["SNAPSHOTD_DB"] = urlunsplit(db._replace(
            netloc=f"{name}:{db.password}@127.0.0.1:5432", path=f"/{name}"))
        env["SNAPSHOTD_ORIGIN"] = env["SNAPSHOTD_ORIGIN"].replace(
            "app:3000", f"127.0.0.1:{app_port}")
        env.update(SNAPSHOTD_HOST="127.0.0.1", SNAPSHOTD_PORT=str(port))
        ctr = container()
        log = open("/var/tmp/buildah-compose-serve.log", "w")  # noqa: SIM115
        stack.callback(log.close)
        proc = subprocess.Popen(run(ctr, env, ["/usr/bin/tini", "-s", "--", "snapshotd",
                                               "serve"]), stdout=log, stderr=log)
        stack.callback(stop, proc)
        check = services["snapshotd"]["healthcheck"]["test"][1:]
        wait_healthy("snapshotd", lambda: subprocess.run(
            run(ctr, env, check), capture_output=True).returncode == 0)
        request = urllib.request.Request(f"http://127.0.0.1:{port}/items/3", headers={
            "User-Agent": BOT, "Host": env["SNAPSHOTD_HOSTS"]})
        with urllib.request.urlopen(request, timeout=90) as r:
            body = r.read().decode()
            cache = r.headers.get("X-Snapshotd-Cache")
        rendered = "Item 3 is a sturdy thing" in body and "<script" not in body.lower()
        say(f"bot request through snapshotd: X-Snapshotd-Cache {cache}, rendered {rendered}")
        if cache not in ("MISS", "HIT") or not rendered:
            say("FAILED: the bot did not get the rendered page")
            return 1
    say("compose.yaml's services started from the image, healthy, and answering")
    return 0


def wait_healthy(service: str, healthy, seconds: float = 120) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + seconds
    while not healthy():
        if time.monotonic() > deadline:
            raise SystemExit(f"buildah-compose: FAILED: {service} never healthy")
        time.sleep(1)
    say(f"{service}: its compose health check passes")


if __name__ == "__main__":
    sys.exit(main())
