"""The SimHash of a text (snapshotd.pages.fingerprints) stays the one stored snapshots were
given: Charikar's, bit by bit, over BLAKE2b's 64-bit hashes of the word shingles."""

from __future__ import annotations

import hashlib
import random

import pytest

from snapshotd.pages import fingerprints
from snapshotd.pages.fingerprints import fingerprint


def reference(words: list[str]) -> int:
    """The definition, a bit at a time: +1 for a shingle whose hash has the bit, -1 else."""
    weights = [0] * 64
    count = min(max(len(words) - 2, 1), 10_000)
    for i in range(count):
        shingle = " ".join(words[i : i + 3]).encode()
        h = int.from_bytes(hashlib.blake2b(shingle, digest_size=8).digest(), "big")
        for bit in range(64):
            weights[bit] += 1 if h >> bit & 1 else -1
    value = sum(1 << bit for bit in range(64) if weights[bit] > 0)
    return value - (1 << 64) if value >= 1 << 63 else value


@pytest.mark.parametrize("length", [1, 2, 3, 4, 7, 64, 501, 10_002, 12_345])
def test_simhash_is_the_definition(length: int) -> None:
    draw = random.Random(length)
    vocabulary = [f"word{i}" for i in range(max(2, length // 3))]
    for _ in range(5):
        words = [draw.choice(vocabulary) for _ in range(length)]
        assert fingerprints._simhash(words) == reference(words)


def test_a_stored_fingerprint_is_still_the_same() -> None:
    """The fingerprint a page of this text was stored with before the SimHash was counted a
    column of bytes at a time."""
    html = "<main><p>" + " ".join(f"alpha beta gamma {n}" for n in range(40)) + "</p></main>"
    print_ = fingerprint(html)
    assert print_.words == 160
    assert print_.simhash == 4691564910396780942
