"""`evalpipe maintain`: an output kept fast by a command a scheduler runs.

Why both this and the step after each run: right after a run, the night it wrote is the only
one that changed and it is small, so the session keeps it then (`output.maintain`, on by
default: `evalpipe.session`, through the format's `keep`), and the table stays at one file a
night without anybody scheduling anything. A table written by other means, or a team that wants
maintenance out of the nightly window, runs the command weekly: it keeps every night and also
removes files no version names (a killed writer's).

The command holds the output as a run holds it (`output_held`: its OS lock, and the lease in a
shared tier), so maintenance never races a run on the same table. What it does to the table is
the format's (`Format.keep`: for Delta, a rewrite that changes no row, a checkpoint, and the
retention, `output.retention_days`, a week by default as Delta's).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from evalpipe.errors import ConfigError
from evalpipe.output.formats import FORMATS
from evalpipe.output.lease import output_held
from evalpipe.stores import Location, shown
from evalpipe.tier import TierAddress


def maintain_output(
    output: Location, *, retention_days: float, z_order: Sequence[str] = (),
    staging: Path | None = None, tier: TierAddress | None = None,
) -> dict[str, Any]:  # fmt: skip
    """The output at `output` kept by its format (every night compacted, a checkpoint, the
    retention; files no version names removed), with the output held as a run holds it
    (OutputLocked at once while a run writes it). Its figures; ConfigError for an output whose
    format keeps nothing (a folder of Parquet parts)."""
    found = next(f for f in FORMATS if f.find(output) is not None)  # Parquet takes any folder
    with output_held(output, staging, shown(output), tier):
        done = found.keep(output, None, retention_days=retention_days, z_order=z_order, full=True)
    if done is None:
        raise ConfigError(
            f"output '{shown(output)}' is {found.what}, which evalpipe does not keep: "
            "`evalpipe maintain` keeps tables (output.format: delta)"
        )
    return done
