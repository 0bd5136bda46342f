"""What an HTTP header may hold, by name and by value: the checks uvicorn makes of what it
sends, made before anything is sent, so a header that would break the answer is left out
instead (pure)."""

from __future__ import annotations

import re

__all__ = ["BAD_HEADER_NAME", "BAD_HEADER_VALUE"]

BAD_HEADER_NAME = re.compile(b'[\x00-\x1f\x7f()<>@,;:\\[\\]={} \t\\\\"]')
BAD_HEADER_VALUE = re.compile(b"[\x00-\x08\x0a-\x1f\x7f]")
