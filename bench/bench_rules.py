"""Rules files: the time one evaluation of a request path takes, beside a plain regex search.

    python bench/bench_rules.py [--evaluations 2000] [--runs 5]

The shipped ``rules/apache.rules`` evaluated on a typical shop path, and, as the baseline
in the same run on the same machine, one search of the same path by a compiled regex of the
same library. Figures are microseconds per evaluation (best of ``--runs``), their ratio to
the baseline, and their share of the one millisecond an evaluation is meant to stay under.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import regex

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from snapshotd.rewrite import load_rules  # noqa: E402

PATH = "/catalog/shoes?utm_source=x&page=2"
HOST = "www.example.com"
TARGET_SECONDS = 0.001


def best_per_call(call, evaluations: int, runs: int) -> float:  # type: ignore[no-untyped-def]
    best = float("inf")
    for _ in range(runs):
        started = time.perf_counter()
        for _ in range(evaluations):
            call()
        best = min(best, (time.perf_counter() - started) / evaluations)
    return best


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--evaluations", type=int, default=2000)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    rules = load_rules(str(ROOT / "rules" / "apache.rules"))
    plain = regex.compile(r"^/catalog/([^/?]+)")
    evaluation = best_per_call(lambda: rules.evaluate(PATH, host=HOST), args.evaluations, args.runs)
    baseline = best_per_call(lambda: plain.search(PATH), args.evaluations, args.runs)
    print(f"rules/apache.rules on {PATH}: {evaluation * 1e6:.1f} us an evaluation, "
          f"{evaluation / baseline:.0f} x one regex search ({baseline * 1e6:.2f} us), "
          f"{evaluation / TARGET_SECONDS:.2f} of the 1 ms target")
    return 0


if __name__ == "__main__":
    sys.exit(main())
