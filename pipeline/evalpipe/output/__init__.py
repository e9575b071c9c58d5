"""The output table and everything that makes it exactly-once: its schema, the journal,
Parquet parts, the manifest, resume and the one-run-per-output lock. Rows come in through
one door, `Sink`.
"""

from evalpipe.output.columns import SCHEMA_VERSION, describe, safe_names, schema_version
from evalpipe.output.delta import DeltaSink
from evalpipe.output.laketarget import DeltaTarget, delta_target
from evalpipe.output.lock import hold, output_lock, unused_removed
from evalpipe.output.manifest import MANIFEST, Ending
from evalpipe.output.outdir import JOURNAL, part_names
from evalpipe.output.sampled import SampleFile, weigh
from evalpipe.output.sink import Sink
from evalpipe.output.table import (
    LAYOUT_KEY,
    ArrowAnswers,
    RowResult,
    answer_types,
    output_schema,
    schema_layout,
    stale_ids,
    state_hashes,
)

__all__ = [
    "JOURNAL",
    "LAYOUT_KEY",
    "MANIFEST",
    "SCHEMA_VERSION",
    "ArrowAnswers",
    "DeltaSink",
    "DeltaTarget",
    "Ending",
    "RowResult",
    "SampleFile",
    "Sink",
    "answer_types",
    "delta_target",
    "describe",
    "hold",
    "output_lock",
    "output_schema",
    "part_names",
    "safe_names",
    "schema_layout",
    "schema_version",
    "stale_ids",
    "state_hashes",
    "unused_removed",
    "weigh",
]
