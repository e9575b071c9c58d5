"""The seam between the sink and its format: what a committer does with the sink's batches.

`Sink` owns everything a format need not know: the journal and its timing, gathering rows into
batches of `part_rows`, the resume's judgement of which rows to keep, cut or send again, and the
one-line errors. A committer makes a batch durable in its format and reads back what it holds:

- `PartsCommitter` (`evalpipe.output.parquet`): a batch is a Parquet part file, and the
  manifest (`_manifest.json`) says which parts and runs the output has;
- `DeltaCommitter` (`evalpipe.output.delta`): a batch is one Delta transaction carrying the
  job's application transaction, and each commit's info says what the manifest would.

A format's `open` (`evalpipe.output.format.Format`) gives the sink its committer.

The sink calls, in a run's order: `keys` and `unsent` (before a resume changes anything),
`reconcile` and `recover` (the resume), `header` and `commit` (per batch), `finish`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

import pyarrow as pa

from evalpipe.errors import LeaseLost
from evalpipe.output.manifest import Ending


class Committer(Protocol):
    """How one format commits a sink's batches (module docstring)."""

    @property
    def row_schema(self) -> pa.Schema:
        """The schema of the rows the sink hands over: the job's, with what the output adds
        (a sampled Parquet output's `_sample_weight`)."""
        ...

    def header(self) -> dict[str, Any]:
        """More keys for the header of a journal that starts now (the batch it will hold); a
        journal whose header would change is started anew after a commit, else emptied."""
        ...

    def unsent(self, header: Mapping[str, Any], rows: pa.Table) -> tuple[pa.Table | None, int]:
        """Of a killed run's journal (its `header` and `rows`): the rows not committed yet
        (None: none to recover), and how many of its rows are committed already."""
        ...

    def keys(self, columns: list[str]) -> pa.Table:
        """`columns` (id, `_state_hash`, `_error_type`) of every committed row, before a
        resume changes anything."""
        ...

    def reconcile(self, drop: pa.ChunkedArray | pa.Array, retry: int, stale: int) -> int:
        """Resume: delete what killed writes left and cut the rows `drop` marks (a mask over
        `keys`; `retry` and `stale` say why); returns how many temporary files went."""
        ...

    def recover(self, rows: pa.Table | None, unsent: pa.Table | None) -> int:
        """Resume: commit `rows`, those kept of a killed run's `unsent` journal rows (None: no
        journal to recover), and say the output is whole again; returns the journal rows
        recovered."""
        ...

    def commit(self, rows: pa.Table) -> None:
        """One batch (the journal's rows) made durable."""
        ...

    def hold(self, token: int) -> None:
        """With a shared tier: every commit from now on carries the output lease's fencing
        `token` and is refused (LeaseLost) once the output has seen a larger one, a newer
        holder's; at once if it has already. Never called without a tier."""
        ...

    def finish(self, rows: pa.Table | None, how: Ending, summary: Mapping[str, Any]) -> None:
        """The run's last `rows` (None: the run never resumed, nothing of it to commit), and
        how it ended, with its summary."""
        ...


def fenced_out(seen: int | None, ours: int, where: str = "the table holds") -> LeaseLost:
    """The one line of a commit refused for a newer holder's fencing token (`Committer.hold`),
    whatever the format: `where` says what showed it (`the table holds`, `its manifest
    records`); `seen` None: a concurrent commit carrying it won the race."""
    theirs = "a newer" if seen is None else f"a newer (its fencing token {seen}, ours {ours})"
    return LeaseLost(
        f"the output's lease was taken over: {where} {theirs} holder's commit, so this run's "
        "was refused; nothing more was committed (finished rows are journaled on this host); "
        "a retry resumes once the output is free"
    )
