"""The output of one job: finished rows in, committed batches out, and a resume from there.

The Sink decides when each file of the output changes (the input is `source`'s); the rest has
its own module: the table's shape `table`, the journal's framing `journal`, how a batch is
committed `committer` (its format's, through the door `formats`: Parquet parts and the manifest
`parquet`, or a Delta transaction `delta`),
what a resume reads back and cuts `resume`, our file names and the checks on opening `outdir`,
failed writes and a full disk `space`, where files live `stores`.

    out/                            a local directory, or a prefix on an object store
      part-00000-<uuid>.parquet     committed rows, `part_rows` each (the last may hold fewer)
      part-00001-<uuid>.parquet
      _manifest.json                fingerprint, schema, parts, runs, summary (rewritten per part)
      _journal.bin                  rows finished since the last part (only while a run is on)
      .<name>.<uuid>.tmp            a file being written (a kill may leave one; resume deletes it)

Names starting with `_` or `.` are metadata: readers of `part-*.parquet` or of the directory
(pyarrow.dataset ignores them by default) never see the journal or a temporary file as rows.
An object store cannot append to an object, so the journal of an object-store output is a
local file in its staging folder (`stores.staging_dir`); each part is uploaded whole, once,
and the manifest after it. A Delta table (`output.format: delta`) keeps the same journal and
commits each batch as one transaction instead of a part.

Writing. Finished rows handed to `append` reach the journal within `write_seconds` (one record
for all of them; then they survive kill -9), and the journal is synced every `flush_seconds`
(what a crash of the machine can lose). When it holds `part_rows` rows they become one batch
(from memory, not re-read), committed, and the journal starts over; `finish` does the same with
the rest and deletes the journal, whether the run finished, was stopped or failed.

Resume. `committed` reads, without changing anything, the (id, `_state_hash`) pairs of every
final row (committed and a killed run's journal, less the rows with a retryable error), so that
the driver can tell which of them are stale. `resume` then has the committer delete temporary
files and cut the retryable and the stale rows (never two copies of a row once a resume is
through), and commit the journal's valid prefix (rows already committed, retryable or stale
ones dropped) before deleting it.

Nothing here sees the API key; only the answers, the model ID, token counts and error text.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from evalpipe.calibration import kept_counts
from evalpipe.errors import LeaseLost, OutputError
from evalpipe.output.committer import Committer
from evalpipe.output.formats import open_committer
from evalpipe.output.journal import JournalWriter
from evalpipe.output.lease import held_lease
from evalpipe.output.manifest import Ending
from evalpipe.output.outdir import journal_path
from evalpipe.output.resume import Found, ResumeState, scan
from evalpipe.output.space import RowSizes, cannot_write, writing
from evalpipe.output.table import RowResult, schema_layout, to_table
from evalpipe.stores import PATIENCE_SECONDS, Folder, Location, fsync, is_full

if TYPE_CHECKING:
    from evalpipe.config import OutputConfig
    from evalpipe.tier import OutputLease

PART_ROWS = 5000
WRITE_SECONDS = 0.1  # rows handed to `append` reach the journal (and survive kill -9) this soon
FLUSH_SECONDS = 0.5  # the journal is synced this often (what a machine crash can lose)


class Sink:
    """The output of one job (module docstring). One writer at a time (the driver); readers
    may read while it writes.

        sink = Sink.open(out, schema, fingerprint, run_id=run_id)
        pairs = sink.committed()          # optional: (id, _state_hash) of the final rows
        state = sink.resume(stale_ids)    # before any append; state.ids: not to send again
        sink.append(rows)                 # cheap; call as results complete
        sink.tick()                       # call now and then: writes and syncs when due
        sink.finish(summary, "finished")  # or "stopped" / "failed": the rest committed
        sink.close()                      # without finish (a second signal): rows journaled
    """

    def __init__(
        self, out: Folder, journal: Path, schema: pa.Schema, fingerprint: str,
        committer: Committer, *, run_id: str, part_rows: int = PART_ROWS,
        write_seconds: float = WRITE_SECONDS, flush_seconds: float = FLUSH_SECONDS,
        lease: OutputLease | None = None,
    ) -> None:  # fmt: skip
        """Keeps what `open` found; does no I/O. Use `open`."""
        schema_layout(schema)  # a schema without the layout fails here, not at the first write
        self.out = out
        self.journal_path = journal
        self.schema = schema
        self.fingerprint = fingerprint
        self.committer = committer
        self.run_id = run_id
        self.part_rows = part_rows
        self.write_seconds = write_seconds
        self.flush_seconds = flush_seconds
        self._found: Found | None = None
        self._resumed: ResumeState | None = None
        self._pending: list[RowResult] = []  # handed to append, not yet in the journal
        self._journal: JournalWriter | None = None
        self._header: dict[str, Any] = {}  # the journal's own keys (`Committer.header`)
        self._journaled: list[pa.Table] = []  # the journal's rows, kept to make its batch
        self._journal_rows = 0
        self._written = self._synced = time.monotonic()
        self._finished = self._closed = False
        self._sizes = RowSizes()  # what is left to write, for the message of a full disk
        self._kept: dict[str, list[int]] = {}  # per question: rows kept, rows with an answer
        # A batch could not be committed (a store that stayed away): rows still go to the
        # journal, so what is in flight is kept, but the run is to end with this.
        self.broken: OutputError | None = None
        # With a shared tier, the output's lease (`evalpipe.output.lease`): confirmed before
        # every commit; once lost, the sink is broken and commits nothing more.
        self.lease = lease

    @classmethod
    def open(
        cls, location: Location, schema: pa.Schema, fingerprint: str, *, run_id: str,
        format: str = "parquet", partition: Mapping[str, str] | None = None,
        restart: bool = False, staging: Path | None = None, part_rows: int = PART_ROWS,
        write_seconds: float = WRITE_SECONDS, flush_seconds: float = FLUSH_SECONDS,
        provenance: Mapping[str, str] | None = None, settings: Mapping[str, Any] | None = None,
    ) -> Sink:  # fmt: skip
        """The output at `location` (a local directory or an object-store URI) for run
        `run_id`, created if need be, in `format` (`output.format`: Parquet parts, or a Delta
        table writing `partition`). With `restart` our files in it (a Delta table: the partition)
        are replaced. `staging`: the root of object-store outputs' staging folders (default:
        the cache folder). ConfigError or ResumeConflict if it cannot be this job's. Records
        the run's start (in the manifest; a Delta table's commits say it)."""
        if part_rows < 1:
            raise ValueError(f"part_rows must be at least 1 (got {part_rows})")
        out = Folder(location)
        partition = dict(partition or {})
        journal = journal_path(out, staging, partition)
        committer = open_committer(
            format, out, journal, schema, fingerprint, run_id=run_id, partition=partition,
            restart=restart, part_rows=part_rows, provenance=provenance, settings=settings,
        )  # fmt: skip
        sink = cls(
            out, journal, committer.row_schema, fingerprint, committer, run_id=run_id,
            part_rows=part_rows, write_seconds=write_seconds, flush_seconds=flush_seconds,
            lease=held_lease(location),
        )  # fmt: skip
        out.patience = PATIENCE_SECONDS  # it answered: from here on, an outage is waited out
        if sink.lease is not None:  # a shared tier's lease: the commits carry its token
            sink.lease.confirm()
            with sink._writing():
                committer.hold(sink.lease.token)
        return sink

    # ----------------------------------------------------------------------- resume

    def committed(self) -> pa.Table:
        """(id, `_state_hash`) of every final row, before `resume` changes anything: the rows
        committed and in a killed run's journal, less those with a retryable error. Arrow
        columns (about 50 MB for a million rows), read once per Sink."""
        if self._resumed is not None:
            raise RuntimeError("Sink.committed() is what resume() starts from: call it before")
        return self._scanned().committed(self.schema)

    def resume(self, stale: pa.Array | None = None) -> ResumeState:
        """Reconcile the output with a killed or finished run, before any `append`: delete
        temporary files, cut rows with a retryable error and rows whose id is in `stale`,
        commit the journal's rows, and delete it. Each step is safe to repeat if a kill
        interrupts it."""
        if self._resumed is not None:
            raise RuntimeError("Sink.resume() runs once, before the first append")
        id_type = self.schema.field(0).type
        stale = pa.array([], id_type) if stale is None else stale.cast(id_type)
        with self._writing():
            found, self._found = self._scanned(), None
            cut = found.cut(stale)
            self._confirm()
            removed = self.committer.reconcile(cut.drop, cut.retry_rows, cut.stale_rows)
            recovered = self.committer.recover(cut.recover, found.unsent)
            if found.journal:  # deleted once its rows are committed: a kill before repeats
                self.journal_path.unlink(missing_ok=True)
                fsync(self.journal_path.parent)
        self._resumed = ResumeState(
            cut.ids, cut.retry_rows, cut.stale_rows, removed, recovered, found.duplicates,
            found.torn,
        )  # fmt: skip
        return self._resumed

    def expect(self, rows: int) -> None:
        """How many rows this run will hand over in all (for a full disk's message)."""
        self._sizes.expected = rows

    def _writing(self) -> contextlib.AbstractContextManager[None]:
        def needed() -> int:
            unwritten = len(self._pending) + self._journal_rows
            return self._sizes.needed(unwritten, self.part_rows)

        return writing(self.out, self.journal_path, needed)

    def _scanned(self) -> Found:
        if self._found is None:
            self._found = scan(self.committer, self.journal_path, self.schema, self.fingerprint)
        return self._found

    # ----------------------------------------------------------------------- writing

    def append(self, rows: Sequence[RowResult]) -> None:
        """Hand over finished rows. Cheap: they reach the journal within `write_seconds`
        (with `tick` or the next `append`), a batch once `part_rows` have gathered."""
        if self._resumed is None:
            raise RuntimeError("rows appended to a Sink before resume()")
        if self._finished or self._closed:
            raise RuntimeError("rows appended to a Sink after finish or close")
        self._pending.extend(rows)
        self._sizes.handed += len(rows)
        self.tick()

    def _confirm(self) -> None:
        """LeaseLost when the output's lease is no longer surely ours (nothing to check
        without a tier)."""
        if self.lease is not None:
            self.lease.confirm()

    def check(self) -> OutputError | None:
        """The sink `broken` once the output's lease is lost: the driver's check, each turn;
        returns `broken`."""
        if self.broken is None:
            try:
                self._confirm()
            except LeaseLost as exc:
                self.broken = exc
        return self.broken

    def steady(self) -> bool:
        """Whether new requests may go (the output's lease confirmed lately, or no lease)."""
        return self.lease is None or self.lease.steady()

    def tick(self) -> None:
        """Write the rows handed over to the journal and sync it, each when it is due."""
        self.check()
        now = time.monotonic()
        with self._writing():
            if self._pending and now - self._written >= self.write_seconds:
                self._write_pending()
                self._written = now
            if self._journal is not None and now - self._synced >= self.flush_seconds:
                self._journal.sync()
                self._synced = now

    def _persist(self) -> None:
        """Everything handed over into the journal, synced: safe from a crash on return."""
        with self._writing():
            if self._pending:
                self._write_pending()
            if self._journal is not None:
                self._journal.sync()
        self._written = self._synced = time.monotonic()

    def _write_pending(self) -> None:
        rows, self._pending = self._pending, []
        if self._journal is None:
            self.journal_path.parent.mkdir(parents=True, exist_ok=True)
            self._journal = self._new_journal()
        while rows:
            room = self.part_rows - self._journal_rows if self.broken is None else len(rows)
            chunk, rows = rows[:room], rows[room:]
            table = self._table(chunk)
            self._sizes.saw(table.num_rows, table.nbytes)
            self._journal.append(table)
            self._journaled.append(table)
            self._journal_rows += table.num_rows
            if self._journal_rows >= self.part_rows and self.broken is None:
                self._rotate(self._journal)

    def _table(self, rows: Sequence[RowResult]) -> pa.Table:
        """Rows as a table of the output's schema, its `K__abstain` columns counted."""
        table = to_table(rows, self.schema, self.run_id)
        for key, (kept, answered) in kept_counts(table).items():
            tally = self._kept.setdefault(key, [0, 0])
            tally[0] += kept
            tally[1] += answered
        return table

    def _new_journal(self) -> JournalWriter:
        self._header = self.committer.header()
        return JournalWriter.create(self.journal_path, self.schema, self.fingerprint, self._header)

    def _rotate(self, journal: JournalWriter) -> None:
        """The journal's rows become a batch (from memory), committed; then the journal starts
        over: emptied, or a new one when its header changes (a Delta batch's sequence; a kill
        in between: the resume finds the rows committed and drops the copies). A batch that
        cannot be committed (short of a full disk) leaves its rows in the journal, which goes
        on taking rows: the sink is `broken`, for the driver to end the run."""
        try:
            self._confirm()
            self.committer.commit(pa.concat_tables(self._journaled))
        except OSError as exc:
            if is_full(exc):
                raise
            self.broken = cannot_write(self.out, exc)
            return
        except OutputError as exc:
            self.broken = exc
            return
        if self.committer.header() == self._header:
            journal.reset()
        else:
            journal.close()
            self._journal = self._new_journal()
        self._journaled, self._journal_rows = [], 0

    def finish(self, summary: Mapping[str, Any], ended_how: Ending = "finished") -> dict[str, Any]:
        """End the run: every row handed over committed, the journal deleted, and the run's
        end, `ended_how` and `summary` recorded. Also after `close`, and for a run that was
        stopped or failed (whatever was finished is kept). Returns the summary as recorded:
        with a calibration's abstention, the rows of this run kept per question."""
        if self._finished:
            raise RuntimeError("Sink.finish() called twice")
        with self._writing():
            rest = self._rest() if self._resumed is not None else None
            recorded = dict(summary)
            if self._kept:
                recorded["rows_kept"] = {k: {"kept": n, "answered": of}
                                         for k, (n, of) in self._kept.items()}  # fmt: skip
            self._confirm()
            self.committer.finish(rest, ended_how, recorded)
            if rest is not None:
                self._drop_journal()
            self._finished = True
        return recorded

    def _rest(self) -> pa.Table:
        tables = self._journaled
        if self._pending:
            tables = [*tables, self._table(self._pending)]
        self._pending, self._journaled, self._journal_rows = [], [], 0
        return pa.concat_tables([self.schema.empty_table(), *tables])

    def _drop_journal(self) -> None:
        if self._journal is not None:
            self._journal.close()
            self._journal = None
        journal = self.journal_path
        if journal.exists():  # deleted only once every row in it is committed
            journal.unlink()
            fsync(journal.parent)

    def close(self) -> None:
        """Journal and sync what was handed over, and close the journal (idempotent). After
        an error this keeps every finished row for the resume; after `finish` it does nothing;
        `finish` may still follow it (no more `append`)."""
        if self._finished or self._closed:
            return
        try:
            self._persist()
        finally:
            self._closed = True
            if self._journal is not None:
                self._journal.close()
                self._journal = None


def open_sink(
    output: OutputConfig, schema: pa.Schema, fingerprint: str, *, run_id: str,
    restart: bool = False, provenance: Mapping[str, str] | None = None,
) -> Sink:  # fmt: skip
    """The sink of a job's `output` config: its format (`output.format`, chosen by the door),
    partition, staging folder, part size and journal sync, for run `run_id`."""
    return Sink.open(
        output.path, schema, fingerprint, run_id=run_id, format=output.format,
        partition=output.partition, restart=restart, staging=output.staging,
        part_rows=output.part_rows, flush_seconds=output.flush_seconds, provenance=provenance,
        settings=output.model_dump(),
    )  # fmt: skip
