"""The seam between the sink and its format: what a committer does with the sink's batches.

`Sink` owns everything a format need not know: the journal and its timing, gathering rows into
batches of `part_rows`, the resume's judgement of which rows to keep, cut or send again, and the
one-line errors. A committer makes a batch durable in its format and reads back what it holds:

- `PartsCommitter` (`evalpipe.output.parquet`): a batch is a Parquet part file, and the
  manifest (`_manifest.json`) says which parts and runs the output has;
- `DeltaCommitter` (`evalpipe.output.delta`): a batch is one Delta transaction carrying the
  job's application transaction, and each commit's info says what the manifest would;
- `IcebergCommitter` (`evalpipe.output.iceberg`): a batch is one catalog commit setting the
  job's sequence as a table property, each snapshot's summary saying what the manifest would.

The two table formats share how batches are numbered, resumed, cut and fenced
(`TableCommitter`); each says only how its table is read and written.

A format's `open` (`evalpipe.output.format.Format`) gives the sink its committer.

The sink calls, in a run's order: `keys` and `unsent` (before a resume changes anything),
`reconcile` and `recover` (the resume), `header` and `commit` (per batch), `finish`.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from typing import Any, Protocol

import orjson
import pyarrow as pa
import pyarrow.compute as pc

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


class TableCommitter(ABC):
    """A table format's committer (Delta's, Iceberg's): a batch is one commit of the table that
    carries the job's sequence for the night (its `app_id`: the job's fingerprint and the night),
    numbered 0, 1, 2, ... Each journal says in its header which sequence its rows will be
    committed as, so a kill between a commit and the next journal leaves a journal the table
    has (dropped, never committed twice) and a kill before the commit one it has not (committed
    by the resume, as that sequence). `--restart` marks the run's first journal `replaces`: its
    commit replaces the night. With a shared tier, each commit carries the output lease's
    fencing token and is refused once the table holds a larger one (`hold`).

    A subclass says how its table is read and written: `_done`, `_night`, `_fenced`, `_write`
    and `_cut`; `table` is None until there is a table."""

    schema: pa.Schema  # the table's: the rows' id column first
    app_id: str
    table: Any = None
    sequence = 0  # the sequence the journal's rows will be committed as
    replacing = False  # the next commit replaces the night (--restart)
    fence = 0  # with a shared tier: the output lease's fencing token (`hold`)
    _keys: pa.Table | None = None  # the rows `keys` gave, which `reconcile` cuts from

    @abstractmethod
    def _done(self) -> int:
        """The last sequence the table has for this job and night (-1: none)."""

    @abstractmethod
    def _night(self, select: list[str] | None) -> pa.Table:
        """The night's rows in the table, their `select` columns (None: all)."""

    @abstractmethod
    def _fenced(self) -> None:
        """LeaseLost when the table, as it is now, holds a fencing token above ours."""

    @abstractmethod
    def _write(
        self, rows: pa.Table, replace: bool, sequence: int, facts: Mapping[str, Any]
    ) -> None:
        """One commit: the batch `rows` (the sink's) appended, or the night replaced by them,
        as `sequence`, with `facts` (how the run ended) in its record."""

    @abstractmethod
    def _cut(self, kept: pa.Table, facts: Mapping[str, Any]) -> None:
        """One commit replacing the night by `kept` (the table's own rows), `facts` saying why."""

    def header(self) -> dict[str, Any]:
        """The journal's header for the batch to come: its sequence, whether it replaces."""
        return {"sequence": self.sequence, "replaces": self.replacing, "app_id": self.app_id}

    def unsent(self, header: Mapping[str, Any], rows: pa.Table) -> tuple[pa.Table | None, int]:
        """A killed run's journal (its `header` and `rows`): the rows the table does not have
        yet (None: its sequence was committed before the kill, never twice), and how many
        of them the table has already. A journal a host kept after it lost the output's lease
        may hold rows another host committed meanwhile, under other sequences: the rows whose
        id the night has are dropped too."""
        sequence = int(header.get("sequence", -1))
        if sequence <= self._done():
            return None, rows.num_rows
        self.sequence, self.replacing = sequence, bool(header.get("replaces"))
        if self.table is None or self.replacing:
            return rows, 0
        name = self.schema.names[0]
        there = pc.is_in(rows[name], self._night([name])[name])
        return rows.filter(pc.invert(there)), int(pc.sum(there).as_py() or 0)

    def keys(self, columns: list[str]) -> pa.Table:
        """`columns` of the night's rows (none while a restart is to replace them)."""
        if self.table is None or self.replacing:
            self._keys = None
            return pa.table({c: pa.array([], self.schema.field(c).type) for c in columns})
        self._keys = self._night(columns)
        return self._keys

    def reconcile(self, drop: pa.ChunkedArray | pa.Array, retry: int, stale: int) -> int:
        """Cut the rows `drop` marks (of those `keys` gave) in one commit replacing the night,
        its record saying how many were `retry` and `stale` rows. Leaves no temporary files."""
        if self._keys is None or not pc.any(drop).as_py():
            return 0
        name = self.schema.names[0]
        cut = self._keys[name].filter(drop)
        night = self._night(None)
        kept = night.filter(pc.invert(pc.is_in(night[name], cut)))
        self._cut(kept, {"cut": {"retry": retry, "stale": stale}})
        return 0

    def recover(self, rows: pa.Table | None, unsent: pa.Table | None) -> int:
        """Commit `rows`, those kept of a killed run's `unsent` journal rows, as the sequence
        its header named. Returns the journal rows recovered, counted as the batch held them
        (the rows the resume cut included)."""
        if rows is None or unsent is None:
            return 0
        self.commit(rows)
        return unsent.num_rows

    def commit(self, rows: pa.Table) -> None:
        """The journal's rows as the commit of sequence `self.sequence`, then on."""
        self._commit(rows, {})

    def finish(self, rows: pa.Table | None, how: Ending, summary: Mapping[str, Any]) -> None:
        """The run's last rows in one last commit whose record says how the run ended, with
        its summary (an empty commit when no row is left); nothing for a run that never
        resumed (`rows` None)."""
        if rows is not None:
            plain = orjson.loads(orjson.dumps(dict(summary), default=str))
            self._commit(rows, {"ended_how": how, "summary": plain})

    def hold(self, token: int) -> None:
        """With a shared tier: every commit from now on carries the output lease's fencing
        `token`, and is refused once the table holds a larger one: LeaseLost at once if it
        does already."""
        self.fence = token
        self._fenced()

    def _commit(self, rows: pa.Table, facts: Mapping[str, Any]) -> None:
        self._write(rows, self.replacing, self.sequence, facts)
        self.replacing = False
        self.sequence += 1
