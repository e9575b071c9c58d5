"""The output of one job: finished rows in, Parquet parts out, and a resume from there.

The Sink decides when each file of the output changes (the input is `source`'s); the rest has
its own module: the table's shape `table`, the journal's framing `journal`, atomic commits
`files`, where files live `stores`, our file names and the checks on opening `outdir`, the
manifest and its runs `manifest`, what a resume reads back and cuts `resume`, a full disk
`space`.

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
and the manifest after it.

Writing. Finished rows handed to `append` reach the journal within `write_seconds` (one record
for all of them; then they survive kill -9), and the journal is synced every `flush_seconds`
(what a crash of the machine can lose). When it holds `part_rows` rows they become one part
(from memory, not re-read) and the journal starts over; `finish` does the same with the rest
and deletes the journal, whether the run finished, was stopped or failed.

Resume. `committed` reads, without changing anything, the (id, `_state_hash`) pairs of every
final row (parts and a killed run's journal, less the rows with a retryable error), so that the
driver can tell which of them are stale. `resume` then deletes temporary files, cuts the
retryable and the stale rows out of their parts (each affected part replaced once by a new
part of the same sequence number: never two copies of a row once a resume is through), and
turns the journal's valid prefix into a part (rows already in a part, retryable or stale ones
dropped) before deleting it.

Nothing here sees the API key; only the answers, the model ID, token counts and error text.
"""

from __future__ import annotations

import contextlib
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pyarrow as pa

from evalpipe.errors import ConfigError, OutputError, OutputFull, first_line
from evalpipe.output.journal import JournalWriter
from evalpipe.output.manifest import Ending, Manifest, read_manifest
from evalpipe.output.outdir import (
    JOURNAL,
    check_resumable,
    clear,
    make_dir,
    part_name,
    refuse_foreign_parquet,
    remove_temp_files,
)
from evalpipe.output.resume import ResumeState, Scan, reconcile, scan
from evalpipe.output.space import RowSizes, full_error, is_full
from evalpipe.output.table import (
    SAMPLE_WEIGHT,
    RowResult,
    schema_json,
    schema_layout,
    to_table,
    with_sample_weight,
)
from evalpipe.stores import PATIENCE_SECONDS, Folder, Location, fsync, local_dir

PART_ROWS = 5000
WRITE_SECONDS = 0.1  # rows handed to `append` reach the journal (and survive kill -9) this soon
FLUSH_SECONDS = 0.5  # the journal is synced this often (what a machine crash can lose)


class Sink:
    """The output directory of one job (module docstring). One writer at a time (the driver);
    readers may read while it writes.

        sink = Sink.open(out, schema, fingerprint, run_id=run_id)
        pairs = sink.committed()          # optional: (id, _state_hash) of the final rows
        state = sink.resume(stale_ids)    # before any append; state.ids: not to send again
        sink.append(rows)                 # cheap; call as results complete
        sink.tick()                       # call now and then: writes and syncs when due
        sink.finish(summary, "finished")  # or "stopped" / "failed": the rest into parts
        sink.close()                      # without finish (a second signal): rows journaled
    """

    def __init__(
        self,
        out: Folder,
        journal: Path,
        schema: pa.Schema,
        fingerprint: str,
        manifest: Manifest,
        *,
        run_id: str,
        part_rows: int = PART_ROWS,
        write_seconds: float = WRITE_SECONDS,
        flush_seconds: float = FLUSH_SECONDS,
    ) -> None:
        """Keeps what `open` found; does no I/O. Use `open`."""
        if part_rows < 1:
            raise ValueError(f"part_rows must be at least 1 (got {part_rows})")
        schema_layout(schema)  # a schema without the layout fails here, not at the first write
        self.out = out
        self.journal_path = journal
        self.schema = schema
        self.fingerprint = fingerprint
        self.run_id = run_id
        self.part_rows = part_rows
        self.write_seconds = write_seconds
        self.flush_seconds = flush_seconds
        self._manifest = manifest
        self._next = 0  # the next part's sequence number
        self._scan: Scan | None = None
        self._resumed: ResumeState | None = None
        self._pending: list[RowResult] = []  # handed to append, not yet in the journal
        self._journal: JournalWriter | None = None
        self._journaled: list[pa.Table] = []  # the journal's rows, kept to make its part
        self._journal_rows = 0
        self._written = self._synced = time.monotonic()
        self._finished = self._closed = False
        self._sizes = RowSizes()  # what is left to write, for the message of a full disk
        # A part or the manifest could not be written (a store that stayed away): rows still
        # go to the journal, so what is in flight is kept, but the run is to end with this.
        self.broken: OutputError | None = None

    @classmethod
    def open(
        cls,
        location: Location,
        schema: pa.Schema,
        fingerprint: str,
        *,
        run_id: str,
        restart: bool = False,
        staging: Path | None = None,
        part_rows: int = PART_ROWS,
        write_seconds: float = WRITE_SECONDS,
        flush_seconds: float = FLUSH_SECONDS,
        provenance: Mapping[str, str] | None = None,
    ) -> Sink:
        """The output at `location` (a local directory or an object-store URI) for run
        `run_id`, created if need be; with `restart` our files in it are deleted first.
        `staging`: the root of object-store outputs' staging folders (default: the cache
        folder). ConfigError or ResumeConflict if it cannot be this job's. Records the run's
        start in the manifest."""
        out = Folder(location)
        journal = journal_path(out, staging)
        with _opening(out, journal):
            make_dir(out)
            refuse_foreign_parquet(out)
            stored = None if restart else read_manifest(out)
            if _sampled(stored):  # a run into a sampled output keeps its `_sample_weight`
                schema = with_sample_weight(schema)
            if not restart:
                check_resumable(out, journal, stored, fingerprint, schema)
        manifest = Manifest.carry_on(stored, fingerprint, schema_json(schema))
        manifest.begin_run(run_id, provenance)
        sink = cls(
            out, journal, schema, fingerprint, manifest, run_id=run_id, part_rows=part_rows,
            write_seconds=write_seconds, flush_seconds=flush_seconds,
        )  # fmt: skip
        with _writing(out, journal):
            if restart:
                clear(out, journal)
            manifest.write(out)  # a fresh output says whose it is before the first part lands
        out.patience = PATIENCE_SECONDS  # it answered: from here on, an outage is waited out
        return sink

    # ----------------------------------------------------------------------- resume

    def committed(self) -> pa.Table:
        """(id, `_state_hash`) of every final row on disk, before `resume` changes anything:
        the rows in parts and in a killed run's journal, less those with a retryable error.
        Arrow columns (about 50 MB for a million rows), read once per Sink."""
        if self._resumed is not None:
            raise RuntimeError("Sink.committed() is what resume() starts from: call it before")
        return self._scanned().committed()

    def resume(self, stale: pa.Array | None = None) -> ResumeState:
        """Reconcile the dir with a killed or finished run, before any `append`: delete
        temporary files, cut rows with a retryable error and rows whose id is in `stale` out
        of their parts, recover the journal into a part, rebuild the manifest's part list from
        the parts on disk (the truth). Each step is safe to repeat if a kill interrupts it."""
        if self._resumed is not None:
            raise RuntimeError("Sink.resume() runs once, before the first append")
        id_type = self.schema.field(0).type
        stale = pa.array([], id_type) if stale is None else stale.cast(id_type)
        with self._writing():
            found, self._scan = self._scanned(), None
            removed = remove_temp_files(self.out)
            done = reconcile(found, stale, self.out, self.schema, removed)
            self._manifest.parts, self._next = done.parts, done.next_sequence
            if done.journal is not None:
                self._commit_all(done.journal)  # before the journal goes: a kill here repeats
                self.journal_path.unlink()
            self.out.sync()
            self._manifest.write(self.out)
        self._resumed = done.state
        return done.state

    def expect(self, rows: int) -> None:
        """How many rows this run will hand over in all (for a full disk's message)."""
        self._sizes.expected = rows

    def _writing(self) -> contextlib.AbstractContextManager[None]:
        def needed() -> int:
            unwritten = len(self._pending) + self._journal_rows
            return self._sizes.needed(unwritten, self.part_rows)

        return _writing(self.out, self.journal_path, needed)

    def _scanned(self) -> Scan:
        if self._scan is None:
            self._scan = scan(self.out, self.journal_path, self.schema, self.fingerprint)
        return self._scan

    # ----------------------------------------------------------------------- writing

    def append(self, rows: Sequence[RowResult]) -> None:
        """Hand over finished rows. Cheap: they reach the journal within `write_seconds`
        (with `tick` or the next `append`), a part once `part_rows` have gathered."""
        if self._resumed is None:
            raise RuntimeError("rows appended to a Sink before resume()")
        if self._finished or self._closed:
            raise RuntimeError("rows appended to a Sink after finish or close")
        self._pending.extend(rows)
        self._sizes.handed += len(rows)
        self.tick()

    def tick(self) -> None:
        """Write the rows handed over to the journal and sync it, each when it is due."""
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
            table = to_table(chunk, self.schema, self.run_id)
            self._sizes.saw(table.num_rows, table.nbytes)
            self._journal.append(table)
            self._journaled.append(table)
            self._journal_rows += table.num_rows
            if self._journal_rows >= self.part_rows and self.broken is None:
                self._rotate(self._journal)

    def _new_journal(self) -> JournalWriter:
        return JournalWriter.create(self.journal_path, self.schema, self.fingerprint)

    def _rotate(self, journal: JournalWriter) -> None:
        """The journal's rows become a part (from memory); then the journal starts over. A
        part that cannot be written (short of a full disk) leaves its rows in the journal,
        which goes on taking rows: the sink is `broken`, for the driver to end the run."""
        try:
            self._commit(pa.concat_tables(self._journaled))
        except OSError as exc:
            if is_full(exc):
                raise
            self.broken = _cannot_write(self.out, exc)
            return
        journal.reset()  # after the part's rename; a kill in between: resume drops the copies
        self._journaled, self._journal_rows = [], 0

    def _commit(self, table: pa.Table, manifest: bool = True) -> None:
        name = part_name(self._next, uuid.uuid4().hex)
        self._next += 1
        self.out.write_parquet(name, table)
        self._manifest.parts[name] = table.num_rows
        if manifest:
            self._manifest.write(self.out)

    def _commit_all(self, table: pa.Table) -> None:
        for start in range(0, table.num_rows, self.part_rows):
            self._commit(table.slice(start, self.part_rows), manifest=False)

    def finish(self, summary: Mapping[str, Any], ended_how: Ending = "finished") -> None:
        """End the run: every row handed over into parts, the journal deleted, and the run's
        end, `ended_how` and `summary` in the manifest. Also after `close`, and for a run that
        was stopped or failed (whatever was finished is kept)."""
        if self._finished:
            raise RuntimeError("Sink.finish() called twice")
        with self._writing():
            if self._resumed is not None:
                self._fold()
            self._finished = True
            self._manifest.end_run(self.run_id, ended_how, dict(summary))
            self._manifest.write(self.out)

    def _fold(self) -> None:
        tables = self._journaled
        if self._pending:
            tables = [*tables, to_table(self._pending, self.schema, self.run_id)]
        self._pending, self._journaled, self._journal_rows = [], [], 0
        if tables:
            self._commit_all(pa.concat_tables(tables))
        if self._journal is not None:
            self._journal.close()
            self._journal = None
        journal = self.journal_path
        if journal.exists():  # deleted only once every row in it is in a part
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


def _sampled(manifest: Mapping[str, Any] | None) -> bool:
    """Does the output hold a sample (`evalpipe estimate`'s `_sample_weight` column)?"""
    schema = (manifest or {}).get("schema") or []
    return any(isinstance(f, dict) and f.get("name") == SAMPLE_WEIGHT for f in schema)


def journal_path(out: Folder, staging: Path | None = None) -> Path:
    """Where the journal of output `out` is: in it when it is local, else in its staging
    folder under `staging` (see `stores.staging_dir`)."""
    return local_dir(out.location, staging) / JOURNAL


@contextmanager
def _opening(out: Folder, journal: Path) -> Iterator[None]:
    """An output that cannot be read when a run opens it (no access, no such bucket): one
    ConfigError, before any request is sent; a full disk is an OutputFull."""
    try:
        yield
    except OSError as exc:
        if is_full(exc):
            raise _full(out, journal, exc, None) from None
        raise ConfigError(f"output.path '{out.shown}' cannot be read: {first_line(exc)}") from None


@contextmanager
def _writing(out: Folder, journal: Path, needed: Callable[[], int] | None = None) -> Iterator[None]:
    """A failed write (permissions, a store that went away) is one OutputError, a full disk
    an OutputFull that says where and how much space the rest needs (`needed`); the rows
    already journaled or committed stay valid for a resume."""
    try:
        yield
    except OSError as exc:
        if is_full(exc):
            raise _full(out, journal, exc, needed) from None
        raise _cannot_write(out, exc) from None


def _cannot_write(out: Folder, exc: OSError) -> OutputError:
    return OutputError(
        f"output.path '{out.shown}': cannot write ({first_line(exc)}); rows committed so "
        "far are kept: fix it and run the same command to resume"
    )


def _full(out: Folder, journal: Path, exc: OSError, needed: Callable[[], int] | None) -> OutputFull:
    # The local file systems we write: the journal's (the output's own, when it is local).
    where = Path(exc.filename).parent if isinstance(exc.filename, str) else journal.parent
    return full_error(out.shown, where, exc, needed() if needed else 0)
