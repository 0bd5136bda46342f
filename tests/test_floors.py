"""`make test-floors`' list (scripts/floors.py): every dependency the application declares
at exactly its floor, and a dependency without one refused."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
import floors  # noqa: E402


def test_every_declared_dependency_is_installed_at_its_floor() -> None:
    out = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "floors.py")],
        capture_output=True, text=True, check=True,
    ).stdout.splitlines()
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    assert len(out) == len(declared)
    for line, wanted in zip(out, declared, strict=True):
        pinned, declared_req = Requirement(line), Requirement(wanted)
        (spec,) = pinned.specifier
        assert pinned.name == declared_req.name and spec.operator == "=="
        assert declared_req.specifier.contains(spec.version), (line, wanted)
        assert f">={spec.version}" in str(declared_req.specifier), (line, wanted)
        assert pinned.marker == declared_req.marker


def test_a_dependency_without_a_floor_is_refused(tmp_path) -> None:
    pyproject = tmp_path / "pyproject.toml"
    pyproject.write_text('[project]\ndependencies = ["uvicorn>=0.53,<0.55", "httpx"]\n')
    with pytest.raises(SystemExit, match="httpx has no single >= floor"):
        floors.floors(pyproject)
