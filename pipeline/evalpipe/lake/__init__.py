"""Delta Lake: the one subsystem that talks to delta-rs (`deltalake`).

    table.py    open, write and read a table; its log (the log folder is named there only),
                commits, runs and the manifest made from its commit info
    commit.py   `DeltaCommitter`: an output sink's batches as Delta transactions, exactly once
    target.py   `DeltaTarget`: a table as a reader names it (`TABLE@VERSION`, `TABLE/dt=...`)
    upkeep.py   `maintain`: a night's files compacted, a checkpoint, the retention (vacuum)

It sits below `evalpipe.output`, whose door chooses Parquet or Delta for a job's output and puts
evalpipe's own schema into a table (`evalpipe.output.delta`); the one reader of outputs
(`evalpipe.reading`) opens tables through `delta_target`.
"""

from evalpipe.lake.commit import DeltaCommitter
from evalpipe.lake.table import (
    app_id,
    holds_log,
    load,
    query,
    runs,
    storage_options,
    stored_schema,
)
from evalpipe.lake.target import DeltaTarget, delta_target
from evalpipe.lake.upkeep import Upkept, active_files, maintain

__all__ = [
    "DeltaCommitter",
    "DeltaTarget",
    "Upkept",
    "active_files",
    "app_id",
    "delta_target",
    "holds_log",
    "load",
    "maintain",
    "query",
    "runs",
    "storage_options",
    "stored_schema",
]
