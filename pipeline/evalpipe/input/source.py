"""Parquet in: the corpus as batches of (id, state) rows, in bounded memory whatever its size.

The job's input is read here alone (the output is the sink's). It exists so that the rest
of the pipeline sees plain Python rows and never a file, a column type or an Arrow error:

- `Source(spec)` checks everything it can before any request is sent (path, files, columns,
  types) and raises `InputError` with one line that names the offending thing;
- the corpus is one file, a folder of files (and Hive-partitioned folders in it, such as
  `dt=2026-11-23/`), or a prefix of file names, on a local disk or an object store
  (`s3://bucket/corpus/`: `evalpipe.stores.location`); files are read through ranged reads of a
  bounded buffer, so a corpus on a store streams like a local one;
- `check_unique_ids()` and `state_batches()` are whole-corpus passes that stream, so a job can
  refuse a corpus with duplicate ids and find the states it holds more than once (`plan`);
- `batches()` yields rows in file order, `batch_rows` at a time, reading one record batch per
  file at a time, so memory depends on `batch_rows`, not on the corpus;
- a store that goes away while a run reads (after the checks at the start, which fail at
  once) is waited for, up to `PATIENCE_SECONDS`: the file is opened again and read on from
  the row where it stopped (`evalpipe.stores.patience`).

Which column types can be a state or an id, and how values become the JSON the service
takes, is `evalpipe.input.arrowjson`'s business.
"""

from __future__ import annotations

import bisect
import contextlib
import difflib
import functools
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import polars as pl
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pyarrow.fs as pafs

from evalpipe.errors import InputError, first_line
from evalpipe.input.arrowjson import (
    blank,
    check_id_type,
    check_state_type,
    comparable,
    json_values,
    plain_id_type,
)
from evalpipe.input.corpus import StoreAway, footer, open_file, parquet_files
from evalpipe.input.selection import Selection
from evalpipe.stores import PATIENCE_SECONDS, Location, parse_location, resolve, unreachable

NULL_STATE = "state is null"
BLANK_STATE = "state is empty or whitespace"
BLANK_OBJECT = "every state column is null or blank"
_SHOWN_COLUMNS = 20  # a message lists at most this many column names
_SHOWN_IDS = 5

State = str | dict[str, Any]


@dataclass(frozen=True)
class SourceSpec:
    """Where the corpus is and which columns make a row's id and state."""

    path: Location  # a Parquet file, a folder of them (with Hive folders), or a name prefix
    id_column: str
    state: str | tuple[str, ...]  # one column -> string state; a tuple -> object state
    batch_rows: int = 8192
    rows: Selection | None = None  # a few rows to try first (--limit, --sample): else all


@dataclass(frozen=True, slots=True)
class Row:
    """One input row: its id (Python type kept) and its state, or why the state is invalid."""

    id: Any
    state: State | None  # None when invalid
    invalid: str | None  # the `invalid_state` row error's message, or None
    # its place in the corpus (0-based, file order): `_row`; not part of a row's identity
    position: int | None = field(default=None, compare=False)


# A frozen dataclass's __init__ sets each field through object.__setattr__, 2 us a row; setting
# the slots directly builds the same object three times faster (batches build a Row per row).
_SET_ID, _SET_STATE, _SET_INVALID, _SET_POSITION = (
    getattr(Row, f).__set__ for f in ("id", "state", "invalid", "position")
)


def _make_row(row_id: Any, state: State | None, invalid: str | None, position: int) -> Row:
    row = object.__new__(Row)
    _SET_ID(row, row_id)
    _SET_STATE(row, state)
    _SET_INVALID(row, invalid)
    _SET_POSITION(row, position)
    return row


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


@contextlib.contextmanager
def _converting(path: str) -> Iterator[None]:
    """A value Python cannot hold (e.g. a nanosecond timestamp id) names its file."""
    try:
        yield
    except (pa.ArrowException, ValueError, OverflowError) as exc:
        reason = first_line(exc)
        raise InputError(f"input file '{path}' has a value that cannot be read: {reason}") from None


# --------------------------------------------------------------------------- source


class Source:
    """A validated Parquet corpus; see the module docstring.

    Construction reads only file footers. `files` are the corpus files as messages show
    them, `schema` the first file's Arrow schema, `id_type` the id column's type
    (dictionary/view encodings dropped), `num_rows` the footers' total.
    """

    def __init__(self, spec: SourceSpec) -> None:
        if spec.batch_rows < 1:
            raise InputError(f"batch_rows must be at least 1 (got {spec.batch_rows})")
        self.spec = spec
        self._string_state = isinstance(spec.state, str)
        self._state_columns = (spec.state,) if isinstance(spec.state, str) else tuple(spec.state)
        self._check_state_names()
        location = parse_location(spec.path)
        self._fs, root = resolve(location, InputError, "input.path")
        # the reads waited on patiently (`_file_batches`), with pyarrow's own retries cut short
        self._patient_fs, _ = resolve(location, InputError, "input.path", patient=True)
        self._files = parquet_files(self._fs, root, location)
        self.files: tuple[str, ...] = tuple(file.shown for file in self._files)
        footers = [footer(self._fs, file) for file in self._files]
        self.schema: pa.Schema = footers[0][0]
        self.num_rows: int = sum(rows for _, rows in footers)
        self._kept: list[int] | None = None  # positions a sample keeps (None: a prefix, or all)
        if spec.rows is not None:
            self._kept = spec.rows.positions(self.num_rows)
            self.num_rows = min(self.num_rows, spec.rows.count)
        self._columns = list(dict.fromkeys((spec.id_column, *self._state_columns)))
        self._check_columns(self.schema)
        for path, (schema, _) in zip(self.files[1:], footers[1:], strict=True):
            self._check_same(path, schema)
        self.id_type: pa.DataType = plain_id_type(self.schema.field(spec.id_column).type)

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
        check_id_type(self.spec.id_column, schema.field(self.spec.id_column).type)
        for column in self._state_columns:
            check_state_type(column, schema.field(column).type, self._string_state)

    def _check_same(self, path: str, schema: pa.Schema) -> None:
        """Every file must carry the used columns with the first file's types."""
        if any(column not in schema.names for column in self._columns):
            try:
                self._check_columns(schema)
            except InputError as exc:
                raise InputError(f"input file '{path}': {exc}") from None
        for column in self._columns:
            first, here = self.schema.field(column).type, schema.field(column).type
            if comparable(first) != comparable(here):
                raise InputError(
                    f"input file '{path}': column '{column}' has type {here}, "
                    f"but '{self.files[0]}' has {first}; all files must agree"
                )

    # ----------------------------------------------------------------------- reading

    def _record_batches(
        self, columns: list[str]
    ) -> Iterator[tuple[str, pa.RecordBatch, Sequence[int]]]:
        """The corpus's record batches, only the selected rows when `rows` selects some, each
        with its rows' positions in the corpus."""
        start = 0
        kept, left = self._kept, self.num_rows
        positions: Sequence[int]
        for shown, batch in self._all_batches(columns):
            end = start + batch.num_rows
            if self.spec.rows is None:
                part, positions = batch, range(start, end)
            elif kept is None:
                part = batch.slice(0, left)
                positions = range(start, start + part.num_rows)
            else:
                lo, hi = bisect.bisect_left(kept, start), bisect.bisect_left(kept, end)
                positions = kept[lo:hi]
                part = batch.take(pa.array([i - start for i in positions], pa.int64()))
            start, left = end, left - part.num_rows
            if part.num_rows:
                yield shown, part, positions
            if self.spec.rows is not None and left <= 0:
                return

    def _all_batches(self, columns: list[str]) -> Iterator[tuple[str, pa.RecordBatch]]:
        for file in self._files:
            done = 0  # rows of the file yielded: a read that the store broke off goes on there
            waited = 0.0  # seconds waited for the store since the last batch read
            while True:
                try:
                    for batch in self._file_batches(file, columns, done):
                        done, waited = done + batch.num_rows, 0.0
                        yield file.shown, batch
                    break
                except StoreAway as away:
                    waited = away.wait_out(file.shown, waited)

    def _file_batches(self, file: Any, columns: list[str], skip: int) -> Iterator[pa.RecordBatch]:
        """The file's record batches after its first `skip` rows; `StoreAway` when the store
        could not be reached on the way."""
        with open_file(self._patient_fs, file, PATIENCE_SECONDS) as parquet:
            try:
                for batch in parquet.iter_batches(
                    batch_size=self.spec.batch_rows, columns=columns, use_threads=True
                ):
                    if skip >= batch.num_rows:
                        skip -= batch.num_rows
                        continue
                    yield batch.slice(skip)
                    skip = 0
            except (pa.ArrowException, OSError) as exc:
                if isinstance(exc, OSError) and unreachable(exc):
                    raise StoreAway(exc) from None
                raise InputError(
                    f"input file '{file.shown}' cannot be read: {first_line(exc)}"
                ) from None

    def _states(self, batch: pa.RecordBatch) -> tuple[list[State | None], list[str | None]]:
        """The batch's states (None where invalid) and, per row, why a state is invalid."""
        columns = [batch.column(name) for name in self._state_columns]
        empty = functools.reduce(pc.and_, (pc.fill_null(blank(c), True) for c in columns))
        if self._string_state:
            states: list[Any] = json_values(columns[0])
        else:
            names = self._state_columns
            rows = zip(*map(json_values, columns), strict=True)
            states = [dict(zip(names, vals, strict=True)) for vals in rows]
        reasons: list[str | None] = [None] * len(states)
        if pc.any(empty).as_py():
            for i in pc.indices_nonzero(empty).to_pylist():
                reasons[i] = self._reason(states[i])
                states[i] = None
        return states, reasons

    def _reason(self, state: Any) -> str:
        if not self._string_state:
            return BLANK_OBJECT
        return NULL_STATE if state is None else BLANK_STATE

    def _rows(
        self,
        batch: pa.RecordBatch,
        positions: Sequence[int],
        skip: Callable[[Any], bool] | None,
    ) -> list[Row]:
        column = batch.column(self.spec.id_column)
        if pa.types.is_dictionary(column.type):
            column = column.dictionary_decode()
        ids = column.to_pylist()
        states, reasons = self._states(batch)
        if skip is None:
            return list(map(_make_row, ids, states, reasons, positions))
        rows = zip(ids, states, reasons, positions, strict=True)
        return [_make_row(i, s, r, n) for i, s, r, n in rows if not skip(i)]

    def batches(self, skip: Callable[[Any], bool] | None = None) -> Iterator[list[Row]]:
        """Rows in file order, exactly `batch_rows` per list (the last may be shorter).

        Rows whose id makes `skip(id)` true are left out (a resumed job skips committed ids).
        Lazy: each list is built when the consumer asks for it.
        """
        size = self.spec.batch_rows
        pending: list[Row] = []
        for path, batch, positions in self._record_batches(self._columns):
            with _converting(path):
                rows = self._rows(batch, positions, skip)
            pending.extend(rows)
            while len(pending) >= size:
                yield pending[:size]
                del pending[:size]
        if pending:
            yield pending

    def state_batches(self) -> Iterator[list[State | None]]:
        """Every row's state (None where invalid), a record batch at a time, reading the state
        columns only: for whole-corpus passes such as finding repeated states."""
        for path, batch, _ in self._record_batches(list(self._state_columns)):
            with _converting(path):
                states, _ = self._states(batch)
            yield states

    def columns(self, names: Sequence[str], role: str = "column") -> pa.Table:
        """The id and `names` columns of the rows, in file order, in one pass over those columns
        alone (`evalpipe estimate --by`); InputError naming a column that is not there."""
        for name in (n for n in names if n not in self.schema.names):
            raise _not_found(role, name, self.schema.names)
        wanted = list(dict.fromkeys((self.spec.id_column, *names)))
        tables = [pa.Table.from_batches([b]) for _, b, _ in self._record_batches(wanted)]
        empty = self.schema.empty_table().select(wanted)
        return pa.concat_tables([empty, *tables], promote_options="permissive")

    # ----------------------------------------------------------------------- corpus checks

    def check_unique_ids(self) -> None:
        """Raise InputError if an id is null or occurs twice (streams the id column only)."""
        name = self.spec.id_column
        counts = self._ids().group_by(name).len(name="n")
        query = counts.filter((pl.col("n") > 1) | pl.col(name).is_null())
        try:
            found = query.collect(engine="streaming")
        except pl.exceptions.PolarsError as exc:
            reason = first_line(exc)
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

    def _ids(self) -> pl.LazyFrame:
        """The id column of every file, for a streaming query: polars reads local files
        itself; files on an object store come through pyarrow (one credential chain)."""
        name = self.spec.id_column
        if isinstance(self._fs, pafs.LocalFileSystem):
            paths = [file.path for file in self._files]
            scan = pl.scan_parquet(
                paths, hive_partitioning=False, glob=False, extra_columns="ignore"
            )
            return scan.select(pl.col(name))
        dataset = ds.dataset(
            [file.path for file in self._files], format="parquet", filesystem=self._fs
        )
        batches = self.spec.batch_rows
        return pl.scan_pyarrow_dataset(dataset, batch_size=batches).select(pl.col(name))

    def _raise_duplicates(self, found: pl.DataFrame) -> None:
        name = self.spec.id_column
        with contextlib.suppress(pl.exceptions.PolarsError):  # unorderable ids: any order
            found = found.sort(name)
        shown = ", ".join(f"{v!r} ({n} times)" for v, n in found.head(_SHOWN_IDS).iter_rows())
        raise InputError(
            f"id_column '{name}' is not unique: {found.height} "
            f"id{'s occur' if found.height != 1 else ' occurs'} more than once, e.g. {shown}"
        )
