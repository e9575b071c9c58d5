"""The output table and everything that makes it exactly-once: its schema, the journal,
Parquet parts or a Delta table (`evalpipe.lake` below), the manifest, resume and the
one-run-per-output lock (with a shared tier, also a lease in it). Rows come in through one door,
`Sink`, which `open_sink` opens as a job's `output` config says.
"""

from evalpipe.output.columns import SCHEMA_VERSION, describe, safe_names, schema_version
from evalpipe.output.delta import target_schema
from evalpipe.output.lease import output_held
from evalpipe.output.lock import hold, output_lock
from evalpipe.output.manifest import Ending, read_manifest
from evalpipe.output.outdir import journal_path, part_names
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
from evalpipe.output.upkeep import after_run, maintain_output

__all__ = [
    "SCHEMA_VERSION",
    "ArrowAnswers",
    "Ending",
    "RowResult",
    "SampleFile",
    "Sink",
    "after_run",
    "answer_types",
    "describe",
    "hold",
    "journal_path",
    "maintain_output",
    "open_sink",
    "output_held",
    "output_lock",
    "output_schema",
    "part_names",
    "read_manifest",
    "safe_names",
    "schema_layout",
    "schema_version",
    "stale_ids",
    "state_hashes",
    "target_schema",
    "weigh",
]
