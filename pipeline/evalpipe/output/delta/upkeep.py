"""Keeping a nightly Delta table fast: compaction, a checkpoint, and retention (delta-rs).

A nightly job appends one commit and one data file per part (`output.part_rows`): a night of
twenty parts is twenty files, and every scan of the table opens each of them (on an object
store, a request each) and replays a log of one JSON file per commit. After a year the table
is thousands of small files and every query pays for them. Delta's own answer, run by hand
in Spark or Databricks, is OPTIMIZE, a checkpoint and VACUUM; this module is that answer,
through delta-rs, for one night (after the run that wrote it) or for every night (a command a
scheduler runs):

- compaction (`optimize.compact`, or `optimize.z_order` by the columns given) rewrites a
  night's small files into one per 100 MB (delta-rs's target size) in one commit that changes
  no row (`dataChange: false`): readers see the same rows before and after, the application
  transactions (`txn`: what a resume compares its journal with) are untouched, and a process
  killed before that commit leaves only files no version names, which a full vacuum removes;
- a checkpoint (`create_checkpoint`): the table's state in one Parquet file, so a reader
  replays no JSON commit older than it;
- retention: `vacuum` deletes the data files no version younger than `retention_hours` needs
  (the files compaction replaced, once that old), and with `full` also files no version names
  at all (a killed writer's); `cleanup_metadata` deletes the log's JSON files older than the
  table's `delta.logRetentionDuration` (Delta's default, 30 days) that a checkpoint covers.
  The retention is given to vacuum itself; the table's own `delta.deletedFileRetentionDuration`
  is left as it is (delta-rs 1.6's `set_table_properties` holds Python's GIL while it waits on
  the store). Files whose names start with `_` or `.` (a local output's journal and lock) are
  never touched by vacuum.

Maintenance commits carry `UPKEEP_KEY` in their info, never `evalpipe`'s run facts
(`table.COMMIT_KEY`): the history of runs (`table.runs`) and the last fingerprint of a night
are the runs' own.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from evalpipe.errors import ConfigError, OutputError, first_line
from evalpipe.output.delta.table import load, partition_columns
from evalpipe.output.delta.target import delta_target
from evalpipe.stores import Location, shown

if TYPE_CHECKING:
    from deltalake import DeltaTable

UPKEEP_KEY = "evalpipe.upkeep"  # commit info of a maintenance commit
HOURS_A_DAY = 24


@dataclass(frozen=True)
class Upkept:
    """What one maintenance did: active data files before and after, files compaction
    rewrote, the checkpoint's version, files vacuum deleted, and how long it took."""

    files_before: int
    files_after: int
    nights: int
    rewritten: int
    checkpoint: int
    vacuumed: int
    seconds: float

    def as_dict(self) -> dict[str, Any]:
        return {
            "files_before": self.files_before,
            "files_after": self.files_after,
            "nights_compacted": self.nights,
            "files_rewritten": self.rewritten,
            "checkpoint_version": self.checkpoint,
            "files_vacuumed": self.vacuumed,
            "seconds": round(self.seconds, 3),
        }


def keep(
    location: Location, nights: Sequence[Mapping[str, str]] | None, *, retention_days: float,
    z_order: Sequence[str] = (), full: bool = False,
) -> dict[str, Any]:  # fmt: skip
    """`maintain` of the table whose root `location` names (ConfigError for a night or a
    version of it: the table is kept whole), its figures; delta-rs's errors as one line."""
    from deltalake.exceptions import DeltaError

    target = delta_target(location)
    if target is None or target.partition or target.version is not None:
        raise ConfigError(
            f"output '{shown(location)}' is not the root of a Delta table: name the table "
            "itself (its folder or URI), not a night or a version of it"
        )
    try:
        done = maintain(target.location, nights, retention_hours=retention_days * HOURS_A_DAY,
                        z_order=z_order, full=full)  # fmt: skip
    except (DeltaError, OSError, ValueError) as exc:
        raise OutputError(
            f"output.path '{shown(location)}': the Delta table could not be kept "
            f"({first_line(exc)}); its rows are as they were: run `evalpipe maintain` again"
        ) from None
    return done.as_dict()


def active_files(table: DeltaTable) -> Counter[tuple[str, ...]]:
    """How many data files each partition (its values, in the table's partition order) has
    in the table's current version (`()`: an unpartitioned table)."""
    keys = partition_columns(table)
    actions = pa.table(table.get_add_actions(flatten=True))
    if not keys:
        return Counter({(): actions.num_rows})
    columns = [actions.column(f"partition.{k}").to_pylist() for k in keys]
    return Counter(tuple(str(v) for v in values) for values in zip(*columns, strict=True))


def maintain(
    location: Location,
    nights: Sequence[Mapping[str, str]] | None = None,
    *,
    retention_hours: float = 7 * HOURS_A_DAY,
    z_order: Sequence[str] = (),
    full: bool = False,
) -> Upkept:
    """Compact `nights` (each `{column: value}`; None: every partition with more than one
    file, or the whole table when it has no partition), checkpoint, set the retention, vacuum
    (with `full`, also files no version names) and clean the log. `z_order`: rewrite each
    night ordered by these columns instead (a night of one file is left as it is)."""
    started = time.monotonic()
    table = load(location)
    keys = partition_columns(table)
    before = active_files(table)
    todo = _chosen(before, keys, nights)
    rewritten = 0
    for night in todo:
        rewritten += _compact(table, night, z_order)
    table.update_incremental()
    table.create_checkpoint()
    checkpoint = table.version()
    table.cleanup_metadata()
    vacuumed = table.vacuum(
        retention_hours=int(retention_hours), dry_run=False, enforce_retention_duration=False,
        full=full, commit_properties=_props("vacuum"),
    )  # fmt: skip
    table.update_incremental()
    after = active_files(table)
    return Upkept(
        sum(before.values()), sum(after.values()), len(todo), rewritten, checkpoint,
        len(vacuumed), time.monotonic() - started,
    )  # fmt: skip


def _chosen(
    files: Counter[tuple[str, ...]], keys: list[str], nights: Sequence[Mapping[str, str]] | None
) -> list[dict[str, str]]:
    """The partitions to compact: those named that have more than one file, or all such."""
    if nights is None:
        return [dict(zip(keys, values, strict=True)) for values, n in sorted(files.items())
                if n > 1]  # fmt: skip
    chosen = []
    for night in nights:
        values = tuple(night.get(k, "") for k in keys)
        if files.get(values, 0) > 1:
            chosen.append(dict(night))
    return chosen


def _compact(table: DeltaTable, night: Mapping[str, str], z_order: Sequence[str]) -> int:
    """One night's files rewritten (compacted, or z-ordered): how many files it replaced."""
    from deltalake import WriterProperties

    filters: Any = [(k, "=", v) for k, v in night.items()] or None
    common: dict[str, Any] = {
        "partition_filters": filters,
        # the committer's codec (delta-rs writes snappy by default)
        "writer_properties": WriterProperties(compression="ZSTD"),
        "commit_properties": _props("compact", night),
    }
    if z_order:
        metrics = table.optimize.z_order(list(z_order), **common)
    else:
        metrics = table.optimize.compact(**common)
    return int(metrics.get("numFilesRemoved") or 0)


def _props(what: str, night: Mapping[str, str] | None = None) -> Any:
    from deltalake import CommitProperties

    info: dict[str, Any] = {"step": what}
    if night:
        info["partition"] = dict(night)
    return CommitProperties(custom_metadata={UPKEEP_KEY: info})
