"""An output opened for reading: where it is, its schema, questions and manifest, and its rows.

Every reader of an output comes through `open_output`: `ep.read`, `describe`, `diff`, `agree`,
the nightly series and the report. It takes whatever `output`'s door finds at a location
(`evalpipe.output.stored_at`), in any format: a folder of Parquet parts, local or on an object
store (`s3://bucket/out`, through `evalpipe.stores`), or a Delta table (`output.format: delta`):
the whole table, a version (`TABLE@VERSION`) or one night (`TABLE/dt=2026-11-27`), its manifest
made from the commit info. Opening reads only file names, one footer (a table's log) and the
manifest; the rows are read when asked, lazily with polars' own readers (`scan`: a filter or a
projection reaches the files) or all at once (`rows`), of any schema version
(`evalpipe.reading.questions`).
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator, Sequence
from functools import cached_property
from typing import Any

import polars as pl
import pyarrow as pa

from evalpipe.errors import InputError, first_line
from evalpipe.output import Stored, schema_version, stored_at
from evalpipe.reading.questions import Question, read_questions
from evalpipe.stores import Folder, Location

REQUIRED = ("_model", "_error_type")  # every evalpipe output has had these
CORRECTED = "_corrected.json"  # `evalpipe infer --record`'s shares (metadata: starts with _)
LINEAGE = ("_run_id", "_scored_at", "_state_hash", "_cached", "_reused")  # came later


class Output:
    """An output, opened (module docstring): `stored`, the output in its format; `folder` (a
    table's root) and `shown` (as named: the folder, or the table with its version or night),
    its `schema` (of a Delta night: the columns its rows were written with) and `questions`;
    `parts`, the Parquet files that hold its rows as paths in `folder.fs`, and `manifest`, read
    when first asked; `journal`: a run's journal is on this machine (its rows are not committed
    yet)."""

    def __init__(
        self, stored: Stored, schema: pa.Schema, questions: tuple[Question, ...], *,
        notes: tuple[str, ...] = (),
    ) -> None:  # fmt: skip
        self.stored, self.schema, self.questions, self.notes = stored, schema, questions, notes
        self.folder: Folder = stored.folder
        self.shown: str = stored.shown

    @cached_property
    def parts(self) -> tuple[str, ...]:
        with self._reading():
            return self.stored.files()

    @cached_property
    def manifest(self) -> dict[str, Any] | None:
        with self._reading():
            return self.stored.manifest()

    @property
    def journal(self) -> bool:
        return self.stored.journal

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
        """The partition named (`TABLE/dt=...`): its columns hold one value each."""
        return dict(self.stored.partition)

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
        return self.stored.sample()

    @property
    def corrected(self) -> dict[str, Any] | None:
        """The shares `evalpipe infer --record` kept (`_corrected.json`), if any (a table's
        night keeps none: its nights share one folder)."""
        if self.partition:
            return None
        try:
            raw = self.folder.read_bytes(CORRECTED)
            found = json.loads(raw) if raw is not None else None
        except (OSError, ValueError):
            return None
        return found if isinstance(found, dict) else None

    def keep_corrected(self, document: dict[str, Any]) -> str:
        """Keep `evalpipe infer`'s `document` beside the rows (`_corrected.json`, written
        whole), where `describe` and the report find it; returns where it went. A table's
        night keeps none (its nights share one folder): InputError."""
        if self.partition:
            raise InputError(f"--record: '{self.shown}' is one night of a table; name the table")
        data = json.dumps(document, indent=2, ensure_ascii=False, default=str).encode()
        self.folder.write_bytes(CORRECTED, data)
        return self.folder.shown_name(CORRECTED)

    def scan(self) -> pl.LazyFrame:
        """Every committed row, lazily (parts, never the journal or temporary files; a Delta
        table's version, or its night, with its partition columns)."""
        return self.stored.scan()

    @cached_property
    def rows(self) -> pl.DataFrame:
        """Every committed row, read at once (parts of older schemas promoted to one)."""
        with self._reading():
            arrow = self.stored.rows()
        rows = pl.from_arrow(arrow)
        assert isinstance(rows, pl.DataFrame)
        return rows


def open_output(location: Location, required: Sequence[str] = REQUIRED) -> Output:
    """Open `location` (a local directory, an object-store URI or a Delta table) as a job's
    output; InputError (one line, naming it) if it is not one, or has no column of `required`."""
    stored = stored_at(location)
    schema = stored.schema()
    missing = [name for name in required if name not in schema.names]
    if missing:
        raise InputError(
            f"output '{stored.shown}' is not an evalpipe output: {stored.subject} has no column "
            f"'{missing[0]}'"
        )
    questions, notes = read_questions(schema)
    return Output(stored, schema, questions, notes=notes)
