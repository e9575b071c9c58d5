"""A Delta table as a reader names it: `TABLE`, `TABLE@VERSION`, `TABLE/dt=NIGHT`.

Every reader of an output (`ep.read`, `describe`, `diff`, `agree`, `report`) may be given a
Delta table (`output.format: delta`) instead of a folder of Parquet parts; `delta_target` tells
which a location names, and a `DeltaTarget` gives its schema, rows, files, runs and nights
through the one module that talks to delta-rs (`evalpipe.output.lake`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson
import pyarrow as pa

from evalpipe.output.lake import (
    DELTA_LOG,
    arrow_schema,
    fragments,
    is_table,
    load,
    manifest,
    query,
    storage_options,
)
from evalpipe.output.table import LAYOUT_KEY
from evalpipe.stores import Location, is_uri, parse_location

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
        """The table's schema (`arrow_schema`); of a partition, only the columns its rows
        were written with (a question added on a later night is not one of an earlier's)."""
        table = self.table()
        schema = arrow_schema(table)
        found = fragments(table, self.location, self.partition) if self.partition else []
        if not found:
            return schema
        present = set(found[0][1].physical_schema.names) | set(self.partition)
        return _narrowed(schema, present)

    def rows(self) -> pa.Table:
        """Every row of the table (of the partition), at the version named, in the columns
        of `schema`."""
        rows = query(self.table(), self.location, None, self.partition)
        return rows.select(self.schema().names) if self.partition else rows

    def manifest(self) -> dict[str, Any]:
        return {**manifest(self.table(), self.location), "partition": self.partition or None}

    def files(self) -> list[str]:
        """The Parquet files of the version (and partition) named, relative to the table's
        root: read them and you read exactly its rows (delta-rs writes no deletion vectors)."""
        return [f for f, _ in fragments(self.table(), self.location, self.partition)]

    def nights(self) -> list[dict[str, str]]:
        """The table's partitions (each a `{column: value}`), sorted by their values."""
        found = self.table().partitions()
        return sorted((dict(p) for p in found), key=lambda p: tuple(p.values()))


def _narrowed(schema: pa.Schema, names: set[str]) -> pa.Schema:
    """`schema`'s fields in `names`, and the layout of the questions they answer."""
    layout = [e for e in orjson.loads((schema.metadata or {}).get(LAYOUT_KEY, b"[]"))
              if any(n.startswith(f"{e[0]}__") for n in names)]  # fmt: skip
    meta = {**(schema.metadata or {}), LAYOUT_KEY: orjson.dumps(layout)}
    return pa.schema([f for f in schema if f.name in names], metadata=meta)


def delta_target(location: Location) -> DeltaTarget | None:
    """`location` as a Delta table (see `DeltaTarget`), None when it names none."""
    text = str(location).rstrip("/")
    base, at, version = text.rpartition("@")
    number = int(version) if at and version.isdigit() else None
    root = base if number is not None else text
    if _has_log(root):
        return DeltaTarget(parse_location(root), number, {}, text)
    parent, _, name = root.rpartition("/")
    key, eq, value = name.partition("=")
    if parent and eq and key and _has_log(parent):
        return DeltaTarget(parse_location(parent), number, {key: value}, text)
    return None


def _has_log(root: str) -> bool:
    location = parse_location(root)
    if not is_uri(location):
        return (Path(location) / DELTA_LOG).is_dir()
    try:
        return is_table(location)
    except Exception:
        return False
