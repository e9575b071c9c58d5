"""The nightly table kept: maintenance after a run's commit, and `evalpipe maintain`.

Why both: right after a run, the night it wrote is the only one that changed, and it is small,
so compacting it then costs a second and keeps the table at one file a night without anybody
scheduling anything (`output.maintain`, on by default). A table written by other means, or
kept by a team that wants maintenance out of the nightly window, is kept by the command
(`maintain`), which a scheduler runs weekly: it compacts every night that has more than one
file and also removes files no version names (a killed writer's).

Both hold the output as a run holds it (`output_held`: its OS lock, and the lease in a shared
tier), so maintenance never races a run on the same table. What they do to the table is
`evalpipe.lake.maintain`'s: a rewrite that changes no row, a checkpoint, and the retention
(`output.retention_days`, a week by default as Delta's).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from evalpipe.errors import ConfigError, EvalpipeError, OutputError, first_line
from evalpipe.lake import Upkept, delta_target, maintain
from evalpipe.output.lease import output_held
from evalpipe.stores import Location, shown
from evalpipe.tier import TierAddress

if TYPE_CHECKING:
    from evalpipe.config import OutputConfig

HOURS_A_DAY = 24


def upkeep(
    location: Location, nights: Sequence[Mapping[str, str]] | None, *, retention_days: float,
    z_order: Sequence[str] = (), full: bool = False,
) -> Upkept:  # fmt: skip
    """`evalpipe.lake.maintain` of the Delta table at `location`, its errors as one line."""
    from deltalake.exceptions import DeltaError

    try:
        return maintain(location, nights, retention_hours=retention_days * HOURS_A_DAY,
                        z_order=z_order, full=full)  # fmt: skip
    except (DeltaError, OSError, ValueError) as exc:
        raise OutputError(
            f"output.path '{shown(location)}': the Delta table could not be maintained "
            f"({first_line(exc)}); its rows are as they were: run `evalpipe maintain` again"
        ) from None


def after_run(output: OutputConfig, warn: Callable[[str], None]) -> dict[str, Any] | None:
    """The night a run just committed kept (`output.maintain`, Delta only): its figures, or
    None when there is nothing to do. A failure is a warning: the run's rows are committed."""
    if output.format != "delta" or not output.maintain:
        return None
    try:
        done = upkeep(output.path, [output.partition], retention_days=output.retention_days,
                      z_order=output.z_order)  # fmt: skip
    except EvalpipeError as exc:
        warn(str(exc))
        return None
    return done.as_dict()


def maintain_output(
    output: Location, *, retention_days: float, z_order: Sequence[str] = (),
    staging: Path | None = None, tier: TierAddress | None = None,
) -> Upkept:  # fmt: skip
    """`evalpipe maintain`: every night of the Delta table at `output` compacted, the table
    checkpointed, files older than the retention and files no version names removed, with
    the output held as a run holds it (OutputLocked at once while a run writes it)."""
    target = delta_target(output)
    if target is None or target.partition or target.version is not None:
        raise ConfigError(
            f"output '{shown(output)}' is not the root of a Delta table: `evalpipe maintain` "
            "keeps `output.format: delta` tables, named by their root (a Parquet output is "
            "kept by its runs)"
        )
    output = target.location
    with output_held(output, staging, shown(output), tier):
        return upkeep(output, None, retention_days=retention_days, z_order=z_order, full=True)
