"""A batch of stored answers made into hits: each answer's check, then one parse per batch.

A lookup of 100k states reads 300k stored answers: per-answer Python work is most of a cached
rerun's time. So each answer is only checked here (its CRC-32: a damaged value is a miss), and
a state's checked answers are joined into one JSON object (`"key":answer` members). With the
job's answer types (`evalpipe.output.answer_types`) the batch's objects are parsed by Arrow's
JSON reader into one table, a struct column per question, and each hit's answers are a row of
it (`ArrowAnswers`): the output table takes them column-wise, no dict is ever made of them.
Without them, or when Arrow refuses the batch (an answer of another shape), the objects are
parsed by orjson into dicts, all in one call when it can be; either way a state whose object
does not parse, or holds an answer that is not an object, is a miss.
"""

from __future__ import annotations

import io
import zlib
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

import orjson
import pyarrow as pa
import pyarrow.json as pa_json

from evalpipe.output import ArrowAnswers
from evalpipe.planning import CacheHit

CHECK = 4  # bytes of the CRC-32 stored before each answer
_BLOCK = 1 << 24  # bytes of JSON Arrow parses as one block (a batch's objects: a few MB)


class Asked(NamedTuple):
    """A question of the job, as its stored answers are read: its key, the key as a JSON
    member's name (`"key":`) and the CRC-32 of its digest (where each answer's check starts)."""

    key: str
    member: bytes
    crc: int


class _Found:
    """The checked answers of a batch, by state: JSON members, the questions, the model(s)."""

    def __init__(self) -> None:
        self.index: dict[bytes, int] = {}
        self.members: list[list[bytes]] = []
        self.keys: list[list[str]] = []
        self.models: list[str] = []
        self.answers = 0

    def add(self, state: bytes, asked: Asked, text: bytes, model: str) -> None:
        self.answers += 1
        at = self.index.get(state)
        if at is None:
            self.index[state] = len(self.members)
            self.members.append([asked.member + text])
            self.keys.append([asked.key])
            self.models.append(model)
            return
        self.members[at].append(asked.member + text)
        self.keys[at].append(asked.key)
        if model != self.models[at]:  # answered by several (as a split row's "a+b")
            self.models[at] = "+".join(sorted({*self.models[at].split("+"), model}))


def hits(
    found: Sequence[tuple[bytes, int, Any, Any]],
    by_id: Mapping[int, Asked],
    types: pa.Schema | None = None,
) -> dict[bytes, CacheHit]:
    """The hits in stored answers (state, question, blob, model): each state's answers whose
    check holds, and the model(s) that gave them ("+"-joined). A question the job does not
    ask, or a model that is not text (damage the check cannot see), is left out. `types`: the
    job's answer types, for answers held in Arrow (module docstring)."""
    checked = _Found()
    crc32, from_bytes = zlib.crc32, int.from_bytes
    for state, question, blob, model in found:
        asked = by_id.get(question)
        if asked is None or type(model) is not str:
            continue
        if type(blob) is not bytes or len(blob) <= CHECK:
            continue
        text = blob[CHECK:]
        if from_bytes(blob[:CHECK], "big") == crc32(text, crc32(state, asked.crc)):
            checked.add(state, asked, text, model)
    objects = [b"{" + b",".join(m) + b"}" for m in checked.members]
    answers = None if types is None else _in_arrow(objects, checked, types)
    if answers is None:
        answers = _parsed(objects)
    models = checked.models
    return {
        state: CacheHit(answers[at], models[at])
        for state, at in checked.index.items()
        if answers[at] is not None
    }


def _in_arrow(
    objects: Sequence[bytes], checked: _Found, types: pa.Schema
) -> list[ArrowAnswers] | None:
    """The objects parsed into one Arrow table of `types`, one row each; None when Arrow
    refuses them or they are not exactly one object of objects each (then orjson decides)."""
    if not objects:
        return []
    text = b"\n".join(objects)
    if text.count(b"\n") != len(objects) - 1:  # orjson never writes one; a crafted text may
        return None
    options = pa_json.ParseOptions(explicit_schema=types, unexpected_field_behavior="ignore")
    try:
        table = pa_json.read_json(io.BytesIO(text), pa_json.ReadOptions(block_size=_BLOCK), options)
    except pa.ArrowException:
        return None
    # A member that is JSON null would be a null struct: an answer the table cannot hold.
    if (
        table.num_rows != len(objects)
        or _nulls(table) != len(objects) * len(types) - checked.answers
    ):
        return None
    return [ArrowAnswers(table, at, tuple(keys)) for at, keys in enumerate(checked.keys)]


def _nulls(table: pa.Table) -> int:
    return sum(column.null_count for column in table.columns)


def _parsed(texts: Sequence[bytes]) -> list[Any]:
    """JSON objects of objects, parsed in one call (a JSON array of them); when that fails,
    one by one. None for a text that is not an object of objects."""
    try:
        parsed = orjson.loads(b"[" + b",".join(texts) + b"]")
    except orjson.JSONDecodeError:
        parsed = None
    if type(parsed) is not list or len(parsed) != len(texts):  # a text that was not one value
        parsed = [_loads(text) for text in texts]
    return [
        o if type(o) is dict and all(type(a) is dict for a in o.values()) else None for o in parsed
    ]


def _loads(text: bytes) -> Any:
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError:
        return None
