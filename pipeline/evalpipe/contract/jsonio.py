"""JSON bytes, written one way everywhere: orjson, with the standard library for what it refuses.

orjson is fast but refuses integers beyond 64 bits and strings with lone surrogates, both legal
in a JSON text a caller may send; the standard library writes them. `canonical` is the form
that digests are taken of (state keys, the config fingerprint): object keys sorted, so the
same value always gives the same bytes.
"""

from __future__ import annotations

import json
from typing import Any

import orjson


def dumps(value: Any) -> bytes:
    """Compact JSON bytes of `value` (ASCII escapes where orjson cannot write it)."""
    try:
        return orjson.dumps(value)
    except TypeError:
        return json.dumps(value, separators=(",", ":")).encode()


def canonical(value: Any) -> bytes:
    """JSON bytes with object keys sorted: equal values give equal bytes."""
    try:
        return orjson.dumps(value, option=orjson.OPT_SORT_KEYS)
    except TypeError:
        return json.dumps(value, separators=(",", ":"), sort_keys=True).encode()
