"""An output opened for reading: where it is, its schema, questions and manifest, and its rows.

Every reader of an output comes through `open_output`: `ep.read`, `describe`, `diff`, `agree`,
the nightly series and the report. It takes a folder of Parquet parts, local or on an object
store (`s3://bucket/out`, through `evalpipe.stores`), or a Delta table (`output.format: delta`)
as `evalpipe.lake.DeltaTarget` names it: the whole table, a version (`TABLE@VERSION`) or one
night (`TABLE/dt=2026-11-27`), its manifest made from the commit info. Opening reads only file
names, one footer (a table's log) and the manifest; the rows are read when asked, lazily with
polars' own readers (`scan`: a filter or a projection reaches the files) or all at once
(`rows`), of any schema version (`evalpipe.reading.questions`).
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator, Sequence
from functools import cached_property
from typing import Any

import polars as pl
import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from evalpipe.errors import ConfigError, InputError, first_line
from evalpipe.lake import DeltaTarget, delta_target, load
from evalpipe.output import (
    SampleFile,
    journal_path,
    part_names,
    read_manifest,
    schema_version,
    target_schema,
)
from evalpipe.reading.questions import Question, read_questions
from evalpipe.stores import Folder, Location

PART_GLOB = "part-*.parquet"  # as users read the parts (README); outdir decides what a part is
REQUIRED = ("_model", "_error_type")  # every evalpipe output has had these
CORRECTED = "_corrected.json"  # `evalpipe infer --record`'s shares (metadata: starts with _)
LINEAGE = ("_run_id", "_scored_at", "_state_hash", "_cached", "_reused")  # came later


def scan_files(fs: Any, paths: Sequence[str]) -> pl.LazyFrame:
    """Parquet files `paths` of filesystem `fs`, as one lazy scan: polars' own reader on a
    local disk, a pyarrow dataset on a store (its credential chain and `AWS_ENDPOINT_URL`
    apply as they do to a job)."""
    if isinstance(fs, pafs.LocalFileSystem):
        return pl.scan_parquet(list(paths))
    import pyarrow.dataset as ds

    return pl.scan_pyarrow_dataset(ds.dataset(list(paths), filesystem=fs, format="parquet"))


class Output:
    """An output, opened (module docstring): `folder` (a Delta table's root) and `shown` (as
    named: the folder, or the table with its version or night), its `schema` (of a Delta night:
    the columns its rows were written with) and `questions`; `parts`, the Parquet files that
    hold its rows as paths in `folder.fs`, and `manifest` (of a Delta table: the version's, read
    when first asked); `delta`: the table as named, if it is one; `journal`: a run's journal is
    on this machine (its rows are not committed yet)."""

    def __init__(
        self, folder: Folder, shown: str, schema: pa.Schema, questions: tuple[Question, ...], *,
        parts: tuple[str, ...] = (), manifest: dict[str, Any] | None = None,
        notes: tuple[str, ...] = (), journal: bool = False, delta: DeltaTarget | None = None,
    ) -> None:  # fmt: skip
        self.folder, self.shown, self.schema, self.questions = folder, shown, schema, questions
        self.notes, self.journal, self.delta = notes, journal, delta
        if delta is None:  # known on opening; a Delta table's are read when first asked
            self.parts, self.manifest = parts, manifest

    @cached_property
    def parts(self) -> tuple[str, ...]:
        assert self.delta is not None
        with self._reading():
            return tuple(self.folder.path(name) for name in self.delta.files())

    @cached_property
    def manifest(self) -> dict[str, Any] | None:
        assert self.delta is not None
        with self._reading():
            return self.delta.manifest()

    @contextlib.contextmanager
    def _reading(self) -> Iterator[None]:
        try:
            yield
        except InputError:
            raise
        except Exception as exc:  # pyarrow's and deltalake's errors: one line, whatever the cause
            raise InputError(f"output '{self.shown}' cannot be read: {first_line(exc)}") from None

    @property
    def id_column(self) -> str:
        return str(self.schema.names[0])

    @property
    def version(self) -> int:
        return schema_version(self.schema)

    @property
    def partition(self) -> dict[str, str]:
        """The Delta partition named (`TABLE/dt=...`): its columns hold one value each."""
        return dict(self.delta.partition) if self.delta is not None else {}

    def question(self, key: str) -> Question | None:
        return next((q for q in self.questions if q.key == key), None)

    def has(self, column: str) -> bool:
        return column in self.schema.names

    @property
    def missing_lineage(self) -> tuple[str, ...]:
        """The lineage columns an older evalpipe did not write yet."""
        return tuple(name for name in LINEAGE if not self.has(name))

    @property
    def where(self) -> str:
        """Where the output is, in full: its absolute local path, or its URI (of a Delta
        table, its root)."""
        local = self.folder.local
        return str(local.resolve()) if local is not None else self.folder.shown

    @property
    def name(self) -> str:
        """The output folder's own name (`dt=2026-11-24`, `demo`)."""
        return self.where.rstrip("/").rsplit("/", 1)[-1] or self.where

    @property
    def sample(self) -> dict[str, Any] | None:
        """`evalpipe estimate`'s design and estimates (`_sample.json`), if any."""
        return SampleFile(self.folder.location).read() if self.delta is None else None

    @property
    def corrected(self) -> dict[str, Any] | None:
        """The shares `evalpipe infer --record` kept (`_corrected.json`), if any."""
        if self.delta is not None:
            return None
        try:
            raw = self.folder.read_bytes(CORRECTED)
            found = json.loads(raw) if raw is not None else None
        except (OSError, ValueError):
            return None
        return found if isinstance(found, dict) else None

    def keep_corrected(self, document: dict[str, Any]) -> str:
        """Keep `evalpipe infer`'s `document` beside the rows (`_corrected.json`, written
        whole), where `describe` and the report find it; returns where it went. A Delta table
        keeps none (its nights share one folder): InputError."""
        if self.delta is not None:
            raise InputError(f"--record: '{self.shown}' is a Delta table; nothing is kept in it")
        data = json.dumps(document, indent=2, ensure_ascii=False, default=str).encode()
        self.folder.write_bytes(CORRECTED, data)
        return self.folder.shown_name(CORRECTED)

    def scan(self) -> pl.LazyFrame:
        """Every committed row, lazily (parts, never the journal or temporary files; a Delta
        table's version, or its night, with its partition columns)."""
        if self.delta is None:
            return scan_files(self.folder.fs, self.parts)
        target = self.delta
        frame = pl.scan_delta(
            str(target.location), version=target.version,
            storage_options=target.storage_options() or None,
        )  # fmt: skip
        for key, value in target.partition.items():
            frame = frame.filter(pl.col(key) == value)
        return frame

    @cached_property
    def rows(self) -> pl.DataFrame:
        """Every committed row, read at once (parts of older schemas promoted to one)."""
        with self._reading():
            if self.delta is not None:
                arrow = self.delta.rows(self.schema.names if self.delta.partition else None)
            else:
                tables = [pq.read_table(p, filesystem=self.folder.fs) for p in self.parts]
                arrow = pa.concat_tables(tables, promote_options="permissive")
        rows = pl.from_arrow(arrow)
        assert isinstance(rows, pl.DataFrame)
        return rows


def open_output(location: Location, required: Sequence[str] = REQUIRED) -> Output:
    """Open `location` (a local directory, an object-store URI or a Delta table) as a job's
    output; InputError (one line, naming it) if it is not one, or has no column of `required`."""
    target = delta_target(location)
    if target is not None:
        return _delta(target, required)
    folder = _folder(location)
    where = folder.shown
    parts = _part_files(folder)
    manifest = read_manifest(folder, reader=True)
    if not parts:
        what = "no committed rows yet" if manifest is not None else "not an evalpipe output"
        raise InputError(f"output '{where}' holds no {PART_GLOB} files: {what}")
    try:
        schema = pq.read_schema(parts[0], filesystem=folder.fs)
    except (OSError, pa.ArrowException) as exc:
        shown = folder.shown_name(_base(parts[0]))
        raise InputError(f"part '{shown}' cannot be read: {first_line(exc)}") from None
    _require(
        schema, required, f"output '{where}' is not an evalpipe output: part '{_base(parts[0])}'"
    )
    questions, notes = read_questions(schema)
    journal = journal_path(folder).exists()
    return Output(
        folder, where, schema, questions, parts=parts, manifest=manifest, notes=notes,
        journal=journal,
    )  # fmt: skip


def _delta(target: DeltaTarget, required: Sequence[str]) -> Output:
    """A Delta table (a night of it: `TABLE/dt=...`, a version: `TABLE@N`): its schema at
    that version; its files and the runs its commits recorded are read when asked."""
    folder = _folder(target.location)
    try:
        schema = target_schema(target)
    except Exception as exc:  # deltalake's errors: one line, whatever the cause
        raise InputError(f"output '{target.shown}' cannot be read: {first_line(exc)}") from None
    _require(schema, required, f"output '{target.shown}' is not an evalpipe output: it")
    questions, notes = read_questions(schema)
    return Output(folder, target.shown, schema, questions, notes=notes, delta=target)


def _require(schema: pa.Schema, required: Sequence[str], what: str) -> None:
    missing = [name for name in required if name not in schema.names]
    if missing:
        raise InputError(f"{what} has no column '{missing[0]}'")


def _folder(location: Location) -> Folder:
    try:
        return Folder(location, key="output")
    except ConfigError as exc:  # an unknown scheme, a store that cannot be reached
        raise InputError(exc.message) from None


def _part_files(folder: Folder) -> tuple[str, ...]:
    where = folder.shown
    try:
        kind = folder.fs.get_file_info(folder.root).type
        if kind == pafs.FileType.NotFound:
            raise InputError(
                f"output '{where}' does not exist (no {PART_GLOB} files to read); give a job's "
                "output.path"
            )
        if kind != pafs.FileType.Directory:
            raise InputError(f"output '{where}' is not a directory; give a job's output.path")
        return tuple(folder.path(name) for name in part_names(folder))
    except OSError as exc:
        raise InputError(f"output '{where}' cannot be read: {first_line(exc)}") from None


def _base(path: str) -> str:
    return path.rsplit("/", 1)[-1]


def table_version(location: Location) -> int | None:
    """The version of the Delta table at `location` as it is now; None for a Parquet output,
    or a table that cannot be read (the rows are there: the version is a figure, for a
    scheduler's view)."""
    try:
        return int(load(location).version())
    except Exception:  # not a Delta table (a Parquet folder), or not one that opens
        return None
