"""A Delta table as a reader names it: `TABLE`, `TABLE@VERSION`, `TABLE/dt=NIGHT`.

Every reader of an output (`ep.read`, `describe`, `diff`, `agree`, `report`) may be given a
Delta table (`output.format: delta`) instead of a folder of Parquet parts; the one reader
(`evalpipe.reading`) asks `output`'s door what a location names, and the Delta format answers
with `delta_target`: a `DeltaTarget` (an `evalpipe.output.format.Stored`) gives its schema,
rows, files, runs and nights through the one module that talks to delta-rs
(`evalpipe.output.delta.table`).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING, Any

import orjson
import pyarrow as pa

from evalpipe.errors import InputError, first_line
from evalpipe.output.delta.schema import arrow_schema
from evalpipe.output.delta.table import (
    count_rows,
    fragments,
    has_log,
    load,
    manifest,
    query,
    storage_options,
    stored_schema,
)
from evalpipe.output.format import night_folders, reader_folder
from evalpipe.output.table import LAYOUT_KEY
from evalpipe.stores import Folder, Location, is_uri, parse_location, refusal

if TYPE_CHECKING:
    import polars as pl
    from deltalake import DeltaTable

NIGHT = "dt"  # the partition column of a nightly table


@dataclass(frozen=True)
class DeltaTarget:
    """A Delta table as a reader names it: `TABLE`, `TABLE@VERSION` (time travel), or a
    partition of it, `TABLE/dt=2026-11-27` (also `TABLE/dt=2026-11-27@VERSION`)."""

    location: Location  # the table's root
    version: int | None
    partition: dict[str, str]
    shown: str
    journal = False  # a Delta run's journal is never read as the table's
    subject = "it"

    @cached_property
    def folder(self) -> Folder:
        return reader_folder(self.location)

    def table(self) -> DeltaTable:
        return load(self.location, self.version)

    def storage_options(self) -> dict[str, str]:
        """What delta-rs (or polars' `scan_delta`) needs to open it (`storage_options`)."""
        return storage_options(self.location)

    def schema(self) -> pa.Schema:
        """The schema at the version named (`arrow_schema`); of a partition, only the columns
        its rows were written with, and the layout of the questions they answer."""
        self.folder  # noqa: B018 (an unknown scheme is an InputError before delta-rs is asked)
        try:
            return self._schema
        except Exception as exc:  # deltalake's errors: one line, whatever the cause
            raise InputError(f"output '{self.shown}' cannot be read: {first_line(exc)}") from None

    @cached_property
    def _schema(self) -> pa.Schema:
        schema = arrow_schema(stored_schema(self.table()))
        names = self.written()
        if names is None:
            return schema
        layout = [e for e in orjson.loads((schema.metadata or {}).get(LAYOUT_KEY, b"[]"))
                  if any(n.startswith(f"{e[0]}__") for n in names)]  # fmt: skip
        meta = {**(schema.metadata or {}), LAYOUT_KEY: orjson.dumps(layout)}
        return pa.schema([f for f in schema if f.name in names], metadata=meta)

    def written(self) -> set[str] | None:
        """Of a partition, the columns its rows were written with and its partition columns (a
        question added on a later night is not one of an earlier's); None: the whole table."""
        if not self.partition:
            return None
        found = fragments(self.table(), self.location, self.partition)
        if not found:
            return None
        return set(found[0][1].physical_schema.names) | set(self.partition)

    def rows(self) -> pa.Table:
        """Every row of the table (of the partition: the columns its rows were written with),
        at the version named."""
        columns = self._schema.names if self.partition else None
        return query(self.table(), self.location, columns, self.partition)

    def scan(self) -> pl.LazyFrame:
        """Every row, lazily, with polars' own Delta reader (a night: filtered to it)."""
        import polars as pl

        frame = pl.scan_delta(
            str(self.location), version=self.version,
            storage_options=self.storage_options() or None,
        )  # fmt: skip
        for key, value in self.partition.items():
            frame = frame.filter(pl.col(key) == value)
        return frame

    def sample(self) -> dict[str, Any] | None:
        return None  # `evalpipe estimate` writes a folder of parts

    def manifest(self) -> dict[str, Any]:
        """What `_manifest.json` says of a Parquet output (`table.manifest`), and the rows of
        the version (and partition) named."""
        table = self.table()
        rows = count_rows(table, self.location, self.partition)
        found = manifest(table, self.location)
        return {**found, "partition": self.partition or None, "rows": rows}

    def files(self) -> tuple[str, ...]:
        """The Parquet files of the version (and partition) named, as paths in `folder.fs`:
        read them and you read exactly its rows (delta-rs writes no deletion vectors)."""
        found = fragments(self.table(), self.location, self.partition)
        return tuple(self.folder.path(f) for f, _ in found)

    def nights(self) -> list[tuple[str, str]]:
        """The table's `dt` partitions (`TABLE/dt=...`, as a reader names one), by date; of a
        night named, the `dt=*` folders in it, as of any folder."""
        if self.partition:
            return night_folders(self.shown)
        found = sorted(
            (dict(p) for p in self.table().partitions()), key=lambda p: tuple(p.values())
        )
        dates = [p[NIGHT] for p in found if NIGHT in p]
        return [(date, f"{self.shown}/{NIGHT}={date}") for date in dates]


def delta_target(location: Location) -> DeltaTarget | None:
    """`location` as a Delta table (see `DeltaTarget`), None when it names none. A URI with
    credentials in it is refused before any store is asked (`evalpipe.stores.refusal`)."""
    refused = refusal(location) if isinstance(location, str) and is_uri(location) else None
    if refused is not None:
        raise InputError(f"output: {refused}")
    text = str(location).rstrip("/")
    base, at, version = text.rpartition("@")
    number = int(version) if at and version.isdigit() else None
    root = base if number is not None else text
    if has_log(root):
        return DeltaTarget(parse_location(root), number, {}, text)
    parent, _, name = root.rpartition("/")
    key, eq, value = name.partition("=")
    if parent and eq and key and has_log(parent):
        return DeltaTarget(parse_location(parent), number, {key: value}, text)
    return None
