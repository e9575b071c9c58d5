"""The output table and everything that makes it exactly-once: its schema, the journal,
Parquet parts, the manifest, resume and the one-run-per-output lock. Rows come in through
one door, `Sink`.
"""

from evalpipe.output.lock import hold, output_lock, unused_removed
from evalpipe.output.manifest import MANIFEST, Ending
from evalpipe.output.outdir import JOURNAL, part_names
from evalpipe.output.sink import Sink
from evalpipe.output.table import LAYOUT_KEY, RowResult, output_schema, stale_ids, state_hashes

__all__ = [
    "JOURNAL",
    "LAYOUT_KEY",
    "MANIFEST",
    "Ending",
    "RowResult",
    "Sink",
    "hold",
    "output_lock",
    "output_schema",
    "part_names",
    "stale_ids",
    "state_hashes",
    "unused_removed",
]
