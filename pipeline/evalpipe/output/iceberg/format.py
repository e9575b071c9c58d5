"""The Iceberg format (`output.format: iceberg`) as `evalpipe.output.formats` registers it: a
run's night of a table opened for writing, a table found for reading, its version.

`open_iceberg` opens a night of the table `output.table` in the catalog `output.catalog`, at
`output.path` (its location): the sink's committer is `IcebergCommitter`; its journal is where
the other formats keep theirs (in the folder when it is local, else in the staging folder). A
reader names the table by its location, `TABLE` or one night of it `TABLE/dt=2026-11-27`, and
finds it through the pointer the run left there (`evalpipe.output.iceberg.table`).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.parquet as pq

from evalpipe.output.format import NIGHT, reader_folder
from evalpipe.output.iceberg.commit import IcebergCommitter
from evalpipe.output.iceberg.table import (
    POINTER,
    arrow_schema,
    catalog,
    errors,
    named,
    night_rows,
    read_pointer,
    runs,
    where,
)
from evalpipe.output.outdir import journal_path, remove_journal_temps
from evalpipe.stores import Folder, Location, is_uri, parse_location, refusal

if TYPE_CHECKING:
    import polars as pl
    from pyiceberg.table import Table


def open_iceberg(
    out: Folder, journal: Path, schema: pa.Schema, fingerprint: str, *, run_id: str,
    partition: Mapping[str, str], restart: bool, provenance: Mapping[str, str] | None,
    settings: Mapping[str, Any],
) -> IcebergCommitter:  # fmt: skip
    """The Iceberg table `settings` name (`output.catalog`, `output.table`) at `out`, for run
    `run_id` writing `partition` (created, with its night partition, if need be). ConfigError
    or ResumeConflict if it cannot take this job's rows; with `restart` the night is replaced
    by the first commit."""
    properties, identifier = named(out, settings)
    committer = IcebergCommitter(
        out, schema, fingerprint, run_id=run_id, partition=partition,
        provenance=provenance or {}, catalog=properties, table=identifier,
    )  # fmt: skip
    committer.open(restart)
    remove_journal_temps(journal)
    if restart:
        journal.unlink(missing_ok=True)
    return committer


@dataclass(frozen=True)
class IcebergStored:
    """An Iceberg table as a reader names it: its location, or a night of it (`TABLE/dt=...`)."""

    root: Location
    partition: dict[str, str]
    shown: str
    subject = "it"

    @cached_property
    def folder(self) -> Folder:
        return reader_folder(self.root)

    @cached_property
    def journal(self) -> bool:
        return journal_path(self.folder, None, self.partition).exists()

    @cached_property
    def table(self) -> Table:
        with errors(self.folder, "", reading=True):
            found = read_pointer(self.folder)
            assert found is not None  # `find` saw it
            properties, identifier = found
            return catalog(properties).load_table(identifier)

    def schema(self) -> pa.Schema:
        with errors(self.folder, "", reading=True):
            written = None
            if self.partition:
                files = self.files()
                if files:
                    names = pq.read_schema(files[0], filesystem=self.folder.fs).names
                    written = set(names) | set(self.partition)
            return arrow_schema(self.table, written)

    def files(self) -> tuple[str, ...]:
        """The data files of the current snapshot (of the night), as paths in `folder.fs`."""
        tasks = self.table.scan(row_filter=where(self.partition)).plan_files()
        return tuple(_path(task.file.file_path) for task in tasks)

    def manifest(self) -> dict[str, Any]:
        table = self.table
        history = runs(table)
        summary = next((r["summary"] for r in reversed(history) if r.get("summary")), None)
        snapshot = table.current_snapshot()
        rows = sum(t.file.record_count for t in table.scan(row_filter=where(self.partition))
                   .plan_files())  # fmt: skip
        return {
            "format": "iceberg", "table_version": _version(table),
            "snapshot_id": snapshot.snapshot_id if snapshot else None,
            "partition_columns": [f.name for f in table.spec().fields], "runs": history,
            "summary": summary, "partition": self.partition or None, "rows": rows,
        }  # fmt: skip

    def sample(self) -> dict[str, Any] | None:
        return None  # `evalpipe estimate` writes a folder of parts

    def scan(self) -> pl.LazyFrame:
        import polars as pl

        frame = pl.scan_iceberg(self.table)
        for key, value in self.partition.items():
            frame = frame.filter(pl.col(key) == value)
        return frame

    def rows(self) -> pa.Table:
        with errors(self.folder, "", reading=True):
            select = self.schema().names if self.partition else None
            return night_rows(self.table, self.partition, select)

    def nights(self) -> list[tuple[str, str]]:
        """The table's nights (`dt` partitions), by date, each named `TABLE/dt=DATE`; a night
        named holds none (it is one)."""
        if self.partition:
            return []
        column = NIGHT.rstrip("=")
        with errors(self.folder, "", reading=True):
            found = self.table.inspect.partitions().column("partition").to_pylist()
        dates = sorted({p[column] for p in found if p and p.get(column) is not None})
        return [(date, f"{self.shown}/{NIGHT}{date}") for date in dates]


def _version(table: Table) -> int:
    """The table's version: the sequence number of its last commit (Iceberg v2's)."""
    return int(getattr(table.metadata, "last_sequence_number", 0))


def _path(uri: str) -> str:
    """A data file's URI as a path in its filesystem (pyarrow's: no scheme)."""
    return uri.removeprefix("file://") if uri.startswith("file://") else uri.split("://", 1)[-1]


def iceberg_stored(location: Location) -> IcebergStored | None:
    """`location` as an Iceberg table evalpipe wrote (`TABLE`, `TABLE/dt=...`), None when it
    names none. A URI with credentials in it is refused before any store is asked."""
    refused = refusal(location) if isinstance(location, str) and is_uri(location) else None
    if refused is not None:
        from evalpipe.errors import InputError

        raise InputError(f"output: {refused}")
    text = str(location).rstrip("/")
    if _pointed(text):
        return IcebergStored(parse_location(text), {}, text)
    parent, _, name = text.rpartition("/")
    key, eq, value = name.partition("=")
    if parent and eq and key and _pointed(parent):
        return IcebergStored(parse_location(parent), {key: value}, text)
    return None


def _pointed(root: str) -> bool:
    try:
        return reader_folder(parse_location(root)).read_bytes(POINTER) is not None
    except Exception:  # not a place, or one that cannot be read: not an Iceberg table of ours
        return False


class IcebergFormat:
    """`output.format: iceberg` (module docstring)."""

    name = "iceberg"
    what = "an Iceberg table"
    partitioned = True  # a run's partition is the table's (`output.partition`)

    def holds(self, names: Collection[str]) -> bool:
        return POINTER in names

    def open(
        self, out: Folder, journal: Path, schema: pa.Schema, fingerprint: str, *, run_id: str,
        partition: Mapping[str, str], restart: bool, part_rows: int,
        provenance: Mapping[str, str] | None, settings: Mapping[str, Any] | None = None,
    ) -> IcebergCommitter:  # fmt: skip
        return open_iceberg(
            out, journal, schema, fingerprint, run_id=run_id, partition=partition,
            restart=restart, provenance=provenance, settings=settings or {},
        )  # fmt: skip

    def keep(
        self, location: Location, nights: Sequence[Mapping[str, str]] | None, *,
        retention_days: float, z_order: Sequence[str] = (), full: bool = False,
    ) -> None:  # fmt: skip
        return None  # a night is one file per batch; compaction is the catalog's (not yet ours)

    def find(self, location: Location) -> IcebergStored | None:
        return iceberg_stored(location)

    def version(self, location: Location) -> int | None:
        found = iceberg_stored(location)
        try:
            return None if found is None else _version(found.table)
        except Exception:  # not one that opens: the version is a figure
            return None


ICEBERG = IcebergFormat()
