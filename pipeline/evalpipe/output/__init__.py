"""The output table and everything that makes it exactly-once: its schema, the journal,
Parquet parts, the manifest, resume and the one-run-per-output lock. Rows come in through
one door, `Sink`.
"""

from evalpipe.output.columns import SCHEMA_VERSION, describe, safe_names, schema_version
from evalpipe.output.delta import DeltaSink
from evalpipe.output.lake import DeltaTarget, delta_target
from evalpipe.output.lake import storage_options as delta_options
from evalpipe.output.lock import hold, output_lock, unused_removed
from evalpipe.output.manifest import MANIFEST, Ending
from evalpipe.output.outdir import JOURNAL, part_names
from evalpipe.output.sampled import make_sampled, read_sample, weigh, write_sample
from evalpipe.output.sink import Sink
from evalpipe.output.table import (
    LAYOUT_KEY,
    META_FIELDS,
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
    "META_FIELDS",
    "SCHEMA_VERSION",
    "ArrowAnswers",
    "DeltaSink",
    "DeltaTarget",
    "Ending",
    "RowResult",
    "Sink",
    "answer_types",
    "delta_options",
    "delta_target",
    "describe",
    "hold",
    "make_sampled",
    "output_lock",
    "output_schema",
    "part_names",
    "read_sample",
    "safe_names",
    "schema_layout",
    "schema_version",
    "stale_ids",
    "state_hashes",
    "unused_removed",
    "weigh",
    "write_sample",
]
