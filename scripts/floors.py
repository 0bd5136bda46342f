"""The application's dependencies at their floors: each ``name>=X`` of pyproject.toml's
``[project] dependencies`` as ``name==X`` (its environment marker kept), one a line, for
``pip install -r``. `make test-floors` installs these over the test lock and runs the tests
of the dependencies' surface, so that a floor is a version the suite passes on.

A dependency without a ``>=`` floor is an error: every one must say the oldest version it
works with."""

from __future__ import annotations

import sys
import tomllib
from pathlib import Path

from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parent.parent


def floors(pyproject: Path = ROOT / "pyproject.toml") -> list[str]:
    out = []
    for line in tomllib.loads(pyproject.read_text())["project"]["dependencies"]:
        req = Requirement(line)
        lowest = [s.version for s in req.specifier if s.operator == ">="]
        if len(lowest) != 1:
            raise SystemExit(f"pyproject.toml: {req.name} has no single >= floor: {line!r}")
        marker = f" ; {req.marker}" if req.marker else ""
        out.append(f"{req.name}=={lowest[0]}{marker}")
    return out


if __name__ == "__main__":
    sys.stdout.write("".join(f"{line}\n" for line in floors()))
