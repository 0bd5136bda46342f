#!/usr/bin/env python3
"""Build the Dockerfile's image contents without Docker, then start them.

Where no Docker daemon runs (and no base image can be pulled), this reproduces the
Dockerfile's steps in a Debian root made with ``debootstrap`` (bookworm, as the base image
is): ``FROM python:3.11-slim-bookworm`` is stood in for by Debian's Python 3.11 made the
``/usr/local`` Python (``python`` and ``pip`` on PATH, as in that image); then every
``RUN``, ``COPY``, ``WORKDIR``, ``ENV`` and ``USER`` line runs as written, in a chroot.
Then, as the image's user with the image's environment, it runs the entrypoint:
``snapshotd --version``, ``snapshotd serve`` in front of an origin on this host's loopback,
the ``HEALTHCHECK`` command, and a bot's request through the proxy, which must come back
rendered by the Chromium inside the root.

Run as root: ``python3 scripts/check-image.py [ROOT [DOCKERFILE]]`` (ROOT defaults to
``/var/tmp/snapshotd-image``; an existing debootstrap root there is reused, and the
Dockerfile's steps run again on a copy of it). It downloads Debian and PyPI packages and
takes minutes, so ``make test`` does not run it. Everything it starts talks to loopback only.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
MIRROR_FILES = ("/etc/apt/sources.list.d/debian.sources", "/etc/apt/sources.list")
DOCKERFILE = REPO / "Dockerfile"  # or the second argument
LOG_IN_ROOT = "/var/log/check-image-build.log"
LOG = ""  # LOG_IN_ROOT seen from outside the root, set in main()
BOT = "Mozilla/5.0 (compatible; Googlebot/2.1; +http://www.google.com/bot.html)"


def say(message: str) -> None:
    print(f"check-image: {message}", flush=True)


def mirror() -> str:
    """The Debian mirror apt is configured with here."""
    for name in MIRROR_FILES:
        try:
            text = Path(name).read_text()
        except OSError:
            continue
        found = re.search(r"(?:URIs:|deb)\s+(https?://\S+/debian)\b", text)
        if found:
            return found.group(1)
    sys.exit("check-image: no Debian mirror in apt's sources")


def instructions(dockerfile: Path) -> list[tuple[str, str]]:
    """(INSTRUCTION, argument) pairs, continuation lines joined."""
    out: list[tuple[str, str]] = []
    current = ""
    for line in dockerfile.read_text().splitlines():
        if not current and (not line.strip() or line.lstrip().startswith("#")):
            continue
        if line.rstrip().endswith("\\"):
            current += line.rstrip()[:-1] + " "
            continue
        current += line
        word, _, rest = current.strip().partition(" ")
        out.append((word.upper(), rest.strip()))
        current = ""
    return out


def env_pairs(argument: str) -> dict[str, str]:
    words = shlex.split(argument)
    if len(words) >= 2 and "=" not in words[0]:
        return {words[0]: " ".join(words[1:])}
    return dict(w.split("=", 1) for w in words)


class Root:
    """A chroot with /proc, /dev and /sys mounted while in use."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.mounts: list[Path] = []

    def __enter__(self) -> Root:
        for src, kind in (("/proc", "proc"), ("/sys", "sysfs"), ("/dev", None), ("/dev/pts", None)):
            target = self.path / src.lstrip("/")
            target.mkdir(parents=True, exist_ok=True)
            if kind:
                subprocess.run(["mount", "-t", kind, kind, str(target)], check=True)
            else:
                subprocess.run(["mount", "--bind", src, str(target)], check=True)
            self.mounts.append(target)
        shm = self.path / "dev/shm"
        shutil.copy2("/etc/resolv.conf", self.path / "etc/resolv.conf")
        return self if shm.exists() else self

    def __exit__(self, *exc: object) -> None:
        for target in reversed(self.mounts):
            subprocess.run(["umount", "-l", str(target)], check=False)

    def run(
        self, command: str, *, env: dict[str, str], cwd: str = "/", user: str | None = None,
        check: bool = True, background: bool = False,
    ) -> subprocess.CompletedProcess[str] | subprocess.Popen[str]:
        argv = ["chroot"]
        if user:
            argv.append(f"--userspec={user}")
        argv += [str(self.path), "/usr/bin/env", "-i", *(f"{k}={v}" for k, v in env.items()),
                 "/bin/sh", "-c", f"cd {shlex.quote(cwd)} && {command}"]
        if background:
            return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                    text=True, start_new_session=True)
        return subprocess.run(argv, check=check, text=True, capture_output=not check)


def build(root: Root) -> tuple[dict[str, str], str, str, list[str], str]:
    """Run the Dockerfile's steps; the image's env, workdir, user, entrypoint+cmd, healthcheck."""
    env = {
        "PATH": "/usr/local/bin:/usr/local/sbin:/usr/sbin:/usr/bin:/sbin:/bin",
        "LANG": "C.UTF-8",
        "HOME": "/root",
        "DEBIAN_FRONTEND": "noninteractive",
    }
    workdir, user, healthcheck = "/", "", ""
    entrypoint: list[str] = []
    cmd: list[str] = []
    import json

    for word, argument in instructions(DOCKERFILE):
        say(f"{word} {argument[:100]}")
        if word == "FROM":
            # python:3.11-slim-bookworm: bookworm with Python 3.11 as /usr/local's python.
            root.run("apt-get update -qq && apt-get install -y -qq --no-install-recommends "
                     "python3 python3-venv ca-certificates >/dev/null", env=env)
            # The build trusts what this host trusts (a proxy's CA for PyPI, say).
            extra = Path("/usr/local/share/ca-certificates")
            if extra.is_dir() and any(extra.iterdir()):
                shutil.copytree(extra, root.path / str(extra).lstrip("/"), dirs_exist_ok=True)
                root.run("update-ca-certificates >/dev/null", env=env)
            env["PIP_CERT"] = "/etc/ssl/certs/ca-certificates.crt"
            root.run("python3 -m venv /usr/local && /usr/local/bin/pip install -q --upgrade pip",
                     env=env)
            has = root.run("ls /usr/lib/x86_64-linux-gnu/libatomic.so.1", env=env, check=False)
            say("the base stand-in " + ("has" if has.returncode == 0 else "lacks")
                + " libatomic.so.1")
        elif word == "RUN":
            with open(LOG, "a") as log:
                log.write(f"\n== RUN {argument}\n")
            done = root.run(f"({argument}) >>{LOG_IN_ROOT} 2>&1", env=env, cwd=workdir,
                            user=user or None, check=False)
            if done.returncode != 0:
                sys.exit(f"check-image: FAILED (exit {done.returncode}); the tail of {LOG}:\n"
                         + "".join(open(LOG).readlines()[-15:]))
        elif word == "WORKDIR":
            workdir = argument
            (root.path / workdir.lstrip("/")).mkdir(parents=True, exist_ok=True)
        elif word == "COPY":
            *sources, dest = shlex.split(argument)
            target = root.path / (dest if dest.startswith("/") else f"{workdir}/{dest}").lstrip("/")
            for source in sources:
                src = REPO / source
                if src.is_dir():
                    shutil.copytree(src, target if not dest.endswith("/") else target / src.name,
                                    dirs_exist_ok=True,
                                    ignore=shutil.ignore_patterns("__pycache__"))
                else:
                    target.mkdir(parents=True, exist_ok=True) if dest.endswith("/") else None
                    shutil.copy2(src, target / src.name if dest.endswith("/") else target)
        elif word == "ENV":
            env.update(env_pairs(argument))
        elif word == "USER":
            user = argument
        elif word == "ENTRYPOINT":
            entrypoint = json.loads(argument)
        elif word == "CMD":
            cmd = json.loads(argument)
        elif word == "HEALTHCHECK":
            healthcheck = argument.split(" CMD ", 1)[1]
        elif word not in ("VOLUME", "EXPOSE", "ARG", "LABEL"):
            sys.exit(f"check-image: instruction {word} is not reproduced here")
    if user and not user.isdigit():
        uid = root.run(f"id -u {user}", env=env, check=False)
        user = f"{user}:{user}" if uid.returncode == 0 else user
    return env, workdir, user, entrypoint + cmd, healthcheck


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main() -> int:
    if os.geteuid() != 0:
        sys.exit("check-image: run as root (debootstrap and chroot)")
    base = Path(sys.argv[1] if len(sys.argv) > 1 else "/var/tmp/snapshotd-image")
    if not (base / "usr/bin/apt-get").exists():
        say(f"debootstrap bookworm into {base} from {mirror()}")
        subprocess.run(["debootstrap", "--variant=minbase", "bookworm", str(base), mirror()],
                       check=True, stdout=subprocess.DEVNULL)
    work = base.with_name(base.name + "-build")
    if work.exists():
        subprocess.run(["rm", "-rf", "--one-file-system", str(work)], check=True)
    subprocess.run(["cp", "-a", str(base), str(work)], check=True)
    global LOG, DOCKERFILE
    if len(sys.argv) > 2:
        DOCKERFILE = Path(sys.argv[2]).resolve()
    LOG = str(work / LOG_IN_ROOT.lstrip("/"))
    say(f"the RUN steps' output goes to {LOG}")
    origin_port, port = free_port(), free_port()
    origin = subprocess.Popen(
        [sys.executable, "-m", "examples.spa", "--port", str(origin_port)], cwd=REPO,
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
    )
    serve = None
    try:
        with Root(work) as root:
            env, workdir, user, argv, healthcheck = build(root)
            env.pop("DEBIAN_FRONTEND", None)
            env["HOME"] = "/home/snapshotd" if user else "/root"
            image_env = {**env, "SNAPSHOTD_HOST": "127.0.0.1", "SNAPSHOTD_PORT": str(port),
                         "SNAPSHOTD_ORIGIN": f"http://127.0.0.1:{origin_port}",
                         "SNAPSHOTD_API_TOKEN": "check-image"}
            version = root.run(shlex.join([*argv[:-1], "--version"]), env=image_env,
                               cwd=workdir, user=user, check=False)
            say(f"entrypoint --version: {version.stdout.strip()} (exit {version.returncode})")
            if version.returncode != 0:
                print(version.stderr)
                return 1
            serve = root.run(shlex.join(argv), env=image_env, cwd=workdir, user=user,
                             background=True)
            assert isinstance(serve, subprocess.Popen)
            deadline = time.monotonic() + 90
            healthy = None
            while time.monotonic() < deadline and serve.poll() is None:
                healthy = root.run(healthcheck, env=image_env, cwd=workdir, user=user,
                                   check=False)
                if healthy.returncode == 0:
                    break
                time.sleep(1)
            if healthy is None or healthy.returncode != 0:
                if serve.poll() is not None:
                    print(serve.stdout.read() if serve.stdout else "")
                say("FAILED: the HEALTHCHECK command never succeeded")
                return 1
            say("HEALTHCHECK command: healthy")
            request = urllib.request.Request(
                f"http://127.0.0.1:{port}/items/3", headers={"User-Agent": BOT}
            )
            with urllib.request.urlopen(request, timeout=90) as answer:
                body = answer.read().decode()
                cache = answer.headers.get("X-Snapshotd-Cache")
            rendered = "Item 3" in body and "<script" not in body.lower()
            say(f"bot request through the proxy: X-Snapshotd-Cache {cache}, "
                f"rendered by Chromium in the root: {rendered}")
            return 0 if cache in ("MISS", "HIT") and rendered else 1
    finally:
        if serve is not None and serve.poll() is None:
            os.killpg(serve.pid, 15)
            try:
                out, _ = serve.communicate(timeout=30)
                say("serve's log:\n" + out)
            except subprocess.TimeoutExpired:
                os.killpg(serve.pid, 9)
        origin.terminate()
        origin.wait(10)


if __name__ == "__main__":
    raise SystemExit(main())
