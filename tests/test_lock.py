"""The locks `make test`, `make run` and the Dockerfile install from agree with pyproject.toml:
every dependency it declares is pinned in them, at a version its range admits."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parent.parent
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
_PIN = re.compile(r"^([A-Za-z0-9._-]+)==([^\s;\\]+)", re.M)


def pins(lock: str) -> dict[str, str]:
    text = (ROOT / lock).read_text()
    return {canonicalize_name(name): version for name, version in _PIN.findall(text)}


@pytest.mark.parametrize(
    ("lock", "groups"),
    [("requirements.lock", ["dependencies"]), ("requirements-dev.lock", ["dependencies", "dev"])],
)
def test_every_declared_dependency_is_pinned_in_the_lock_within_its_range(lock, groups):
    pinned = pins(lock)
    declared = [*PROJECT["dependencies"]]
    if "dev" in groups:
        declared += PROJECT["optional-dependencies"]["dev"]
    for line in declared:
        req = Requirement(line)
        name = canonicalize_name(req.name)
        assert name in pinned, f"{req.name} is declared in pyproject.toml but not in {lock}"
        assert req.specifier.contains(pinned[name], prereleases=True), (
            f"{lock} pins {req.name}=={pinned[name]}, outside pyproject.toml's {req.specifier}"
        )


def test_the_application_lock_holds_no_test_tool():
    pinned = pins("requirements.lock")
    for line in PROJECT["optional-dependencies"]["dev"]:
        assert canonicalize_name(Requirement(line).name) not in pinned, line


def test_every_pin_carries_its_files_hashes():
    for lock in ("requirements.lock", "requirements-dev.lock"):
        entries = re.split(r"\n(?=[A-Za-z0-9])", (ROOT / lock).read_text())
        for entry in entries:
            if _PIN.match(entry):
                assert "--hash=sha256:" in entry, f"{lock}: {entry.splitlines()[0]}"
