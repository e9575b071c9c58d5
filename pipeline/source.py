"""Parquet in: the corpus as batches of (id, state) rows, in bounded memory whatever its size.

This is one of the two places that know Parquet (the other is `sink`). It exists so that the
rest of the pipeline sees plain Python rows and never a file, a column type or an Arrow error:

- `Source(spec)` checks everything it can before any request is sent (path, files, columns,
  types) and raises `InputError` with one line that names the offending thing;
- `check_unique_ids()` and `duplicate_state_keys()` are whole-corpus passes that stream, so a
  job can refuse a corpus with duplicate ids and send each repeated state only once;
- `batches()` yields rows in file order, `batch_rows` at a time, reading one record batch per
  file at a time, so memory depends on `batch_rows`, not on the corpus.

State values become JSON values the service takes (spec 2.1: a string, or an object of text
and numbers). Integers, floats, booleans, strings and nulls keep their JSON type; timestamps,
dates and times become ISO 8601 strings (inside lists and structs, Arrow's text for them: a
space, not 'T', between date and time); decimals become strings (exact, e.g. "19.90": a float
would round wide decimals); lists and structs become arrays and objects; maps become arrays of
{"key", "value"} objects; NaN and infinities become null (JSON has no such numbers). Binary
columns and types with no JSON form (durations, intervals, unions, extensions) are refused.
"""

from __future__ import annotations

import contextlib
import difflib
import functools
import hashlib
import math
import os
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
import polars as pl
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from pipeline.errors import InputError

PARQUET_SUFFIXES = (".parquet", ".parq", ".pq")
HIDDEN_PREFIXES = ("_", ".")  # Spark's _SUCCESS, .crc files, our own temporary files
NULL_STATE = "state is null"
BLANK_STATE = "state is empty or whitespace"
BLANK_OBJECT = "every state column is null or blank"
_SHOWN_COLUMNS = 20  # a message lists at most this many column names
_SHOWN_IDS = 5
_READ_BUFFER = 1 << 20  # read pages through a 1 MiB buffer, not whole row groups
_COMPACT_EVERY = 1 << 20  # new digests buffered before they are merged into the sorted ones
_ISO_TZ = "%Y-%m-%dT%H:%M:%S%Ez"  # %S carries the fraction of the column's unit
_NON_FINITE = frozenset({"nan", "inf", "-inf"})

State = str | dict[str, Any]


@dataclass(frozen=True)
class SourceSpec:
    """Where the corpus is and which columns make a row's id and state."""

    path: Path  # a Parquet file or a directory of them (not read recursively)
    id_column: str
    state: str | tuple[str, ...]  # one column -> string state; a tuple -> object state
    batch_rows: int = 8192


@dataclass(frozen=True, slots=True)
class Row:
    """One input row: its id (Python type kept) and its state, or why the state is invalid."""

    id: Any
    state: State | None  # None when invalid
    invalid: str | None  # the `invalid_state` row error's message, or None


# A frozen dataclass's __init__ sets each field through object.__setattr__, 2 us a row; setting
# the slots directly builds the same object three times faster (batches build a Row per row).
_SET_ID, _SET_STATE, _SET_INVALID = (getattr(Row, f).__set__ for f in ("id", "state", "invalid"))


def _make_row(row_id: Any, state: State | None, invalid: str | None) -> Row:
    row = object.__new__(Row)
    _SET_ID(row, row_id)
    _SET_STATE(row, state)
    _SET_INVALID(row, invalid)
    return row


def state_key(state: State) -> bytes:
    """16-byte digest of a state's canonical JSON (object keys sorted): the dedup/cache key.

    Hashing the JSON rather than the raw text keeps a string state and an object state with
    the same characters apart: the service receives them differently.
    """
    canonical = orjson.dumps(state, option=orjson.OPT_SORT_KEYS)
    return hashlib.blake2b(canonical, digest_size=16).digest()


# --------------------------------------------------------------------------- files


def _first_line(exc: BaseException) -> str:
    """A lower-layer error as a fragment of a one-line message."""
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def _parquet_files(path: Path) -> list[Path]:
    """The files to read, in sorted order; a named file is taken whatever its suffix."""
    if not path.exists():
        raise InputError(f"input path '{path}' does not exist")
    if not path.is_dir():
        return [path]
    try:
        names = sorted(os.listdir(path))
    except OSError as exc:
        raise InputError(f"input path '{path}' cannot be read: {exc.strerror}") from None
    files = [
        path / name
        for name in names
        if not name.startswith(HIDDEN_PREFIXES)
        and name.lower().endswith(PARQUET_SUFFIXES)
        and (path / name).is_file()
    ]
    if not files:
        raise InputError(
            f"input directory '{path}' holds no Parquet files (*.parquet; names starting with "
            "'_' or '.' are ignored and subdirectories are not read)"
        )
    return files


def _open(path: Path) -> pq.ParquetFile:
    """Open one file for reading; every failure becomes an InputError naming the file."""
    try:
        # pre_buffer=False + a read buffer: pages stream in, a huge row group is not loaded whole
        return pq.ParquetFile(path, pre_buffer=False, buffer_size=_READ_BUFFER)
    except pa.ArrowInvalid as exc:
        raise InputError(
            f"input file '{path}' is not a Parquet file ({_first_line(exc)})"
        ) from None
    except OSError as exc:
        reason = exc.strerror or _first_line(exc)
        raise InputError(f"input file '{path}' cannot be read: {reason}") from None


def _footer(path: Path) -> tuple[pa.Schema, int]:
    with _open(path) as parquet:
        return parquet.schema_arrow, parquet.metadata.num_rows


# --------------------------------------------------------------------------- column checks


def _not_found(role: str, name: str, columns: Sequence[str]) -> InputError:
    shown = ", ".join(columns[:_SHOWN_COLUMNS])
    if len(columns) > _SHOWN_COLUMNS:
        shown += f", ... ({len(columns) - _SHOWN_COLUMNS} more)"
    folded = {c.lower(): c for c in columns}
    close = folded.get(name.lower()) or next(
        iter(difflib.get_close_matches(name, columns, n=1, cutoff=0.6)), None
    )
    hint = f"; did you mean '{close}'?" if close else ""
    return InputError(f"{role} '{name}' not found; columns: {shown}{hint}")


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


def _is_text(t: pa.DataType) -> bool:
    if pa.types.is_dictionary(t):
        return _is_text(t.value_type)
    return pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_string_view(t)


def _has_no_json_form(t: pa.DataType) -> bool:
    return (
        pa.types.is_duration(t)
        or pa.types.is_interval(t)
        or pa.types.is_union(t)
        or isinstance(t, pa.ExtensionType)
    )


def _check_state_type(name: str, t: pa.DataType, string_state: bool) -> None:
    inner = list(_walk(t))
    if any(_is_binary(x) for x in inner):
        raise InputError(f"column '{name}' is binary; the service takes text only")
    if string_state and not _is_text(t):
        raise InputError(
            f"state column '{name}' has type {t}; a single state column must be text "
            "(string or large_string); list several columns to send an object state"
        )
    if any(_has_no_json_form(x) for x in inner):
        raise InputError(
            f"column '{name}' has type {t}, which has no JSON form; cast it to a number or "
            "a string in the input"
        )


def _check_id_type(name: str, t: pa.DataType) -> None:
    if pa.types.is_nested(t) or _has_no_json_form(t) or pa.types.is_null(t):
        raise InputError(
            f"id_column '{name}' has type {t}; ids must be scalar values (integers or strings)"
        )


def _comparable(t: pa.DataType) -> pa.DataType:
    """A type with its encoding forgotten, so a string file and a large_string file agree."""
    if pa.types.is_dictionary(t):
        return _comparable(t.value_type)
    if _is_text(t):
        return pa.large_string()
    return t


def _plain_id_type(t: pa.DataType) -> pa.DataType:
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


def _values(arr: pa.Array) -> list[Any]:
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


def _blank(arr: pa.Array) -> pa.Array:
    """True where a value says nothing: null, NaN, empty or whitespace text, an empty list."""
    if pa.types.is_dictionary(arr.type):
        arr = arr.dictionary_decode()
    t = arr.type
    if _is_text(t):
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


@contextlib.contextmanager
def _converting(path: Path) -> Iterator[None]:
    """A value Python cannot hold (e.g. a nanosecond timestamp id) names its file."""
    try:
        yield
    except (pa.ArrowException, ValueError, OverflowError) as exc:
        reason = _first_line(exc)
        raise InputError(f"input file '{path}' has a value that cannot be read: {reason}") from None


# --------------------------------------------------------------------------- counting


class _RepeatFinder:
    """Finds the digests that occur more than once, by sorting rather than hashing.

    Holds the distinct digests seen so far as one sorted Arrow array (16 bytes each) plus the
    repeated ones; new digests are buffered and merged in whenever the buffer outgrows what is
    held (amortized doubling), so memory follows the number of distinct states, never the
    states. A merge sorts, so it briefly needs ~40 more bytes per digest; an Arrow hash
    group_by needed ~190.
    """

    def __init__(self) -> None:
        self._pending: list[pa.Array] = []
        self._pending_rows = 0
        self._seen = pa.array([], pa.binary(16))  # sorted, each digest once
        self._repeated: set[bytes] = set()
        self._limit = _COMPACT_EVERY

    def add(self, digests: list[bytes]) -> None:
        if digests:
            self._pending.append(pa.array(digests, pa.binary(16)))
            self._pending_rows += len(digests)
        if self._pending_rows >= self._limit:
            self._merge()

    def _merge(self) -> None:
        keys = pa.concat_arrays([self._seen, *self._pending])
        self._pending, self._pending_rows = [], 0
        if len(keys) < 2:
            self._seen = keys
            return
        keys = keys.take(pc.sort_indices(keys))
        # equal neighbours are repeats; `seen` holds each digest once, so a digest equal to its
        # neighbour occurred twice in the corpus (in `seen` and new, or twice new)
        same = pc.equal(keys.slice(1), keys.slice(0, len(keys) - 1))
        self._repeated.update(pc.unique(keys.slice(1).filter(same)).to_pylist())
        self._seen = keys.filter(pa.concat_arrays([pa.array([True]), pc.invert(same)]))
        self._limit = max(_COMPACT_EVERY, len(self._seen))

    def repeated(self) -> set[bytes]:
        self._merge()
        return self._repeated


# --------------------------------------------------------------------------- source


class Source:
    """A validated Parquet corpus; see the module docstring.

    Construction reads only file footers. `schema` is the first file's Arrow schema, `id_type`
    the id column's type (dictionary/view encodings dropped), `num_rows` the footers' total.
    """

    def __init__(self, spec: SourceSpec) -> None:
        if spec.batch_rows < 1:
            raise InputError(f"batch_rows must be at least 1 (got {spec.batch_rows})")
        self.spec = spec
        self._string_state = isinstance(spec.state, str)
        self._state_columns = (spec.state,) if isinstance(spec.state, str) else tuple(spec.state)
        self._check_state_names()
        self.files: tuple[Path, ...] = tuple(_parquet_files(Path(spec.path)))
        footers = [_footer(path) for path in self.files]
        self.schema: pa.Schema = footers[0][0]
        self.num_rows: int = sum(rows for _, rows in footers)
        self._columns = list(dict.fromkeys((spec.id_column, *self._state_columns)))
        self._check_columns(self.schema)
        for path, (schema, _) in zip(self.files[1:], footers[1:], strict=True):
            self._check_same(path, schema)
        self.id_type: pa.DataType = _plain_id_type(self.schema.field(spec.id_column).type)

    def _check_state_names(self) -> None:
        if not self._state_columns:
            raise InputError("state: name at least one column")
        repeated = sorted({c for c in self._state_columns if self._state_columns.count(c) > 1})
        if repeated:
            raise InputError(f"state: column '{repeated[0]}' is listed more than once")

    def _check_columns(self, schema: pa.Schema) -> None:
        names = schema.names
        if self.spec.id_column not in names:
            raise _not_found("id_column", self.spec.id_column, names)
        for column in self._state_columns:
            if column not in names:
                raise _not_found("state column", column, names)
        _check_id_type(self.spec.id_column, schema.field(self.spec.id_column).type)
        for column in self._state_columns:
            _check_state_type(column, schema.field(column).type, self._string_state)

    def _check_same(self, path: Path, schema: pa.Schema) -> None:
        """Every file must carry the used columns with the first file's types."""
        if any(column not in schema.names for column in self._columns):
            try:
                self._check_columns(schema)
            except InputError as exc:
                raise InputError(f"input file '{path}': {exc}") from None
        for column in self._columns:
            first, here = self.schema.field(column).type, schema.field(column).type
            if _comparable(first) != _comparable(here):
                raise InputError(
                    f"input file '{path}': column '{column}' has type {here}, "
                    f"but '{self.files[0]}' has {first}; all files must agree"
                )

    # ----------------------------------------------------------------------- reading

    def _record_batches(self, columns: list[str]) -> Iterator[tuple[Path, pa.RecordBatch]]:
        for path in self.files:
            with _open(path) as parquet:
                try:
                    for batch in parquet.iter_batches(
                        batch_size=self.spec.batch_rows, columns=columns, use_threads=True
                    ):
                        yield path, batch
                except (pa.ArrowException, OSError) as exc:
                    reason = _first_line(exc)
                    raise InputError(f"input file '{path}' cannot be read: {reason}") from None

    def _states(self, batch: pa.RecordBatch) -> tuple[list[State | None], list[str | None]]:
        """The batch's states (None where invalid) and, per row, why a state is invalid."""
        columns = [batch.column(name) for name in self._state_columns]
        blank = functools.reduce(pc.and_, (pc.fill_null(_blank(c), True) for c in columns))
        if self._string_state:
            states: list[Any] = _values(columns[0])
        else:
            names = self._state_columns
            rows = zip(*map(_values, columns), strict=True)
            states = [dict(zip(names, vals, strict=True)) for vals in rows]
        reasons: list[str | None] = [None] * len(states)
        if pc.any(blank).as_py():
            for i in pc.indices_nonzero(blank).to_pylist():
                reasons[i] = self._reason(states[i])
                states[i] = None
        return states, reasons

    def _reason(self, state: Any) -> str:
        if not self._string_state:
            return BLANK_OBJECT
        return NULL_STATE if state is None else BLANK_STATE

    def _rows(self, batch: pa.RecordBatch, skip: Callable[[Any], bool] | None) -> list[Row]:
        column = batch.column(self.spec.id_column)
        if pa.types.is_dictionary(column.type):
            column = column.dictionary_decode()
        ids = column.to_pylist()
        states, reasons = self._states(batch)
        if skip is None:
            return list(map(_make_row, ids, states, reasons))
        triples = zip(ids, states, reasons, strict=True)
        return [_make_row(i, s, r) for i, s, r in triples if not skip(i)]

    def batches(self, skip: Callable[[Any], bool] | None = None) -> Iterator[list[Row]]:
        """Rows in file order, exactly `batch_rows` per list (the last may be shorter).

        Rows whose id makes `skip(id)` true are left out (a resumed job skips committed ids).
        Lazy: each list is built when the consumer asks for it.
        """
        size = self.spec.batch_rows
        pending: list[Row] = []
        for path, batch in self._record_batches(self._columns):
            with _converting(path):
                rows = self._rows(batch, skip)
            pending.extend(rows)
            while len(pending) >= size:
                yield pending[:size]
                del pending[:size]
        if pending:
            yield pending

    # ----------------------------------------------------------------------- corpus checks

    def check_unique_ids(self) -> None:
        """Raise InputError if an id is null or occurs twice (streams the id column only)."""
        name = self.spec.id_column
        frame = pl.scan_parquet(
            list(self.files), hive_partitioning=False, glob=False, extra_columns="ignore"
        ).select(pl.col(name))
        counts = frame.group_by(name).len(name="n")
        query = counts.filter((pl.col("n") > 1) | pl.col(name).is_null())
        try:
            found = query.collect(engine="streaming")
        except pl.exceptions.PolarsError as exc:
            reason = _first_line(exc)
            raise InputError(
                f"id_column '{name}' cannot be checked for duplicates: {reason}"
            ) from None
        nulls = found.filter(pl.col(name).is_null())
        if nulls.height:
            count = nulls["n"][0]
            raise InputError(
                f"id_column '{name}' is null in {count} row{'s' if count != 1 else ''}; "
                "every row needs an id"
            )
        if found.height:
            self._raise_duplicates(found)

    def _raise_duplicates(self, found: pl.DataFrame) -> None:
        name = self.spec.id_column
        with contextlib.suppress(pl.exceptions.PolarsError):  # unorderable ids: any order
            found = found.sort(name)
        shown = ", ".join(f"{v!r} ({n} times)" for v, n in found.head(_SHOWN_IDS).iter_rows())
        raise InputError(
            f"id_column '{name}' is not unique: {found.height} "
            f"id{'s occur' if found.height != 1 else ' occurs'} more than once, e.g. {shown}"
        )

    def duplicate_state_keys(self) -> set[bytes]:
        """`state_key`s of the valid states that occur more than once in the corpus.

        One streaming pass over the state columns; what is held is one digest per distinct
        state (see `_RepeatFinder`), never a state. The job sends each of these once.
        """
        counter = _RepeatFinder()
        for path, batch in self._record_batches(list(self._state_columns)):
            with _converting(path):
                states, _ = self._states(batch)
            counter.add([state_key(s) for s in states if s is not None])
        return counter.repeated()
