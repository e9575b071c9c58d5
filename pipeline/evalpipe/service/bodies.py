"""The embedded service's bodies: reading a request's JSON, and writing error bodies.

The service must read every JSON text a client may send (orjson first, the standard library for
what orjson refuses) and answer 422s with FastAPI's `loc` paths, which index arrays with ints
and objects with keys; error bodies other than 422 are `{"error": {"type", "message"}}`.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Mapping
from typing import Any, NoReturn

import orjson

from evalpipe.contract import dumps


def _refuse_constant(name: str) -> NoReturn:
    raise ValueError(f"{name} is not valid JSON")


def load_json(raw: bytes) -> Any:
    """Parse a request body; ValueError with the parser's message and position if it is not JSON.

    orjson first (fast); the stdlib parser only when orjson refuses valid JSON it cannot hold,
    such as an integer beyond 64 bits.
    """
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        first = exc
    with contextlib.suppress(ValueError, RecursionError):
        return json.loads(raw, parse_constant=_refuse_constant)
    raise ValueError(f"invalid JSON: {first}")


def issue_loc(body: Any, path: str) -> list[str | int]:
    """A contract path (`questions.q.criteria.0`) as a FastAPI `loc`, walking the body so that
    array indices become ints and object keys stay strings (even `"1"`, even with dots)."""
    if path == "body":
        return ["body"]
    parts = path.split(".")
    loc: list[str | int] = ["body"]
    node, i = body, 0
    while i < len(parts):
        if isinstance(node, list) and parts[i].isascii() and parts[i].isdigit():
            index = int(parts[i])
            loc.append(index)
            node, i = (node[index] if index < len(node) else None), i + 1
        elif isinstance(node, dict):
            key, i = _longest_key(node, parts, i)
            loc.append(key)
            node = node.get(key)
        else:
            loc.extend(int(p) if p.isascii() and p.isdigit() else p for p in parts[i:])
            break
    return loc


def _longest_key(node: Mapping[str, Any], parts: list[str], start: int) -> tuple[str, int]:
    # A key may itself hold dots; prefer the longest run of parts that names a key.
    for end in range(len(parts), start, -1):
        key = ".".join(parts[start:end])
        if key in node:
            return key, end
    return parts[start], start + 1


def error_body(kind: str, message: str) -> bytes:
    return dumps({"error": {"type": kind, "message": message}})


def detail_body(issues: list[tuple[list[str | int], str, str]]) -> bytes:
    return dumps({"detail": [{"loc": loc, "msg": msg, "type": kind} for loc, msg, kind in issues]})
