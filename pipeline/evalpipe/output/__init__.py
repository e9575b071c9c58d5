"""The output table and everything that makes it exactly-once: its schema, the journal, the
manifest, resume and the one-run-per-output lock (with a shared tier, also a lease in it). Rows
come in through one door, `Sink`, which `open_sink` opens as a job's `output` config says.

The format (Parquet parts `parquet`, a Delta table `delta/`) is behind one door, `formats`, for
writing and reading alike: the sink asks it for a committer by `output.format`, the one reader
(`evalpipe.reading`) for what is at a path (`stored_at`), a scheduler for `output_format(name)`.
"""

from evalpipe.output.columns import SCHEMA_VERSION, describe, safe_names, schema_version
from evalpipe.output.format import Stored
from evalpipe.output.formats import output_format, stored_at
from evalpipe.output.lease import output_held
from evalpipe.output.lock import hold, output_lock
from evalpipe.output.manifest import Ending
from evalpipe.output.outdir import part_names
from evalpipe.output.parquet import scan_files
from evalpipe.output.sampled import SampleFile, weigh
from evalpipe.output.sink import Sink, open_sink
from evalpipe.output.table import (
    ArrowAnswers,
    RowResult,
    answer_types,
    output_schema,
    schema_layout,
    stale_ids,
    state_hashes,
)
from evalpipe.output.upkeep import maintain_output

__all__ = [
    "SCHEMA_VERSION",
    "ArrowAnswers",
    "Ending",
    "RowResult",
    "SampleFile",
    "Sink",
    "Stored",
    "answer_types",
    "describe",
    "hold",
    "maintain_output",
    "open_sink",
    "output_format",
    "output_held",
    "output_lock",
    "output_schema",
    "part_names",
    "safe_names",
    "scan_files",
    "schema_layout",
    "schema_version",
    "stale_ids",
    "state_hashes",
    "stored_at",
    "weigh",
]
