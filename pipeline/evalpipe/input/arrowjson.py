"""Arrow column types and values as the JSON the service takes, in one place.

The corpus is Arrow (Parquet); a state is JSON (as the service takes it: a string, or an object
of text and numbers). This module decides which column types can become a state or an id, and
converts a column to JSON-ready Python values column-wise (one Arrow cast, not a Python loop per
value).

Integers, floats, booleans, strings and nulls keep their JSON type; timestamps, dates and times
become ISO 8601 strings (inside lists and structs, Arrow's text for them: a space, not 'T',
between date and time); decimals become strings (exact, e.g. "19.90": a float would round wide
decimals); lists and structs become arrays and objects; maps become arrays of {"key", "value"}
objects; NaN and infinities become null (JSON has no such numbers). Binary columns and types
with no JSON form (durations, intervals, unions, extensions) are refused.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from evalpipe.errors import InputError

_ISO_TZ = "%Y-%m-%dT%H:%M:%S%Ez"  # %S carries the fraction of the column's unit
_NON_FINITE = frozenset({"nan", "inf", "-inf"})


def _walk(t: pa.DataType) -> Iterator[pa.DataType]:
    """A type and every type nested in it."""
    yield t
    if pa.types.is_dictionary(t):
        yield from _walk(t.value_type)
    elif pa.types.is_map(t):
        yield from _walk(t.key_type)
        yield from _walk(t.item_type)
    elif isinstance(t, pa.StructType):
        for field in t:
            yield from _walk(field.type)
    elif hasattr(t, "value_type"):  # the list kinds
        yield from _walk(t.value_type)


def _is_binary(t: pa.DataType) -> bool:
    return (
        pa.types.is_binary(t)
        or pa.types.is_large_binary(t)
        or pa.types.is_fixed_size_binary(t)
        or pa.types.is_binary_view(t)
    )


def is_text(t: pa.DataType) -> bool:
    if pa.types.is_dictionary(t):
        return is_text(t.value_type)
    return pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_string_view(t)


def _has_no_json_form(t: pa.DataType) -> bool:
    return (
        pa.types.is_duration(t)
        or pa.types.is_interval(t)
        or pa.types.is_union(t)
        or isinstance(t, pa.ExtensionType)
    )


def check_state_type(name: str, t: pa.DataType, string_state: bool) -> None:
    inner = list(_walk(t))
    if any(_is_binary(x) for x in inner):
        raise InputError(f"column '{name}' is binary; the service takes text only")
    if string_state and not is_text(t):
        raise InputError(
            f"state column '{name}' has type {t}; a single state column must be text "
            "(string or large_string); list several columns to send an object state"
        )
    if any(_has_no_json_form(x) for x in inner):
        raise InputError(
            f"column '{name}' has type {t}, which has no JSON form; cast it to a number or "
            "a string in the input"
        )


def check_id_type(name: str, t: pa.DataType) -> None:
    if pa.types.is_nested(t) or _has_no_json_form(t) or pa.types.is_null(t):
        raise InputError(
            f"id_column '{name}' has type {t}; ids must be scalar values (integers or strings)"
        )


def comparable(t: pa.DataType) -> pa.DataType:
    """A type with its encoding forgotten, so a string file and a large_string file agree."""
    if pa.types.is_dictionary(t):
        return comparable(t.value_type)
    if is_text(t):
        return pa.large_string()
    return t


def plain_id_type(t: pa.DataType) -> pa.DataType:
    """The id type the output table uses: dictionary and view encodings dropped."""
    if pa.types.is_dictionary(t):
        t = t.value_type
    if pa.types.is_string_view(t):
        return pa.large_string()
    return t


# --------------------------------------------------------------------------- values


def _json_type(t: pa.DataType) -> pa.DataType:
    """The Arrow type whose Python values are JSON values (nested columns are cast to it)."""
    if pa.types.is_dictionary(t):
        return _json_type(t.value_type)
    if pa.types.is_temporal(t) or pa.types.is_decimal(t):
        return pa.string()
    if pa.types.is_floating(t):
        return pa.float64()
    if pa.types.is_map(t):
        entry = pa.struct([("key", _json_type(t.key_type)), ("value", _json_type(t.item_type))])
        return pa.list_(entry)
    if isinstance(t, pa.StructType):
        return pa.struct([field.with_type(_json_type(field.type)) for field in t])
    if pa.types.is_fixed_size_list(t):
        return pa.list_(t.value_field.with_type(_json_type(t.value_type)), t.list_size)
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_list_view(t):
        return pa.list_(t.value_field.with_type(_json_type(t.value_type)))
    return t


def _floats(arr: pa.Array) -> list[float | None]:
    """Floats with NaN and infinities as None (JSON has no such numbers)."""
    if not pa.types.is_float64(arr.type):
        # via Arrow's shortest text: float32 0.1 stays 0.1, not 0.10000000149011612
        texts = arr.cast(pa.string()).to_pylist()
        return [None if v is None or v in _NON_FINITE else float(v) for v in texts]
    values = arr.to_pylist()
    if pc.all(pc.is_finite(arr)).as_py() is False:
        return [v if v is None or math.isfinite(v) else None for v in values]
    return values


def _iso_timestamps(arr: pa.Array) -> pa.Array:
    """ISO 8601 text, with the fraction of the column's unit and the offset if it has a zone."""
    if arr.type.tz:
        return pc.strftime(arr, format=_ISO_TZ)
    # Arrow's cast writes 'YYYY-MM-DD HH:MM:SS.ffffff', ten times faster than strftime
    return pc.replace_substring(arr.cast(pa.string()), " ", "T", max_replacements=1)


def json_values(arr: pa.Array) -> list[Any]:
    """One column as JSON-ready Python values, converted column-wise."""
    if pa.types.is_dictionary(arr.type):
        arr = arr.dictionary_decode()
    t = arr.type
    if pa.types.is_timestamp(t):
        return _iso_timestamps(arr).to_pylist()
    if pa.types.is_floating(t):
        return _floats(arr)
    target = _json_type(t)
    # Nested timestamps come out as 'YYYY-MM-DD HH:MM:SS' (Arrow's cast), not with a 'T'.
    return (arr.cast(target) if target != t else arr).to_pylist()


def blank(arr: pa.Array) -> pa.Array:
    """True where a value says nothing: null, NaN, empty or whitespace text, an empty list."""
    if pa.types.is_dictionary(arr.type):
        arr = arr.dictionary_decode()
    t = arr.type
    if is_text(t):
        text = arr.cast(pa.large_string()) if pa.types.is_string_view(t) else arr
        empty = pc.or_(pc.equal(pc.utf8_length(text), 0), pc.utf8_is_space(text))
        return pc.or_kleene(pc.is_null(text), empty)
    if pa.types.is_floating(t):
        return pc.or_kleene(pc.is_null(arr), pc.invert(pc.is_finite(arr)))
    if pa.types.is_map(t):
        arr = arr.cast(_json_type(t))  # list_value_length has no map kernel
        t = arr.type
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return pc.or_kleene(pc.is_null(arr), pc.equal(pc.list_value_length(arr), 0))
    return pc.is_null(arr)
