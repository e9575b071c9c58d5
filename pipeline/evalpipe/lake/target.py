"""A Delta table as a reader names it: `TABLE`, `TABLE@VERSION`, `TABLE/dt=NIGHT`.

Every reader of an output (`ep.read`, `describe`, `diff`, `agree`, `report`) may be given a
Delta table (`output.format: delta`) instead of a folder of Parquet parts; the one reader
(`evalpipe.reading`) asks `delta_target` which a location names, and a `DeltaTarget` gives its
schema, rows, files, runs and nights through the one module that talks to delta-rs
(`evalpipe.lake.table`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from evalpipe.errors import InputError
from evalpipe.lake.table import (
    count_rows,
    fragments,
    has_log,
    load,
    manifest,
    query,
    storage_options,
    stored_schema,
)
from evalpipe.stores import Location, is_uri, parse_location, refusal

if TYPE_CHECKING:
    from deltalake import DeltaTable


@dataclass(frozen=True)
class DeltaTarget:
    """A Delta table as a reader names it: `TABLE`, `TABLE@VERSION` (time travel), or a
    partition of it, `TABLE/dt=2026-11-27` (also `TABLE/dt=2026-11-27@VERSION`)."""

    location: Location  # the table's root
    version: int | None
    partition: dict[str, str]
    shown: str

    def table(self) -> DeltaTable:
        return load(self.location, self.version)

    def storage_options(self) -> dict[str, str]:
        """What delta-rs (or polars' `scan_delta`) needs to open it (`storage_options`)."""
        return storage_options(self.location)

    def schema(self) -> pa.Schema:
        """The table's schema as stored, with its field metadata (`evalpipe.output.delta`
        reads evalpipe's own metadata back from it)."""
        return stored_schema(self.table())

    def written(self) -> set[str] | None:
        """Of a partition, the columns its rows were written with and its partition columns (a
        question added on a later night is not one of an earlier's); None: the whole table."""
        if not self.partition:
            return None
        found = fragments(self.table(), self.location, self.partition)
        if not found:
            return None
        return set(found[0][1].physical_schema.names) | set(self.partition)

    def rows(self, columns: list[str] | None = None) -> pa.Table:
        """Every row of the table (of the partition), at the version named; `columns`: these
        only (None: all)."""
        return query(self.table(), self.location, columns, self.partition)

    def manifest(self) -> dict[str, Any]:
        """What `_manifest.json` says of a Parquet output (`table.manifest`), and the rows of
        the version (and partition) named."""
        table = self.table()
        rows = count_rows(table, self.location, self.partition)
        found = manifest(table, self.location)
        return {**found, "partition": self.partition or None, "rows": rows}

    def files(self) -> list[str]:
        """The Parquet files of the version (and partition) named, relative to the table's
        root: read them and you read exactly its rows (delta-rs writes no deletion vectors)."""
        return [f for f, _ in fragments(self.table(), self.location, self.partition)]

    def nights(self) -> list[dict[str, str]]:
        """The table's partitions (each a `{column: value}`), sorted by their values."""
        found = self.table().partitions()
        return sorted((dict(p) for p in found), key=lambda p: tuple(p.values()))


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
