"""The Parquet format: a sink's batches as part files and the manifest that lists them, and
such a folder as a reader opens it.

The default output (`output.format: parquet`) is a folder of part files, `part_rows` rows each,
beside `_manifest.json` (`evalpipe.output.manifest`): each batch the sink hands over becomes one
part (written whole and atomically, uploaded once to an object store), then the manifest is
rewritten. `open_parts` checks, before a run writes, that the folder is this job's to write.
`PARQUET` is the format as `evalpipe.output.formats` registers it: it takes any folder a reader
names that no other format claims (`ParquetStored`), a local one or an object-store prefix.

A resume cuts rows out of parts: each affected part is replaced once, by a new part of the same
sequence number holding the rows it keeps, then the old one is deleted (no file is rewritten or
renamed in place: objects cannot be). A kill in between leaves both; `outdir.superseded` finds
them and `reconcile` deletes the old one. The manifest is a description, never the truth: the
parts on disk are, and a resume rebuilds its part list from them.
"""

from __future__ import annotations

import uuid
from collections.abc import Collection, Mapping, Sequence
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from evalpipe.errors import InputError, ResumeConflict, first_line
from evalpipe.output.committer import fenced_out
from evalpipe.output.format import night_folders, reader_folder
from evalpipe.output.manifest import MANIFEST, Ending, Manifest, fence_of, read_manifest
from evalpipe.output.outdir import (
    check_resumable,
    clear,
    is_part,
    journal_path,
    part_name,
    part_names,
    refuse_foreign_parquet,
    remove_temp_files,
    sequence,
    superseded,
)
from evalpipe.output.resume import count, key_columns
from evalpipe.output.sampled import SampleFile
from evalpipe.output.space import opening, writing
from evalpipe.output.table import SAMPLE_WEIGHT, schema_json, with_sample_weight
from evalpipe.stores import Folder, Location

if TYPE_CHECKING:
    import polars as pl

PART_GLOB = "part-*.parquet"  # as users read the parts (README); outdir decides what a part is


class PartsCommitter:
    """One run's parts in an output folder, and its manifest (module docstring)."""

    def __init__(self, out: Folder, schema: pa.Schema, manifest: Manifest, *, run_id: str,
                 part_rows: int) -> None:  # fmt: skip
        """Keeps what `open_parts` found; does no I/O."""
        self.out = out
        self.schema = schema
        self.manifest = manifest
        self.run_id = run_id
        self.part_rows = part_rows
        self._next = 0  # the next part's sequence number
        self._parts: list[tuple[str, int]] = []  # (name, rows) of the parts `keys` read, in order
        self._keys: pa.Table | None = None
        self._superseded: list[str] = []
        self.fence = 0  # with a shared tier: the output lease's fencing token (`hold`)

    @property
    def row_schema(self) -> pa.Schema:
        return self.schema  # a sampled output's has `_sample_weight`

    def header(self) -> dict[str, Any]:
        return {}  # one journal for every part: emptied after each

    def keys(self, columns: list[str]) -> pa.Table:
        """`columns` of the rows in parts, read once; parts superseded by a cut are left out
        (and deleted by `reconcile`); ResumeConflict for a part that is not this job's."""
        if self._keys is None:
            names = part_names(self.out)
            self._superseded = superseded(self.out, names)
            names = [name for name in names if name not in self._superseded]
            tables = [self._part_keys(name, columns) for name in names]
            plain = pa.schema([self.schema.field(c) for c in columns])
            self._keys = pa.concat_tables([plain.empty_table(), *tables])
            self._parts = [(n, t.num_rows) for n, t in zip(names, tables, strict=True)]
        return self._keys

    def _part_keys(self, name: str, columns: list[str]) -> pa.Table:
        shown = self.out.shown_name(name)
        try:
            with self.out.open_parquet(name) as part:
                if not part.schema_arrow.equals(self.schema, check_metadata=False):
                    raise ResumeConflict(
                        f"output part '{shown}' has another schema than this job's; use "
                        "--restart to start over or choose another output.path"
                    )
                return part.read(columns=columns)
        except (pa.ArrowException, OSError) as exc:
            raise ResumeConflict(
                f"output part '{shown}' cannot be read ({first_line(exc)}); use --restart to "
                "start over"
            ) from None

    def unsent(self, header: Mapping[str, Any], rows: pa.Table) -> tuple[pa.Table | None, int]:
        """The journal's rows that are in no part (a kill between a part's rename and the
        journal's reset leaves copies in both; a part row cut to be retried counts too: the
        copy must not come back from the journal)."""
        ids = self.keys(key_columns(self.schema)).column(0)
        in_parts = pc.is_in(rows.column(0), ids)
        return rows.filter(pc.invert(in_parts)), count(in_parts)

    def hold(self, token: int) -> None:
        """With a shared tier: the manifest records the output lease's fencing `token`, and
        every commit from now on first reads the stored manifest and is refused (LeaseLost)
        once it records a larger one, a newer holder's; at once if it does already."""
        self.fence = token
        self._fenced()
        self.manifest.fence = token
        self.manifest.write(self.out)

    def _fenced(self) -> None:
        """LeaseLost when the stored manifest records a fencing token above ours. (A read
        before each write, not a conditional write: a part that lands in the moment between
        is a second copy of its rows, which the next resume cuts and sends once more.)"""
        if self.fence:
            seen = fence_of(read_manifest(self.out))
            if seen > self.fence:
                raise fenced_out(seen, self.fence, "its manifest records")

    def reconcile(self, drop: pa.ChunkedArray | pa.Array, retry: int, stale: int) -> int:
        """Delete temporary files and superseded parts, and replace each part that holds rows
        `drop` marks by the rows it keeps (each part at most once)."""
        self._fenced()
        removed = remove_temp_files(self.out)
        for name in self._superseded:
            self.out.delete(name)
        parts: dict[str, int] = {}
        offset = 0
        for name, rows in self._parts:
            kept, now = self._cut_part(name, pc.invert(drop.slice(offset, rows)))
            if kept:
                parts[now] = kept
            self._next = max(self._next, sequence(name) + 1)
            offset += rows
        self.manifest.parts = parts
        return removed

    def _cut_part(self, name: str, keep: pa.ChunkedArray | pa.Array) -> tuple[int, str]:
        """Replace part `name` by its kept rows: a new part of the same sequence number, then
        the old one deleted. Returns the rows kept and the part's name."""
        kept = count(keep)
        if kept == 0:
            self.out.delete(name)
        elif kept < len(keep):
            table = self.out.read_table(name, schema=self.schema).filter(keep)
            cut = part_name(sequence(name), uuid.uuid4().hex)
            self.out.write_parquet(cut, table.replace_schema_metadata(self.schema.metadata))
            self.out.delete(name)
            return kept, cut
        return kept, name

    def recover(self, rows: pa.Table | None, unsent: pa.Table | None) -> int:
        """The journal's rows as parts; then the manifest lists the parts on disk."""
        self._fenced()
        if rows is not None:
            self._commit_all(rows)
        self.out.sync()
        self.manifest.write(self.out)
        return 0 if rows is None else rows.num_rows

    def commit(self, rows: pa.Table, manifest: bool = True) -> None:
        self._fenced()
        name = part_name(self._next, uuid.uuid4().hex)
        self._next += 1
        self.out.write_parquet(name, rows)
        self.manifest.parts[name] = rows.num_rows
        if manifest:
            self._fenced()  # again: a host frozen while its part went up writes no manifest
            self.manifest.write(self.out)

    def _commit_all(self, rows: pa.Table) -> None:
        for start in range(0, rows.num_rows, self.part_rows):
            self.commit(rows.slice(start, self.part_rows), manifest=False)

    def finish(self, rows: pa.Table | None, how: Ending, summary: Mapping[str, Any]) -> None:
        self._fenced()
        if rows is not None:
            self._commit_all(rows)
        self.manifest.end_run(self.run_id, how, dict(summary))
        self.manifest.write(self.out)


def open_parts(
    out: Folder, journal: Path, schema: pa.Schema, fingerprint: str, *, run_id: str,
    restart: bool, part_rows: int, provenance: Mapping[str, str] | None,
) -> PartsCommitter:  # fmt: skip
    """The Parquet output in `out` for run `run_id`, created if need be; with `restart` our
    files in it are deleted first. ConfigError or ResumeConflict if it cannot be this job's.
    Records the run's start in the manifest. A run into a sampled output keeps its
    `_sample_weight` (the committer's `schema`)."""
    with opening(out, journal):
        refuse_foreign_parquet(out)
        stored = None if restart else read_manifest(out)
        if _sampled(stored):
            schema = with_sample_weight(schema)
        if not restart:
            check_resumable(out, journal, stored, fingerprint, schema)
    manifest = Manifest.carry_on(stored, fingerprint, schema_json(schema))
    manifest.begin_run(run_id, provenance)
    with writing(out, journal):
        if restart:
            clear(out, journal)
        manifest.write(out)  # a fresh output says whose it is before the first part lands
    return PartsCommitter(out, schema, manifest, run_id=run_id, part_rows=part_rows)


def _sampled(manifest: Mapping[str, Any] | None) -> bool:
    """Does the output hold a sample (`evalpipe estimate`'s `_sample_weight` column)?"""
    fields = (manifest or {}).get("schema") or []
    return any(isinstance(f, dict) and f.get("name") == SAMPLE_WEIGHT for f in fields)


def scan_files(fs: Any, paths: Sequence[str]) -> pl.LazyFrame:
    """Parquet files `paths` of filesystem `fs`, as one lazy scan: polars' own reader on a
    local disk, a pyarrow dataset on a store (its credential chain and `AWS_ENDPOINT_URL`
    apply as they do to a job)."""
    import polars as pl
    import pyarrow.fs as pafs

    if isinstance(fs, pafs.LocalFileSystem):
        return pl.scan_parquet(list(paths))
    import pyarrow.dataset as ds

    return pl.scan_pyarrow_dataset(ds.dataset(list(paths), filesystem=fs, format="parquet"))


class ParquetStored:
    """A folder of parts as a reader names it (`evalpipe.output.format.Stored`): its parts and
    manifest are read on opening (`schema`), its rows when asked."""

    def __init__(self, location: Location) -> None:
        self.location = location

    @property
    def partition(self) -> dict[str, str]:
        return {}  # a folder is never a partition (a night of a series is a folder)

    @cached_property
    def journal(self) -> bool:
        return journal_path(self.folder).exists()

    @cached_property
    def folder(self) -> Folder:
        return reader_folder(self.location)

    @property
    def shown(self) -> str:
        return self.folder.shown

    @cached_property
    def _parts(self) -> tuple[str, ...]:
        folder, where = self.folder, self.folder.shown
        try:
            kind = folder.fs.get_file_info(folder.root).type
            if kind == pafs.FileType.NotFound:
                raise InputError(
                    f"output '{where}' does not exist (no {PART_GLOB} files to read); give a "
                    "job's output.path"
                )
            if kind != pafs.FileType.Directory:
                raise InputError(f"output '{where}' is not a directory; give a job's output.path")
            return tuple(folder.path(name) for name in part_names(folder))
        except OSError as exc:
            raise InputError(f"output '{where}' cannot be read: {first_line(exc)}") from None

    @cached_property
    def _manifest(self) -> dict[str, Any] | None:
        return read_manifest(self.folder, reader=True)

    @property
    def subject(self) -> str:
        return f"part '{_base(self._parts[0])}'"

    def schema(self) -> pa.Schema:
        parts, manifest = self._parts, self._manifest  # an unreadable manifest: said here
        if not parts:
            what = "no committed rows yet" if manifest is not None else "not an evalpipe output"
            raise InputError(f"output '{self.shown}' holds no {PART_GLOB} files: {what}")
        try:
            schema = pq.read_schema(parts[0], filesystem=self.folder.fs)
        except (OSError, pa.ArrowException) as exc:
            shown = self.folder.shown_name(_base(parts[0]))
            raise InputError(f"part '{shown}' cannot be read: {first_line(exc)}") from None
        return schema

    def files(self) -> tuple[str, ...]:
        return self._parts

    def manifest(self) -> dict[str, Any] | None:
        return self._manifest

    def sample(self) -> dict[str, Any] | None:
        return SampleFile(self.folder.location).read()

    def scan(self) -> pl.LazyFrame:
        return scan_files(self.folder.fs, self._parts)

    def rows(self) -> pa.Table:
        tables = [pq.read_table(p, filesystem=self.folder.fs) for p in self._parts]
        return pa.concat_tables(tables, promote_options="permissive")

    def nights(self) -> list[tuple[str, str]]:
        return night_folders(str(self.location))


def _base(path: str) -> str:
    return path.rsplit("/", 1)[-1]


class ParquetFormat:
    """`output.format: parquet` (module docstring), as `evalpipe.output.formats` registers it."""

    name = "parquet"
    what = "a Parquet output"
    partitioned = False  # a scheduler's partition is a folder of its own (`OUT/dt=...`)

    def holds(self, names: Collection[str]) -> bool:
        return MANIFEST in names or any(is_part(name) for name in names)

    def open(
        self, out: Folder, journal: Path, schema: pa.Schema, fingerprint: str, *, run_id: str,
        partition: Mapping[str, str], restart: bool, part_rows: int,
        provenance: Mapping[str, str] | None, settings: Mapping[str, Any] | None = None,
    ) -> PartsCommitter:  # fmt: skip
        return open_parts(
            out, journal, schema, fingerprint, run_id=run_id, restart=restart,
            part_rows=part_rows, provenance=provenance,
        )  # fmt: skip

    def keep(
        self, location: Location, nights: Sequence[Mapping[str, str]] | None, *,
        retention_days: float, z_order: Sequence[str] = (), full: bool = False,
    ) -> None:  # fmt: skip
        return None  # a run writes whole parts and folds them: nothing to compact

    def find(self, location: Location) -> ParquetStored:
        return ParquetStored(location)  # any folder: asked last

    def version(self, location: Location) -> int | None:
        return None  # parts have no version


PARQUET = ParquetFormat()
