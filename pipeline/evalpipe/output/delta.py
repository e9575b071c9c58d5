"""The Delta Lake output (`output.format: delta`): the journal's batches as Delta transactions,
exactly once across kill -9 and resume.

`DeltaSink` is the `Sink` (its journal, its timing, its errors) with another commit: where the
Parquet sink writes a part file, this one commits the batch to the table in one transaction that
carries an application transaction `(app id, sequence)` (`evalpipe.output.lake`): the app id
names the job (its fingerprint) and the partition, the sequence numbers its batches 0, 1, 2, ...
Each journal says in its header which sequence its rows will be committed as. So:

- a commit, then a new journal for the next sequence (written atomically). A kill between the
  two leaves a journal whose sequence the table already has: the resume drops it;
- a kill before the commit leaves a journal whose sequence the table has not: the resume
  commits it, as that sequence. Every batch lands once, none is lost;
- `--restart` marks the run's first journal `replaces`: its commit overwrites this partition
  (`predicate`) in the same transaction that adds the first batch, so the other partitions are
  never touched and a reader sees the old night or the new rows, never an empty night. A
  restart killed before its first row was journaled left the night as it was: the next run
  resumes it.

A resume also cuts, in one transaction, the partition's rows with a retryable error or a stale
state (an overwrite of the partition with the rows it keeps), so they are sent again. The
manifest's facts (evalpipe's version, the config hash, the run, how it ended and its summary)
go in each commit's info; `lake.runs` reads the runs back from the log's commit info.

The journal is a local file (`_journal[-<partition digest>].bin`): in the table's folder when
it is local (delta-rs ignores files it did not commit), else in the output's staging folder.
"""

from __future__ import annotations

import contextlib
import hashlib
import re
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson
import pyarrow as pa
import pyarrow.compute as pc

from evalpipe.errors import ConfigError, OutputError, ResumeConflict, first_line
from evalpipe.output import lake
from evalpipe.output.journal import JournalWriter, read_header, read_journal
from evalpipe.output.manifest import MANIFEST, Ending, Manifest
from evalpipe.output.outdir import make_dir, part_names
from evalpipe.output.resume import ResumeState
from evalpipe.output.sink import PART_ROWS, Sink, _opening
from evalpipe.output.space import is_full
from evalpipe.output.table import ERROR_TYPE, STATE_HASH, retryable, schema_json
from evalpipe.stores import PATIENCE_SECONDS, Folder, Location, local_dir, temp_pattern

if TYPE_CHECKING:
    from deltalake import DeltaTable

WRITE_SECONDS = 0.1
FLUSH_SECONDS = 0.5


class DeltaSink(Sink):
    """A Delta table (or one partition of it) as the output of one job (module docstring).
    Used as `Sink` is: open, committed, resume, append/tick, finish or close."""

    def __init__(
        self, out: Folder, journal: Path, schema: pa.Schema, fingerprint: str, *, run_id: str,
        partition: Mapping[str, str], provenance: Mapping[str, str], part_rows: int = PART_ROWS,
        write_seconds: float = WRITE_SECONDS, flush_seconds: float = FLUSH_SECONDS,
    ) -> None:  # fmt: skip
        """Keeps what `open` found; does no I/O. Use `open`."""
        manifest = Manifest(fingerprint, schema_json(schema))  # never written: the log is
        super().__init__(
            out, journal, schema, fingerprint, manifest, run_id=run_id, part_rows=part_rows,
            write_seconds=write_seconds, flush_seconds=flush_seconds,
        )  # fmt: skip
        self.partition = dict(partition)
        self.provenance = dict(provenance)
        self.app_id = lake.app_id(fingerprint, partition)
        self.delta_schema = lake.delta_schema(schema, partition)
        self.where = lake.predicate(partition)
        self.table: DeltaTable | None = None
        self.sequence = 0  # the sequence the journal's rows will be committed as
        self.replacing = False  # the next commit replaces the partition (--restart)
        self._ending: dict[str, Any] = {}  # how the run ended, for the last commit's info

    @classmethod
    def open_table(
        cls,
        location: Location,
        schema: pa.Schema,
        fingerprint: str,
        *,
        run_id: str,
        partition: Mapping[str, str] | None = None,
        restart: bool = False,
        staging: Path | None = None,
        part_rows: int = PART_ROWS,
        write_seconds: float = WRITE_SECONDS,
        flush_seconds: float = FLUSH_SECONDS,
        provenance: Mapping[str, str] | None = None,
    ) -> DeltaSink:
        """The Delta table at `location` for run `run_id`, writing `partition` (created with
        the first commit if need be). ConfigError if the table cannot take this job's rows
        (`lake.check_compatible`) or the folder holds a Parquet output. With `restart` the
        partition (the whole table without one) is replaced by the first commit."""
        out = Folder(location)
        partition = dict(partition or {})
        journal = local_dir(out.location, staging) / journal_name(partition)
        sink = cls(
            out, journal, schema, fingerprint, run_id=run_id, partition=partition,
            provenance=provenance or {}, part_rows=part_rows, write_seconds=write_seconds,
            flush_seconds=flush_seconds,
        )  # fmt: skip
        with _opening(out, journal):
            make_dir(out)
            if part_names(out) or out.read_bytes(MANIFEST) is not None:
                raise ConfigError(
                    f"output.path '{out.shown}' holds a Parquet output (output.format: "
                    "parquet); choose another output.path for the Delta table"
                )
            with _delta_errors(out, "cannot be read"):
                if lake.is_table(out.location):
                    sink.table = lake.load(out.location)
                    lake.check_compatible(out.shown, sink.table, sink.delta_schema, partition)
                    if not restart:
                        sink._check_resumable()
        _remove_journal_temps(journal)
        if restart:
            journal.unlink(missing_ok=True)
            sink.replacing = True
        sink.sequence = sink._done() + 1
        out.patience = PATIENCE_SECONDS
        return sink

    # ----------------------------------------------------------------------- the table

    def _check_resumable(self) -> None:
        """ResumeConflict if another job's config wrote this partition last: its rows would
        be kept as they are, unanswered by this config's questions."""
        assert self.table is not None
        if not lake.has_rows(self.table, self.out.location, self.partition):
            return  # a new night: nobody's rows to keep (and no log to read back)
        last = lake.last_fingerprint(self.out.location, self.partition)
        if last is not None and last != self.fingerprint:
            night = ", ".join(f"{k}={v}" for k, v in self.partition.items()) or "the table"
            raise ResumeConflict(
                f"output.path '{self.out.shown}': {night} was written by a job with a different "
                "config (questions, model or state mapping); use --restart to replace it"
            )

    def _done(self) -> int:
        """The last sequence the table has for this job and partition (-1: none)."""
        if self.table is None:
            return -1
        version = self.table.transaction_version(self.app_id)
        return -1 if version is None else int(version)

    def _night(self, select: list[str] | None) -> pa.Table:
        assert self.table is not None
        with _delta_errors(self.out, "cannot be read"):
            return lake.query(self.table, self.out.location, select, self.partition)

    def _write(self, rows: pa.Table, replace: bool, info: lake.CommitInfo, txn: bool) -> None:
        """One transaction: `rows` appended, or the partition (`where`) replaced by them."""
        from deltalake import CommitProperties, Transaction, WriterProperties, write_deltalake

        txns = (
            [Transaction(self.app_id, info.sequence)] if txn and info.sequence is not None else []
        )
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
        with _delta_errors(self.out, "cannot write"):
            if replace:
                write_deltalake(target, rows, mode="overwrite", predicate=self.where, **common)
            else:
                write_deltalake(target, rows, mode="append", **common)
            if self.table is None:
                self.table = lake.load(self.out.location)
            else:
                self.table.update_incremental()

    def _info(self, sequence: int | None, **more: Any) -> lake.CommitInfo:
        facts = {"partition": self.partition, "fingerprint": self.fingerprint, **self.provenance}
        return lake.CommitInfo(self.run_id, sequence, {**facts, **more})

    def _commit_batch(self, rows: pa.Table) -> None:
        """The journal's rows as the transaction of sequence `self.sequence`, then on."""
        data = lake.with_partition(rows, self.delta_schema, self.partition)
        self._write(data, self.replacing, self._info(self.sequence, **self._ending), txn=True)
        self.replacing = False
        self.sequence += 1

    # ----------------------------------------------------------------------- resume

    def _unsent_batch(self) -> tuple[pa.Table | None, bool, int]:
        """A killed run's journal rows that the table does not have yet (None: none), whether
        they replace the partition, and how many journaled rows the table has already."""
        path = self.journal_path
        if not path.exists():
            return None, False, 0
        header = read_header(path, self.schema, self.fingerprint)
        rows, _ = read_journal(path, self.schema, self.fingerprint)
        sequence = int(header.get("sequence", -1))
        if sequence <= self._done():  # committed before the kill: never twice
            return None, False, rows.num_rows
        self.sequence = sequence
        return rows, bool(header.get("replaces")), 0

    def committed(self) -> pa.Table:
        """(id, `_state_hash`) of the partition's final rows: the table's (unless a pending
        restart replaces them) and a killed run's journal's, less retryable errors."""
        pending, replaces, _ = self._unsent_batch()
        keys = [self.schema.names[0], STATE_HASH, ERROR_TYPE]
        parts = []
        if self.table is not None and not (replaces or self.replacing):
            parts.append(self._night(keys).select(keys))
        if pending is not None:
            parts.append(pending.select(keys))
        empty = pa.schema([self.schema.field(n).remove_metadata() for n in keys]).empty_table()
        found = pa.concat_tables([empty, *[_plain(p, empty.schema) for p in parts]])
        final = found.filter(pc.invert(retryable(found[ERROR_TYPE])))
        return final.select(keys[:2])

    def resume(self, stale: pa.Array | None = None) -> ResumeState:
        """Commit a killed run's pending journal (as the sequence its header names), then cut
        the partition's retryable and stale rows (one transaction), and delete the journal."""
        if self._resumed is not None:
            raise RuntimeError("Sink.resume() runs once, before the first append")
        id_type = self.schema.field(0).type
        stale = pa.array([], id_type) if stale is None else stale.cast(id_type)
        with self._writing():
            pending, replaces, duplicates = self._unsent_batch()
            recovered = retried = staled = 0
            if pending is not None:
                retry = retryable(pending[ERROR_TYPE])
                is_stale = pc.and_(pc.is_in(pending.column(0), stale), pc.invert(retry))
                recovered, retried, staled = pending.num_rows, _count(retry), _count(is_stale)
                self.replacing = replaces
                self._commit_batch(pending.filter(pc.invert(pc.or_(retry, is_stale))))
            self.journal_path.unlink(missing_ok=True)
            retry_rows, stale_rows, ids = self._cut(stale)
            retry_rows, stale_rows = retry_rows + retried, stale_rows + staled
        state = ResumeState(ids, retry_rows, stale_rows, 0, recovered, duplicates)
        self._resumed = state
        return state

    def _cut(self, stale: pa.Array) -> tuple[int, int, pa.Array]:
        """Cut the partition's retryable and stale rows (one overwrite of the partition);
        returns their counts and the ids kept."""
        id_type = self.schema.field(0).type
        if self.table is None or self.replacing:  # no rows yet, or all of them to be replaced
            return 0, 0, pa.array([], id_type)
        name = self.schema.names[0]
        keys = self._night([name, ERROR_TYPE])
        retry = retryable(keys[ERROR_TYPE])
        is_stale = pc.and_(pc.is_in(keys[name], stale), pc.invert(retry))
        cut = pc.or_(retry, is_stale)
        retry_rows, stale_rows = _count(retry), _count(is_stale)
        ids = keys[name].filter(pc.invert(cut)).combine_chunks().cast(id_type)
        if retry_rows + stale_rows:
            night = self._night(None)
            keep = pc.invert(pc.or_(retryable(night[ERROR_TYPE]), pc.is_in(night[name], stale)))
            kept = night.filter(keep)
            info = self._info(None, cut={"retry": retry_rows, "stale": stale_rows})
            self._write(kept, True, info, txn=False)
        return retry_rows, stale_rows, ids

    # ----------------------------------------------------------------------- writing

    def _new_journal(self) -> JournalWriter:
        extra = {"sequence": self.sequence, "replaces": self.replacing, "app_id": self.app_id}
        return JournalWriter.create(self.journal_path, self.schema, self.fingerprint, extra)

    def _rotate(self, journal: JournalWriter) -> None:
        """The journal's rows become one transaction; then a journal for the next sequence
        (a kill in between: the resume finds the old one's sequence committed)."""
        try:
            self._commit_batch(pa.concat_tables(self._journaled))
        except OutputError as exc:
            self.broken = exc
            return
        journal.close()
        self._journal = self._new_journal()
        self._journaled, self._journal_rows = [], 0

    def _commit_all(self, table: pa.Table) -> None:
        self._commit_batch(table)

    def finish(self, summary: Mapping[str, Any], ended_how: Ending = "finished") -> None:
        """End the run: the rest of the rows in one last transaction whose info says how the
        run ended, with its summary (an empty commit when no row is left), journal deleted."""
        if self._finished:
            raise RuntimeError("Sink.finish() called twice")
        self._ending = {
            "ended_how": ended_how,
            "summary": orjson.loads(orjson.dumps(dict(summary), default=str)),
        }
        with self._writing():
            if self._resumed is not None:
                sequence = self.sequence
                self._fold()
                if self.sequence == sequence:  # nothing was left: the ending alone
                    self._commit_batch(self.schema.empty_table())
            self._finished = True


def journal_name(partition: Mapping[str, str]) -> str:
    """The journal of one partition's run: each partition has its own."""
    if not partition:
        return "_journal.bin"
    digest = hashlib.blake2b(orjson.dumps(dict(sorted(partition.items()))), digest_size=6)
    return f"_journal-{digest.hexdigest()}.bin"


def _remove_journal_temps(journal: Path) -> None:
    """What a kill during a journal's atomic creation left beside it."""
    pattern = temp_pattern(re.escape(journal.name))
    if journal.parent.is_dir():
        for path in journal.parent.iterdir():
            if pattern.match(path.name):
                path.unlink(missing_ok=True)


def _plain(rows: pa.Table, schema: pa.Schema) -> pa.Table:
    """`rows` under `schema` (same names and types; casts timestamp units)."""
    return rows.select(schema.names).cast(schema)


def _count(mask: pa.ChunkedArray | pa.Array) -> int:
    return int(pc.sum(mask).as_py() or 0)


@contextlib.contextmanager
def _delta_errors(out: Folder, what: str) -> Iterator[None]:
    """delta-rs's errors as one OutputError line (ResumeConflict passes through); a full disk
    stays an OSError for the sink's own message."""
    from deltalake.exceptions import DeltaError

    try:
        yield
    except (ResumeConflict, ConfigError):
        raise
    except OSError as exc:
        if is_full(exc):
            raise
        raise OutputError(f"output.path '{out.shown}': {what} ({first_line(exc)}){_KEPT}") from None
    except DeltaError as exc:
        reason = first_line(exc)
        raise OutputError(
            f"output.path '{out.shown}': the Delta table {what} ({reason}){_KEPT}"
        ) from None


_KEPT = "; rows committed so far are kept: fix it and run the same command to resume"
