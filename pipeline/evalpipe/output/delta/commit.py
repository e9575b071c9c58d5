"""The Delta committer: a sink's batches as Delta transactions, exactly once across kill -9 and
resume.

`evalpipe.output.Sink` keeps the journal, gathers rows into batches and runs the resume; it is
handed a committer that makes a batch durable. The Parquet one writes a part file; this one
commits the batch to the table in one transaction that carries an application transaction
`(app id, sequence)`: the app id names the job (its fingerprint) and the partition, the
sequence numbers its batches 0, 1, 2, ... Each journal says in its header (`header`) which
sequence its rows will be committed as. So:

- a commit, then a new journal for the next sequence (written atomically). A kill between the
  two leaves a journal whose sequence the table already has: the resume drops it (`unsent`);
- a kill before the commit leaves a journal whose sequence the table has not: the resume
  commits it, as that sequence (`recover`). Every batch lands once, none is lost;
- `--restart` marks the run's first journal `replaces`: its commit overwrites this partition
  (`predicate`) in the same transaction that adds the first batch, so the other partitions are
  never touched and a reader sees the old night or the new rows, never an empty night. A
  restart killed before its first row was journaled left the night as it was: the next run
  resumes it.

A resume also cuts, in one transaction, the partition's rows the sink marks (a retryable error,
a stale state): an overwrite of the partition with the rows it keeps, so they are sent again.
The facts a Parquet output keeps in its manifest (evalpipe's version, the config hash, the run,
how it ended and its summary) go in each commit's info; `table.runs` reads them back.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

import orjson
import pyarrow as pa
import pyarrow.compute as pc

from evalpipe.errors import ConfigError, OutputError, ResumeConflict, first_line
from evalpipe.output.committer import fenced_out
from evalpipe.output.delta import table as lake
from evalpipe.stores import Folder, is_full

if TYPE_CHECKING:
    from deltalake import DeltaTable

FENCE = "evalpipe-fence"  # the application transaction that carries the lease's fencing token
KEPT = "; rows committed so far are kept: fix it and run the same command to resume"


class DeltaCommitter:
    """One run's commits into a Delta table (one partition of it), for `evalpipe.output.Sink`.

    `schema` is the table's (the output's, as `evalpipe.output.delta.schema` puts it in a table,
    with the partition columns last); `row_schema` the rows' the sink hands over. `load` opens
    the table if there is one; `start` says where the run's batches begin. The rest is the
    sink's committer seam (`evalpipe.output.committer`).
    """

    def __init__(
        self, out: Folder, schema: pa.Schema, fingerprint: str, *, run_id: str,
        partition: Mapping[str, str], provenance: Mapping[str, str], row_schema: pa.Schema,
    ) -> None:  # fmt: skip
        """Keeps what it is given; does no I/O."""
        self.out = out
        self.schema = schema
        self.row_schema = row_schema
        self.fingerprint = fingerprint
        self.run_id = run_id
        self.partition = dict(partition)
        self.provenance = dict(provenance)
        self.app_id = lake.app_id(fingerprint, partition)
        self.where = lake.predicate(partition)
        self.table: DeltaTable | None = None
        self.sequence = 0  # the sequence the journal's rows will be committed as
        self.replacing = False  # the next commit replaces the partition (--restart)
        self._keys: pa.Table | None = None  # the rows `keys` gave, which `reconcile` cuts from
        self.fence = 0  # with a shared tier: the output lease's fencing token (`hold`)

    # ----------------------------------------------------------------------- opening

    def load(self) -> pa.Schema | None:
        """Open the table if `out` holds one: its stored schema (None: no table yet)."""
        with errors(self.out, "cannot be read"):
            if lake.is_table(self.out.location):
                self.table = lake.load(self.out.location)
                return lake.stored_schema(self.table)
        return None

    def partition_columns(self) -> list[str]:
        return lake.partition_columns(self.table) if self.table is not None else []

    def check_resumable(self) -> None:
        """ResumeConflict if another job's config wrote this partition last: its rows would
        be kept as they are, unanswered by this config's questions."""
        if self.table is None:
            return
        with errors(self.out, "cannot be read"):
            if not lake.has_rows(self.table, self.out.location, self.partition):
                return  # a new night: nobody's rows to keep (and no log to read back)
            last = lake.last_fingerprint(self.out.location, self.partition)
        if last is not None and last != self.fingerprint:
            night = ", ".join(f"{k}={v}" for k, v in self.partition.items()) or "the table"
            raise ResumeConflict(
                f"output.path '{self.out.shown}': {night} was written by a job with a different "
                "config (questions, model or state mapping); use --restart to replace it"
            )

    def start(self, restart: bool) -> None:
        """The run's first batch: the one after the job's last in the table; with `restart`
        its commit replaces the partition."""
        self.replacing = restart
        self.sequence = self._done() + 1

    def _done(self) -> int:
        """The last sequence the table has for this job and partition (-1: none)."""
        if self.table is None:
            return -1
        version = self.table.transaction_version(self.app_id)
        return -1 if version is None else int(version)

    # ----------------------------------------------------------------------- the seam

    def header(self) -> dict[str, Any]:
        """The journal's header for the batch to come: its sequence, whether it replaces."""
        return {"sequence": self.sequence, "replaces": self.replacing, "app_id": self.app_id}

    def unsent(self, header: Mapping[str, Any], rows: pa.Table) -> tuple[pa.Table | None, int]:
        """A killed run's journal (its `header` and `rows`): the rows the table does not have
        yet (None: its sequence was committed before the kill, never twice), and how many
        of them the table has already. A journal a host kept after it lost the output's lease
        may hold rows another host committed meanwhile, under other sequences: the rows whose
        id the partition has are dropped too."""
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
        """`columns` of the partition's rows (none while a restart is to replace them)."""
        if self.table is None or self.replacing:
            self._keys = None
            return pa.table({c: pa.array([], self.schema.field(c).type) for c in columns})
        self._keys = self._night(columns)
        return self._keys

    def reconcile(self, drop: pa.ChunkedArray | pa.Array, retry: int, stale: int) -> int:
        """Cut the rows `drop` marks (of those `keys` gave) in one overwrite of the partition,
        its info saying how many were `retry` and `stale` rows. Leaves no temporary files."""
        if self._keys is None or not pc.any(drop).as_py():
            return 0
        name = self.schema.names[0]
        cut = self._keys[name].filter(drop)
        night = self._night(None)
        kept = night.filter(pc.invert(pc.is_in(night[name], cut)))
        self._write(kept, True, self._info(None, cut={"retry": retry, "stale": stale}), txn=False)
        return 0

    def recover(self, rows: pa.Table | None, unsent: pa.Table | None) -> int:
        """Commit `rows`, those kept of a killed run's `unsent` journal rows, as the sequence
        its header named. Returns the journal rows recovered, counted as the batch held them
        (the rows the resume cut included, as a Delta output has always said)."""
        if rows is None or unsent is None:
            return 0
        self.commit(rows)
        return unsent.num_rows

    def commit(self, rows: pa.Table) -> None:
        """The journal's rows as the transaction of sequence `self.sequence`, then on."""
        self._commit(rows, {})

    def finish(self, rows: pa.Table | None, how: str, summary: Mapping[str, Any]) -> None:
        """The run's last rows in one last transaction whose info says how the run ended, with
        its summary (an empty commit when no row is left); nothing for a run that never
        resumed (`rows` None)."""
        if rows is not None:
            ending = {
                "ended_how": how,
                "summary": orjson.loads(orjson.dumps(dict(summary), default=str)),
            }
            self._commit(rows, ending)

    # ----------------------------------------------------------------------- fencing

    def hold(self, token: int) -> None:
        """With a shared tier, every commit from now on carries the output lease's fencing
        `token` as the application transaction `FENCE` (checked by delta-rs's conflict check
        against a concurrent commit carrying it), and is refused once the table holds a larger
        one: LeaseLost at once if it does already."""
        self.fence = token
        self._fenced()

    def _fenced(self) -> None:
        """LeaseLost when the table holds a fencing token above ours (a newer holder's)."""
        if not self.fence or self.table is None:
            return
        with errors(self.out, "cannot be read"):
            self.table.update_incremental()
        seen = self.table.transaction_version(FENCE)
        if seen is not None and int(seen) > self.fence:
            raise fenced_out(int(seen), self.fence)

    # ----------------------------------------------------------------------- the table

    def _commit(self, rows: pa.Table, more: Mapping[str, Any]) -> None:
        data = lake.with_partition(rows, self.schema, self.partition)
        self._write(data, self.replacing, self._info(self.sequence, **more), txn=True)
        self.replacing = False
        self.sequence += 1

    def _night(self, select: list[str] | None) -> pa.Table:
        assert self.table is not None
        with errors(self.out, "cannot be read"):
            return lake.query(self.table, self.out.location, select, self.partition)

    def _info(self, sequence: int | None, **more: Any) -> lake.CommitInfo:
        facts = {"partition": self.partition, "fingerprint": self.fingerprint, **self.provenance}
        return lake.CommitInfo(self.run_id, sequence, {**facts, **more})

    def _write(self, rows: pa.Table, replace: bool, info: lake.CommitInfo, txn: bool) -> None:
        """One transaction: `rows` appended, or the partition (`where`) replaced by them."""
        from deltalake import CommitProperties, Transaction, WriterProperties, write_deltalake

        txns = (
            [Transaction(self.app_id, info.sequence)] if txn and info.sequence is not None else []
        )
        if self.fence:  # a newer holder's commit, before or at once with ours, refuses it
            self._fenced()
            txns.append(Transaction(FENCE, self.fence))
        props = CommitProperties(custom_metadata=info.as_metadata(), app_transactions=txns or None)
        target: Any = self.table
        options = None
        if target is None:  # the first commit creates the table
            target, options = lake.uri(self.out.location), lake.storage_options(self.out.location)
        common: dict[str, Any] = {
            "partition_by": list(self.partition) or None,
            "schema_mode": "merge",
            "storage_options": options,
            "commit_properties": props,
            # the Parquet output's codec (delta-rs writes snappy by default): 40% smaller here
            "writer_properties": WriterProperties(compression="ZSTD"),
        }
        with errors(self.out, "cannot write", self.fence):
            if replace:
                write_deltalake(target, rows, mode="overwrite", predicate=self.where, **common)
            else:
                write_deltalake(target, rows, mode="append", **common)
            if self.table is None:
                self.table = lake.load(self.out.location)
            else:
                self.table.update_incremental()


@contextlib.contextmanager
def errors(out: Folder, what: str, fence: int = 0) -> Iterator[None]:
    """delta-rs's errors as one OutputError line (ResumeConflict passes through); a full disk
    stays an OSError for the sink's own message; with a `fence`, a commit that lost to a
    concurrent one carrying the fencing transaction is LeaseLost."""
    from deltalake.exceptions import CommitFailedError, DeltaError

    try:
        yield
    except (ResumeConflict, ConfigError):
        raise
    except OSError as exc:
        if is_full(exc):
            raise
        raise OutputError(f"output.path '{out.shown}': {what} ({first_line(exc)}){KEPT}") from None
    except CommitFailedError as exc:
        if fence and "oncurrent transaction" in str(exc):
            raise fenced_out(None, fence) from None
        raise OutputError(f"output.path '{out.shown}': the Delta table {what} "
                          f"({first_line(exc)}){KEPT}") from None  # fmt: skip
    except DeltaError as exc:
        reason = first_line(exc)
        raise OutputError(
            f"output.path '{out.shown}': the Delta table {what} ({reason}){KEPT}"
        ) from None
