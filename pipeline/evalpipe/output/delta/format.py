"""The Delta format (`output.format: delta`) as `evalpipe.output.formats` registers it: a run's
partition of a table opened for writing, a table found for reading, its version for a scheduler.

`open_delta` opens a partition of a table for one run: the sink's committer is `DeltaCommitter`
(`evalpipe.output.delta.commit`), its journal is a local file (`_journal[-<partition
digest>].bin`) in the table's folder when it is local (delta-rs ignores files it did not
commit), else in the output's staging folder. A reader's `TABLE`, `TABLE@VERSION` or
`TABLE/dt=...` is a `DeltaTarget` (`evalpipe.output.delta.target`).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa

from evalpipe.output.delta.commit import DeltaCommitter
from evalpipe.output.delta.schema import check_compatible, delta_schema
from evalpipe.output.delta.table import holds_log, load
from evalpipe.output.delta.target import DeltaTarget, delta_target
from evalpipe.output.delta.upkeep import keep
from evalpipe.output.outdir import remove_journal_temps
from evalpipe.output.space import opening
from evalpipe.stores import Folder, Location


def open_delta(
    out: Folder, journal: Path, schema: pa.Schema, fingerprint: str, *, run_id: str,
    partition: Mapping[str, str], restart: bool, provenance: Mapping[str, str] | None,
) -> DeltaCommitter:  # fmt: skip
    """The Delta table in `out` for run `run_id`, writing `partition` (created with the first
    commit if need be). ConfigError if the table cannot take this job's rows
    (`check_compatible`). With `restart` the partition (the whole table without one) is
    replaced by the first commit."""
    committer = DeltaCommitter(
        out, delta_schema(schema, partition), fingerprint, run_id=run_id, partition=partition,
        provenance=provenance or {}, row_schema=schema,
    )  # fmt: skip
    with opening(out, journal):
        stored = committer.load()
        if stored is not None:
            keys = committer.partition_columns()
            check_compatible(out.shown, stored, keys, committer.schema, partition)
            if not restart:
                committer.check_resumable()
    remove_journal_temps(journal)
    if restart:
        journal.unlink(missing_ok=True)
    committer.start(restart)
    return committer


class DeltaFormat:
    """`output.format: delta` (module docstring)."""

    name = "delta"
    what = "a Delta table"
    partitioned = True  # a run's partition is the table's (`output.partition`)

    def holds(self, names: Collection[str]) -> bool:
        return holds_log(names)

    def open(
        self, out: Folder, journal: Path, schema: pa.Schema, fingerprint: str, *, run_id: str,
        partition: Mapping[str, str], restart: bool, part_rows: int,
        provenance: Mapping[str, str] | None, settings: Mapping[str, Any] | None = None,
    ) -> DeltaCommitter:  # fmt: skip
        return open_delta(
            out, journal, schema, fingerprint, run_id=run_id, partition=partition,
            restart=restart, provenance=provenance,
        )  # fmt: skip

    def keep(
        self, location: Location, nights: Sequence[Mapping[str, str]] | None, *,
        retention_days: float, z_order: Sequence[str] = (), full: bool = False,
    ) -> dict[str, Any]:  # fmt: skip
        return keep(location, nights, retention_days=retention_days, z_order=z_order, full=full)

    def find(self, location: Location) -> DeltaTarget | None:
        return delta_target(location)

    def version(self, location: Location) -> int | None:
        try:
            return int(load(location).version())
        except Exception:  # not a Delta table, or not one that opens: the version is a figure
            return None


DELTA = DeltaFormat()
