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

import pyarrow as pa

from evalpipe.errors import ConfigError, OutputError, ResumeConflict, first_line
from evalpipe.output.committer import TableCommitter, fenced_out
from evalpipe.output.delta import table as lake
from evalpipe.stores import Folder, is_full

if TYPE_CHECKING:
    from deltalake import DeltaTable

FENCE = "evalpipe-fence"  # the application transaction that carries the lease's fencing token
KEPT = "; rows committed so far are kept: fix it and run the same command to resume"


class DeltaCommitter(TableCommitter):
    """One run's commits into a Delta table (one partition of it), for `evalpipe.output.Sink`.

    `schema` is the table's (the output's, as `evalpipe.output.delta.schema` puts it in a table,
    with the partition columns last); `row_schema` the rows' the sink hands over. `load` opens
    the table if there is one; `start` says where the run's batches begin. The rest is the
    sink's committer seam, as the table formats share it (`evalpipe.output.committer`).
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
        self._described = False  # the table's columns are described as this job's (`_describe`)

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

    # ----------------------------------------------------------------------- fencing

    def _fenced(self) -> None:
        """LeaseLost when the table holds a fencing token above ours (a newer holder's). Each
        commit carries ours as the application transaction `FENCE`, which delta-rs's conflict
        check also holds against a concurrent commit carrying it."""
        if not self.fence or self.table is None:
            return
        with errors(self.out, "cannot be read"):
            self.table.update_incremental()
        seen = self.table.transaction_version(FENCE)
        if seen is not None and int(seen) > self.fence:
            raise fenced_out(int(seen), self.fence)

    # ----------------------------------------------------------------------- the table

    def _write(
        self, rows: pa.Table, replace: bool, sequence: int, facts: Mapping[str, Any]
    ) -> None:
        data = lake.with_partition(rows, self.schema, self.partition)
        self._transact(data, replace, self._info(sequence, **facts), txn=True)

    def _cut(self, kept: pa.Table, facts: Mapping[str, Any]) -> None:
        self._transact(kept, True, self._info(None, **facts), txn=False)

    def _night(self, select: list[str] | None) -> pa.Table:
        assert self.table is not None
        with errors(self.out, "cannot be read"):
            return lake.query(self.table, self.out.location, select, self.partition)

    def _info(self, sequence: int | None, **more: Any) -> lake.CommitInfo:
        facts = {"partition": self.partition, "fingerprint": self.fingerprint, **self.provenance}
        return lake.CommitInfo(self.run_id, sequence, {**facts, **more})

    def _transact(self, rows: pa.Table, replace: bool, info: lake.CommitInfo, txn: bool) -> None:
        """One transaction: `rows` appended, or the partition (`where`) replaced by them."""
        from deltalake import CommitProperties, Transaction, WriterProperties, write_deltalake

        txns = (
            [Transaction(self.app_id, info.sequence)] if txn and info.sequence is not None else []
        )
        if self.fence:  # a newer holder's commit, before or at once with ours, refuses it
            self._fenced()
            txns.append(Transaction(FENCE, self.fence))
        props = CommitProperties(custom_metadata=info.as_metadata(), app_transactions=txns or None)
        if self.table is not None:
            self._describe()
            rows = _as_stored(rows, lake.stored_schema(self.table))
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

    def _describe(self) -> None:
        """Once a run: the table's columns described as this job's questions are (the newest
        night's wording, option order and fingerprint, which `evalpipe calibrate` checks), one
        metadata commit per column that differs. delta-rs refuses to merge rows whose field
        metadata differs from the table's, so a question reworded between nights would
        otherwise stop the night's first commit."""
        if self._described or self.table is None:
            return
        stored = lake.stored_schema(self.table)
        with errors(self.out, "cannot be described", self.fence):
            for field in self.schema:
                ours = {k.decode(): v.decode() for k, v in (field.metadata or {}).items()}
                if field.name not in stored.names or not ours:
                    continue
                theirs = stored.field(field.name).metadata or {}
                if any(theirs.get(k.encode()) != v.encode() for k, v in ours.items()):
                    self.table.alter.set_column_metadata(field.name, ours)
            self.table.update_incremental()
        self._described = True


def _as_stored(rows: pa.Table, stored: pa.Schema) -> pa.Table:
    """`rows` with each column the table has described as the table describes it (a cut's rows
    are read back from files written under an older description)."""
    fields = [
        field.with_metadata(stored.field(field.name).metadata or {})
        if field.name in stored.names else field
        for field in rows.schema
    ]  # fmt: skip
    return pa.Table.from_arrays(rows.columns, schema=pa.schema(fields, rows.schema.metadata))


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
