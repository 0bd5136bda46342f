"""Load from raw sockets: many downloads read slowly, in turn; a process's memory from /proc.

Used by tests and by bench/bench_memory.py; only ever pointed at loopback servers.
"""

from __future__ import annotations

import hashlib
import socket
from pathlib import Path


def memory_kib(pid: int) -> dict[str, int]:
    """VmRSS and VmHWM (peak RSS) of a process, in KiB."""
    out = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            out[key] = int(value.split()[0])
    return out


def slow_downloads(port: int, requests: list[bytes], piece: int = 65536) -> list[tuple[int, bytes]]:
    """Send each request (which must have a ``Content-Length`` answer) on its own connection
    to 127.0.0.1:``port``, then read the answers a piece per connection in turn, as slow
    clients would. Returns (status, SHA-256 of the body) for each."""
    socks = [socket.create_connection(("127.0.0.1", port), timeout=60) for _ in requests]
    try:
        for s, request in zip(socks, requests, strict=True):
            s.sendall(request)
        heads = [b""] * len(socks)
        bodies = [hashlib.sha256() for _ in socks]
        left = [-1] * len(socks)  # body bytes still to read; -1 while the head is
        while any(n != 0 for n in left):
            for i, s in enumerate(socks):
                if left[i] == 0:
                    continue
                chunk = s.recv(piece if left[i] < 0 else min(piece, left[i]))
                if not chunk:
                    raise ConnectionError(f"connection {i} closed early")
                if left[i] < 0:
                    heads[i] += chunk
                    if b"\r\n\r\n" not in heads[i]:
                        continue
                    heads[i], _, chunk = heads[i].partition(b"\r\n\r\n")
                    left[i] = next(
                        int(line.split(b":", 1)[1])
                        for line in heads[i].split(b"\r\n")
                        if line.lower().startswith(b"content-length:")
                    )
                bodies[i].update(chunk)
                left[i] -= len(chunk)
        return [(int(h.split(b" ", 2)[1]), b.digest()) for h, b in zip(heads, bodies, strict=True)]
    finally:
        for s in socks:
            s.close()
