"""What an output format is: the one shape every format module fills, writing and reading alike.

A format (Parquet parts, a Delta table, the next one) is one module behind `output`'s door
(`evalpipe.output.formats`), which asks it everything that depends on the format and nothing
else: the rest of evalpipe names a format only as `output.format` says it, or finds it by what
is at a path. A format gives

- for a run that writes (`Sink`): `holds` (whether a folder holds an output of this format: a run
  of another format refuses it) and `open`, a `Committer` (`evalpipe.output.committer`) that
  makes the sink's batches durable and reads back what the output holds, for the resume;
- for a reader (`evalpipe.reading`): `find`, the output a location names if it is of this format,
  as a `Stored`: its schema, the files that hold its rows, its manifest, its rows (lazily with
  polars, or at once with Arrow) and the nights it holds;
- for a scheduler (`evalpipe.session.run_scheduled`): `partitioned` (whether a run's partition
  is kept inside the table, else a folder per partition is made) and `version` (a table's
  version after a run, None where the format has none).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import pyarrow as pa
import pyarrow.fs as pafs

from evalpipe.errors import ConfigError, InputError, first_line
from evalpipe.stores import Folder, Location, parse_location, resolve, shown

if TYPE_CHECKING:
    import polars as pl

    from evalpipe.output.committer import Committer

NIGHT = "dt="  # a nightly series' folders (`out/dt=2026-11-27/`) and a table's night column


class Stored(Protocol):
    """An output as a reader names it, in its format. Nothing is read on finding it: `schema`
    opens it (InputError, one line, naming it, if it is not an output of this format)."""

    @property
    def folder(self) -> Folder:
        """Where its files are (a table's root)."""
        ...

    @property
    def shown(self) -> str:
        """The output as named (with a table's version or night)."""
        ...

    @property
    def partition(self) -> dict[str, str]:
        """The partition named (`TABLE/dt=...`): its columns hold one value each."""
        ...

    @property
    def journal(self) -> bool:
        """A run's journal is on this machine: its rows are not committed yet."""
        ...

    @property
    def subject(self) -> str:
        """How a message names what the schema was read from (`part 'part-00000-...'`)."""
        ...

    def schema(self) -> pa.Schema:
        """Its schema, with evalpipe's metadata (the question layout, the schema version)."""
        ...

    def files(self) -> tuple[str, ...]:
        """The Parquet files that hold exactly its rows, as paths in `folder.fs`."""
        ...

    def manifest(self) -> dict[str, Any] | None:
        """What `_manifest.json` says (of a table: the same facts from its commits)."""
        ...

    def sample(self) -> dict[str, Any] | None:
        """`evalpipe estimate`'s design and estimates, if the output keeps them."""
        ...

    def scan(self) -> pl.LazyFrame:
        """Every committed row, lazily (polars' own reader for the format)."""
        ...

    def rows(self) -> pa.Table:
        """Every committed row at once, of `schema`'s columns."""
        ...

    def nights(self) -> list[tuple[str, str]]:
        """The (date, location) of each night it holds: `dt=*` folders or `dt` partitions."""
        ...


class Format(Protocol):
    """One output format (module docstring). Registered once, in `evalpipe.output.formats`."""

    @property
    def name(self) -> str:
        """As `output.format` names it."""
        ...

    @property
    def what(self) -> str:
        """How a message names an output of it (`a Delta table`)."""
        ...

    @property
    def partitioned(self) -> bool:
        """A run's `output.partition` is kept inside the table (else: a folder per partition)."""
        ...

    def holds(self, names: Collection[str]) -> bool:
        """Whether a folder whose entries are `names` holds an output of this format."""
        ...

    def open(
        self, out: Folder, journal: Path, schema: pa.Schema, fingerprint: str, *, run_id: str,
        partition: Mapping[str, str], restart: bool, part_rows: int,
        provenance: Mapping[str, str] | None, settings: Mapping[str, Any] | None = None,
    ) -> Committer:  # fmt: skip
        """The output in `out` (created; no other format's in it) for run `run_id`, its journal
        at `journal`: ConfigError or ResumeConflict if it cannot be this job's; with `restart`
        our rows in it (of `partition`) are replaced. Records the run's start. `settings`: the
        job's `output` section, for a format's own keys (an Iceberg catalog)."""
        ...

    def keep(
        self, location: Location, nights: Sequence[Mapping[str, str]] | None, *,
        retention_days: float, z_order: Sequence[str] = (), full: bool = False,
    ) -> dict[str, Any] | None:  # fmt: skip
        """Keep the table at `location` fast: `nights` (None: all) compacted, a checkpoint, the
        retention applied (`full`: also files no version names); its figures, or None when
        the format keeps nothing (a folder of parts is as its runs left it). OutputError (one
        line) when it fails: no row changes."""
        ...

    def find(self, location: Location) -> Stored | None:
        """The output `location` names, if it is of this format (None: it is not)."""
        ...

    def version(self, location: Location) -> int | None:
        """The version of the table at `location` as it is now (None: the format has none, or
        it cannot be read: the rows are there, the version is a figure for a scheduler)."""
        ...


def reader_folder(location: Location) -> Folder:
    """`location` as a reader opens it: InputError for an unknown scheme or a store that
    cannot be reached."""
    try:
        return Folder(location, key="output")
    except ConfigError as exc:
        raise InputError(exc.message) from None


def night_folders(location: str) -> list[tuple[str, str]]:
    """The (date, location) of every `dt=*` folder directly in `location`, by date, on a local
    disk or an object store alike (a nightly series that a scheduler writes)."""
    fs, root = resolve(parse_location(location), InputError, "OUTPUT")
    try:
        infos = fs.get_file_info(pafs.FileSelector(root, allow_not_found=True))
    except OSError as exc:
        raise InputError(f"'{shown(location)}' cannot be listed: {first_line(exc)}") from None
    found = sorted(
        i.base_name for i in infos
        if i.type == pafs.FileType.Directory and i.base_name.startswith(NIGHT)
    )  # fmt: skip
    base = location.rstrip("/")
    return [(name[len(NIGHT) :], f"{base}/{name}") for name in found]
