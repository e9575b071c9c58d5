"""Flat Parquet out: results become part files that survive kill -9, and a resume starts there.

This is one of the two places that know Parquet (the other is `source`). The output directory
holds one table (DESIGN "Output table"): every part has the schema `output_schema` gives, even
a part of error rows only, so polars, pyarrow and DuckDB read the directory as one table.

    out/
      part-00000-<uuid>.parquet     committed rows, `part_rows` each (the last may hold fewer)
      part-00001-<uuid>.parquet
      _manifest.json                fingerprint, schema, parts, summary (rewritten per part)
      _journal.bin                  rows finished since the last part (only while a run is on)
      .<name>.<uuid>.tmp            a file being written (a kill may leave one; resume deletes it)

Names starting with `_` or `.` are metadata: readers of `part-*.parquet` or of the directory
(pyarrow.dataset ignores them by default) never see the journal or a temporary file as rows.

Commits. A part is written to a hidden temporary name, flushed, fsynced, then renamed into
place with `os.replace`: the rename is the commit, so a part is either whole or absent.
`_manifest.json` is rewritten the same way *after* each part; it is a summary, and on resume
the parts on disk are the truth, so a kill between the two loses nothing.

The journal. A part per few rows would litter a night's run with tiny files; a part per 5,000
rows would lose (and pay again for) up to 5,000 rows on a kill. So finished rows go first to
an append-only journal (`append`): at most every `write_seconds` the rows handed over since
the last write become one framed record (`JournalWriter`), written with one `write(2)`; a
record written is in the page cache and survives kill -9 of this process. Every
`sync_seconds` the journal is fdatasynced (group commit: one sync for every record since the
last), which bounds what a crash of the *machine* can lose. When the journal holds
`part_rows` rows they become one normal part (from memory, not re-read) and the journal is
truncated back to its header; `finish` does the same with the rest and deletes the journal.

Resume. `prepare_resume` deletes temporary files, cuts rows with a retryable error type out of
their parts (the part is rewritten under its own name, again one atomic rename: never two
copies of a row), then recovers the journal: its valid prefix is read (a record torn by a
kill or zero-filled by a crash fails its length or CRC check and ends the prefix), rows whose
id is already in a part are dropped (a kill between a part's rename and the journal's
truncation), retryable rows are dropped to be retried, and the rest become a part before the
journal is deleted. `committed()` then returns the ids that already have a final row.

Nothing here sees the API key; only the answers, the model ID, token counts and error text.
"""

from __future__ import annotations

import os
import re
import struct
import time
import uuid
import zlib
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from pipeline.contract import ChoiceQuestion, NoulQuestion, ScoreQuestion, validate_questions
from pipeline.errors import RETRYABLE_ERROR_TYPES, ConfigError, OutputError, ResumeConflict

MANIFEST = "_manifest.json"
MANIFEST_FORMAT = 1
JOURNAL = "_journal.bin"
JOURNAL_MAGIC = b"EVPJRNL1"  # format 1: the header and record framing JournalWriter documents
PART_ROWS = 5000
WRITE_SECONDS = 0.1  # rows handed to `append` reach the journal (and survive kill -9) this soon
SYNC_SECONDS = 0.5  # the journal is fdatasynced this often (what a machine crash can lose)
LAYOUT_KEY = b"evalpipe.layout"  # schema metadata: which columns belong to which question
META_FIELDS = (
    ("_model", pa.string()),  # the versioned model ID that answered
    ("_input_tokens", pa.int64()),
    ("_error_type", pa.string()),
    ("_error", pa.string()),
)
COMPRESSION = "zstd"
_PART = re.compile(r"^part-(\d{5,})-[0-9a-f]{32}\.parquet$")
_TEMP = re.compile(
    r"^\.(part-\d{5,}-[0-9a-f]{32}\.parquet|_manifest\.json|_journal\.bin)\.[0-9a-f]{32}\.tmp$"
)
_SHOWN_FILES = 5

# One question's place in the table: (key, type, probability keys in criteria order).
Layout = list[tuple[str, str, list[str]]]


@dataclass(slots=True)
class RowResult:
    """The outcome of one input row; plain data, so it pickles across Ray.

    `answers` maps question key -> answer, either `pipeline.contract` answer models or their
    dicts (`model_dump()` / the response JSON); both convert at the same speed (a model is read
    through its `__dict__`), so do not convert models to dicts for the sink's sake.
    """

    id: Any
    answers: Mapping[str, Any] | None = None
    model: str | None = None
    input_tokens: int | None = None
    error_type: str | None = None
    error: str | None = None


# --------------------------------------------------------------------------- schema


def _parsed(questions: Mapping[str, Any]) -> Mapping[str, Any]:
    """Parsed questions; plain dicts (a config's JSON) are parsed with the contract."""
    parsed = (NoulQuestion, ChoiceQuestion, ScoreQuestion)
    if all(isinstance(q, parsed) for q in questions.values()):
        return questions
    return validate_questions(dict(questions))


def _layout(questions: Mapping[str, Any]) -> Layout:
    layout: Layout = []
    for key, question in _parsed(questions).items():
        if isinstance(question, ChoiceQuestion):
            layout.append((key, "choice", list(question.criteria)))
        elif isinstance(question, ScoreQuestion):
            layout.append((key, "score", [str(i) for i in range(len(question.criteria))]))
        else:
            layout.append((key, "noul", []))
    return layout


def _question_fields(key: str, kind: str, probs: list[str]) -> list[tuple[str, pa.DataType, str]]:
    """(column, type, where the name comes from) for one question, in table order."""
    if kind == "noul":
        return [(f"{key}__noul", pa.float64(), f"questions.{key}")]
    head = pa.string() if kind == "choice" else pa.float64()
    fields = [
        (f"{key}__{kind}", head, f"questions.{key}"),
        (f"{key}__confidence", pa.float64(), f"questions.{key}"),
    ]
    what = "option" if kind == "choice" else "level"
    for p in probs:
        fields.append((f"{key}__p__{p}", pa.float64(), f"questions.{key}.criteria {what} {p!r}"))
    return fields


def output_schema(id_name: str, id_type: pa.DataType, questions: Mapping[str, Any]) -> pa.Schema:
    """The output table's schema (DESIGN "Output table"); ConfigError if two names collide.

    The question layout is kept in the schema's metadata (`LAYOUT_KEY`), so `Sink.write` and
    `to_table` need only the schema, and every part file says which column answers what.
    """
    layout = _layout(questions)
    fields: list[tuple[str, pa.DataType, str]] = [(id_name, id_type, f"id column {id_name!r}")]
    for key, kind, probs in layout:
        fields.extend(_question_fields(key, kind, probs))
    fields.extend((name, t, "the tool's own columns") for name, t in META_FIELDS)
    seen: dict[str, str] = {}
    for name, _, origin in fields:
        if name in seen:
            raise ConfigError(
                f"output column '{name}' would be made twice, by {seen[name]} and by {origin}; "
                "rename a question key, an option or the id column"
            )
        seen[name] = origin
    metadata = {LAYOUT_KEY: orjson.dumps(layout)}
    return pa.schema([pa.field(name, t) for name, t, _ in fields], metadata=metadata)


def _schema_layout(schema: pa.Schema) -> Layout:
    raw = (schema.metadata or {}).get(LAYOUT_KEY)
    if raw is None:
        raise ValueError("schema has no question layout; build it with sink.output_schema")
    return [(key, kind, list(probs)) for key, kind, probs in orjson.loads(raw)]


# --------------------------------------------------------------------------- table


def _answer_type(kind: str, probs: list[str]) -> pa.StructType:
    if kind == "noul":
        return pa.struct([("noul", pa.float64())])
    head = pa.string() if kind == "choice" else pa.float64()
    distribution = pa.struct([(p, pa.float64()) for p in probs])
    return pa.struct([(kind, head), ("confidence", pa.float64()), ("probabilities", distribution)])


def _answer_columns(
    results: Sequence[RowResult], key: str, kind: str, probs: list[str]
) -> list[pa.Array]:
    """One question's columns: Arrow converts the answer dicts to a struct in C++, then the
    struct is flattened (flatten() carries a missing answer's null into every child)."""
    dicts: list[Any] = []
    for result in results:
        answer = result.answers.get(key) if result.answers else None
        # A pydantic model keeps its fields in __dict__: reading it costs nothing.
        dicts.append(answer if answer is None or type(answer) is dict else vars(answer))
    columns = pa.array(dicts, type=_answer_type(kind, probs)).flatten()
    if kind == "noul":
        return columns
    return [*columns[:-1], *columns[-1].flatten()]


def to_table(
    results: Sequence[RowResult], schema: pa.Schema, questions: Mapping[str, Any] | None = None
) -> pa.Table:
    """Results as a table of `schema`, built column-wise; values are copied, never rounded.

    `questions` may be left out: the layout stored in the schema's metadata is used. An answer
    for a key that is not a question is ignored; a missing answer gives nulls.
    """
    layout = _layout(questions) if questions is not None else _schema_layout(schema)
    id_field = schema.field(0)
    arrays = [pa.array([r.id for r in results], id_field.type)]
    for key, kind, probs in layout:
        arrays.extend(_answer_columns(results, key, kind, probs))
    arrays.append(pa.array([r.model for r in results], pa.string()))
    arrays.append(pa.array([r.input_tokens for r in results], pa.int64()))
    arrays.append(pa.array([r.error_type for r in results], pa.string()))
    arrays.append(pa.array([r.error for r in results], pa.string()))
    return pa.Table.from_arrays(arrays, schema=schema)


# --------------------------------------------------------------------------- files


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def _fsync_dir(path: Path) -> None:
    """Make renames and deletions in `path` durable (a crash of the machine, not just us)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _atomic_write(path: Path, write: Callable[[Path], None]) -> None:
    """Write `path` through a hidden temporary file, fsync it, and rename it into place."""
    temp = path.with_name(f".{path.name}.{uuid.uuid4().hex}.tmp")
    try:
        write(temp)
        fd = os.open(temp, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(temp, path)
    except BaseException:
        temp.unlink(missing_ok=True)
        raise
    _fsync_dir(path.parent)


def _write_parquet(path: Path, table: pa.Table) -> None:
    _atomic_write(path, lambda temp: pq.write_table(table, temp, compression=COMPRESSION))


def _sequence(part_name: str) -> int:
    match = _PART.match(part_name)
    assert match is not None
    return int(match.group(1))


def _schema_json(schema: pa.Schema) -> list[dict[str, str]]:
    return [{"name": field.name, "type": str(field.type)} for field in schema]


# --------------------------------------------------------------------------- journal

_FRAME = struct.Struct("<II")  # payload length, CRC-32 of the payload


def _frame(payload: Any) -> list[Any]:
    return [_FRAME.pack(len(payload), zlib.crc32(payload)), payload]


def _journal_header(schema: pa.Schema, fingerprint: str) -> bytes:
    meta = {"format": 1, "fingerprint": fingerprint, "schema": _schema_json(schema)}
    data = orjson.dumps(meta)
    data += b" " * (-len(data) % 8)  # keeps every record's payload 8-byte aligned
    return b"".join([JOURNAL_MAGIC, *_frame(data)])


class JournalWriter:
    """The journal, open for appending: rows finished but not yet in a part.

    Layout: `JOURNAL_MAGIC` (8 bytes), then frames. A frame is `<u32 length><u32 crc32>`
    (little-endian) and `length` bytes of payload. The first frame is the header, JSON
    (format, fingerprint, schema); each later one is one Arrow IPC record-batch message of the
    output schema (`RecordBatch.serialize`, read back by `read_journal`). Payload lengths are
    multiples of 8, so payloads stay aligned. The header is written through a temporary file
    and a rename, so a journal on disk always has a whole one; only the last record can be
    torn, and its length or CRC tells.
    """

    def __init__(self, path: Path, schema: pa.Schema, fingerprint: str) -> None:
        header = _journal_header(schema, fingerprint)
        _atomic_write(path, lambda temp: temp.write_bytes(header))
        self.path = path
        self.header_bytes = self.size = len(header)
        self.records = 0
        self.unsynced = False
        self._fd: int | None = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CLOEXEC)

    def append(self, table: pa.Table) -> None:
        """One record per batch, all in one write; on kill -9 they are in the page cache."""
        assert self._fd is not None, "the journal is closed"
        chunks = [part for batch in table.to_batches() for part in _frame(batch.serialize())]
        data = b"".join(chunks)
        written = 0
        try:
            while written < len(data):
                written += os.write(self._fd, memoryview(data)[written:])
        except BaseException:
            # A short write (disk full) would leave a torn record that hides every later one.
            os.ftruncate(self._fd, self.size)
            raise
        self.size += len(data)
        self.records += 1
        self.unsynced = True

    def sync(self) -> None:
        """Group commit: one fdatasync makes every record since the last one crash-proof."""
        if self._fd is not None and self.unsynced:
            os.fdatasync(self._fd)
            self.unsynced = False

    def reset(self) -> None:
        """Back to the header only: its rows are in a part now."""
        assert self._fd is not None, "the journal is closed"
        os.ftruncate(self._fd, self.header_bytes)
        os.fdatasync(self._fd)
        self.size, self.records, self.unsynced = self.header_bytes, 0, False

    def close(self) -> None:
        if self._fd is not None:
            self.sync()
            os.close(self._fd)
            self._fd = None


def _next_frame(data: bytes, offset: int) -> tuple[memoryview, int] | None:
    """The frame at `offset` and the offset after it; None at the end or at a torn frame."""
    if offset + _FRAME.size > len(data):
        return None
    length, crc = _FRAME.unpack_from(data, offset)
    start = offset + _FRAME.size
    end = start + length
    if length == 0 or end > len(data):  # zeros (a crash's hole) or cut short (a kill)
        return None
    payload = memoryview(data)[start:end]
    if zlib.crc32(payload) != crc:
        return None
    return payload, end


def read_journal(path: Path, schema: pa.Schema, fingerprint: str) -> tuple[pa.Table, int]:
    """The journal's valid prefix as a table of `schema`, and how many bytes after it were
    dropped (a torn last record). ResumeConflict if it belongs to another job or is not one."""
    data = path.read_bytes()
    header = _next_frame(data, len(JOURNAL_MAGIC)) if data.startswith(JOURNAL_MAGIC) else None
    if header is None:
        raise ResumeConflict(
            f"output dir '{path.parent}' has an unreadable {JOURNAL}; use --restart to start "
            f"over, or delete {JOURNAL} to give up the rows it holds"
        )
    meta = orjson.loads(bytes(header[0]))
    if meta.get("fingerprint") != fingerprint or meta.get("schema") != _schema_json(schema):
        raise ResumeConflict(
            f"output dir '{path.parent}' has a {JOURNAL} written by a job with a different "
            "config; use --restart to start over or choose another output.path"
        )
    batches = []
    offset = header[1]
    while (frame := _next_frame(data, offset)) is not None:
        payload, offset = frame
        try:
            batches.append(pa.ipc.read_record_batch(pa.py_buffer(payload), schema))
        except (pa.ArrowException, EOFError) as exc:  # its CRC matched: not a torn write
            raise ResumeConflict(
                f"output dir '{path.parent}' has a damaged {JOURNAL} ({exc}); use --restart "
                f"to start over, or delete {JOURNAL} to give up the rows it holds"
            ) from None
    return pa.Table.from_batches(batches, schema), len(data) - offset


# --------------------------------------------------------------------------- resume state


@dataclass(frozen=True)
class ResumeState:
    """What `prepare_resume` found: final ids, rows kept, rows cut out to be retried."""

    ids: set[Any]
    rows: int
    retry_rows: int  # rows with a retryable error, cut out of parts or the journal
    temp_files_removed: int
    journal_rows: int = 0  # rows recovered from the journal into a part
    journal_duplicates: int = 0  # journal rows already in a part (a kill mid-rotation)
    journal_torn_bytes: int = 0  # a torn last record, dropped


# --------------------------------------------------------------------------- sink


class Sink:
    """The output directory of one job: parts, journal, commits, manifest and resume (module
    docstring). One writer per directory at a time (the driver); readers may read while it
    writes.

        sink = Sink(out_dir, schema, fingerprint, part_rows=5000)
        done, rows = sink.committed()     # resume: ids not to send again
        sink.append(rows)                 # cheap; call as results complete
        sink.tick()                       # call now and then: writes and syncs when due
        sink.finish(summary)              # the rest into a part, final manifest
        sink.close()                      # instead of finish on an error: rows stay journaled
    """

    def __init__(
        self,
        out_dir: Path,
        schema: pa.Schema,
        fingerprint: str,
        *,
        restart: bool = False,
        part_rows: int = PART_ROWS,
        write_seconds: float = WRITE_SECONDS,
        sync_seconds: float = SYNC_SECONDS,
    ) -> None:
        if part_rows < 1:
            raise ValueError(f"part_rows must be at least 1 (got {part_rows})")
        self.dir = Path(out_dir)
        self.schema = schema
        self.fingerprint = fingerprint
        self.part_rows = part_rows
        self.write_seconds = write_seconds
        self.sync_seconds = sync_seconds
        _schema_layout(schema)  # a schema without the layout fails here, not at the first write
        self._make_dir()
        self._refuse_foreign_parquet()
        manifest = self._read_manifest()
        if restart:
            self._clear()
            manifest = None
        else:
            self._check_resumable(manifest)
        self._created = manifest["created"] if manifest else _now()
        self._parts: dict[str, int] = {}
        self._next = 0
        self._resume: ResumeState | None = None
        self._summary: dict[str, Any] | None = None
        self._pending: list[RowResult] = []  # handed to append, not yet in the journal
        self._journal: JournalWriter | None = None
        self._journaled: list[pa.Table] = []  # the journal's rows, kept to make its part
        self._journal_rows = 0
        self._written = self._synced = time.monotonic()
        self._finished = self._closed = False
        if manifest is None:
            self._write_manifest()  # a fresh dir says whose it is before the first part lands

    # ----------------------------------------------------------------------- opening

    def _make_dir(self) -> None:
        try:
            self.dir.mkdir(parents=True, exist_ok=True)
        except FileExistsError:
            raise ConfigError(f"output.path '{self.dir}' exists and is not a directory") from None
        except OSError as exc:
            reason = exc.strerror or str(exc)
            raise ConfigError(f"output.path '{self.dir}' cannot be created: {reason}") from None

    def _names(self) -> list[str]:
        return sorted(os.listdir(self.dir))

    def _part_names(self) -> list[str]:
        return [name for name in self._names() if _PART.match(name)]

    def _refuse_foreign_parquet(self) -> None:
        """Readers take every *.parquet in the dir as rows: someone else's would mix in."""
        foreign = [
            name
            for name in self._names()
            if name.lower().endswith(".parquet")
            and not name.startswith(("_", "."))
            and not _PART.match(name)
        ]
        if foreign:
            shown = ", ".join(foreign[:_SHOWN_FILES]) + (
                ", ..." if len(foreign) > _SHOWN_FILES else ""
            )
            raise ConfigError(
                f"output.path '{self.dir}' holds Parquet files this tool did not write "
                f"({shown}); move them away or choose another output.path"
            )

    def _read_manifest(self) -> dict[str, Any] | None:
        path = self.dir / MANIFEST
        try:
            manifest = orjson.loads(path.read_bytes())
        except FileNotFoundError:
            return None
        except (OSError, orjson.JSONDecodeError) as exc:
            raise ResumeConflict(
                f"output dir '{self.dir}' has an unreadable {MANIFEST} ({exc}); use --restart "
                "to start over or choose another output.path"
            ) from None
        return manifest if isinstance(manifest, dict) else {}

    def _check_resumable(self, manifest: dict[str, Any] | None) -> None:
        if manifest is None:
            if self._part_names() or (self.dir / JOURNAL).exists():
                raise ResumeConflict(
                    f"output dir '{self.dir}' holds output files but no {MANIFEST}, so its config "
                    "is unknown; use --restart to start over or choose another output.path"
                )
            return
        if manifest.get("fingerprint") != self.fingerprint:
            raise ResumeConflict(
                f"output dir '{self.dir}' was written by a job with a different config "
                "(questions, model or state mapping); use --restart to start over or choose "
                "another output.path"
            )
        if manifest.get("schema") != _schema_json(self.schema):
            raise ResumeConflict(
                f"output dir '{self.dir}' was written with another output schema (has the id "
                "column's type changed?); use --restart to start over or choose another "
                "output.path"
            )

    def _clear(self) -> None:
        """--restart: delete our own files only; anything else in the dir stays."""
        for name in self._names():
            if _PART.match(name) or _TEMP.match(name) or name in (MANIFEST, JOURNAL):
                (self.dir / name).unlink(missing_ok=True)
        _fsync_dir(self.dir)

    # ----------------------------------------------------------------------- resume

    def prepare_resume(self) -> ResumeState:
        """Reconcile the dir with a killed or finished run; idempotent within one Sink.

        Deletes leftover temporary files, cuts rows with a retryable error out of their parts,
        recovers the journal into a part, and rebuilds the manifest's part list from the parts
        on disk (the truth). Every step is safe to repeat if a kill interrupts it.
        """
        if self._resume is not None:
            return self._resume
        removed = 0
        for name in self._names():
            if _TEMP.match(name):
                (self.dir / name).unlink(missing_ok=True)
                removed += 1
        ids: set[Any] = set()
        seen: set[Any] = set()  # every id in a part, retryable ones too
        rows = retry = 0
        for name in self._part_names():
            kept, cut = self._reconcile_part(name, ids, seen)
            rows, retry = rows + kept, retry + cut
            self._next = max(self._next, _sequence(name) + 1)
        recovered, cut, duplicates, torn = self._recover_journal(ids, seen)
        rows, retry = rows + recovered, retry + cut
        if removed or retry:
            _fsync_dir(self.dir)
        self._resume = ResumeState(ids, rows, retry, removed, recovered, duplicates, torn)
        self._write_manifest()
        return self._resume

    def _reconcile_part(self, name: str, ids: set[Any], seen: set[Any]) -> tuple[int, int]:
        """Add one part's final ids to `ids` (all to `seen`); cut its retryable rows.
        Returns (kept, cut)."""
        path = self.dir / name
        try:
            if not pq.read_schema(path).equals(self.schema, check_metadata=False):
                raise ResumeConflict(
                    f"output part '{path}' has another schema than this job's; use --restart "
                    "to start over or choose another output.path"
                )
            table = pq.read_table(path, columns=[self.schema.names[0], "_error_type"])
        except (pa.ArrowException, OSError) as exc:
            raise ResumeConflict(
                f"output part '{path}' cannot be read ({exc}); use --restart to start over"
            ) from None
        seen.update(table.column(0).to_pylist())
        keep = pc.invert(_retryable(table))
        kept = pc.sum(keep).as_py() or 0
        cut = table.num_rows - kept
        ids.update(table.column(0).filter(keep).to_pylist())
        if cut:
            self._rewrite_without(path, keep, kept)
        if kept:
            self._parts[name] = kept
        return kept, cut

    def _rewrite_without(self, path: Path, keep: pa.ChunkedArray, kept: int) -> None:
        """Replace a part by its kept rows under the same name: one atomic step, no duplicate."""
        if kept == 0:
            path.unlink()
            return
        table = pq.read_table(path, schema=self.schema).filter(keep)
        _write_parquet(path, table.replace_schema_metadata(self.schema.metadata))

    def _recover_journal(self, ids: set[Any], seen: set[Any]) -> tuple[int, int, int, int]:
        """A killed run's journal into a part, then deleted: (recovered, cut, duplicates, torn).

        Runs after the parts are reconciled, and writes the part before the journal goes, so a
        kill anywhere in here is repaired by the next resume: rows already in a part (`seen`)
        are dropped, retryable ones never written."""
        path = self.dir / JOURNAL
        if not path.exists():
            return 0, 0, 0, 0
        table, torn = read_journal(path, self.schema, self.fingerprint)
        fresh = pc.invert(pc.is_in(table.column(0), pa.array(list(seen), table.schema[0].type)))
        duplicates = table.num_rows - (pc.sum(fresh).as_py() or 0)
        table = table.filter(fresh)
        retry = _retryable(table)
        cut = pc.sum(retry).as_py() or 0
        table = table.filter(pc.invert(retry))
        for start in range(0, table.num_rows, self.part_rows):
            self._commit(table.slice(start, self.part_rows), manifest=False)
        ids.update(table.column(0).to_pylist())
        path.unlink()
        _fsync_dir(self.dir)
        return table.num_rows, cut, duplicates, torn

    def committed(self) -> tuple[set[Any], int]:
        """(ids with a final result, rows in the table) as this run starts; see prepare_resume.

        Computed once per Sink: later calls return the same snapshot, not this run's writes.
        """
        state = self.prepare_resume()
        return state.ids, state.rows

    # ----------------------------------------------------------------------- writing

    def append(self, rows: Sequence[RowResult]) -> None:
        """Hand over finished rows. Cheap: they reach the journal within `write_seconds`
        (with `tick` or the next `append`), a part once `part_rows` have gathered."""
        if self._finished or self._closed:
            raise RuntimeError("rows appended to a Sink after finish or close")
        self._pending.extend(rows)
        self.tick()

    def tick(self) -> None:
        """Write the rows handed over to the journal and sync it, each when it is due."""
        now = time.monotonic()
        with self._writing():
            if self._pending and now - self._written >= self.write_seconds:
                self._write_pending()
                self._written = now
            if self._journal is not None and now - self._synced >= self.sync_seconds:
                self._journal.sync()
                self._synced = now

    def flush(self) -> None:
        """Everything handed over into the journal, synced: safe from a crash on return."""
        with self._writing():
            if self._pending:
                self._write_pending()
            if self._journal is not None:
                self._journal.sync()
        self._written = self._synced = time.monotonic()

    @contextmanager
    def _writing(self) -> Iterator[None]:
        """A failed write (disk full, permissions) is one OutputError; the rows already
        journaled or committed stay valid for a resume."""
        try:
            yield
        except OSError as exc:
            reason = exc.strerror or exc.__class__.__name__
            raise OutputError(
                f"output.path '{self.dir}': cannot write ({reason}); rows committed so far are "
                "kept: fix it and run the same command to resume"
            ) from None

    def _write_pending(self) -> None:
        rows, self._pending = self._pending, []
        journal = self._open_journal()
        while rows:
            room = self.part_rows - self._journal_rows
            chunk, rows = rows[:room], rows[room:]
            table = to_table(chunk, self.schema)
            journal.append(table)
            self._journaled.append(table)
            self._journal_rows += table.num_rows
            if self._journal_rows >= self.part_rows:
                self._rotate(journal)

    def _open_journal(self) -> JournalWriter:
        if self._journal is None:
            self.prepare_resume()  # a killed run's journal is recovered before a new one starts
            self._journal = JournalWriter(self.dir / JOURNAL, self.schema, self.fingerprint)
        return self._journal

    def _rotate(self, journal: JournalWriter) -> None:
        """The journal's rows become a part (from memory); then the journal starts over."""
        self._commit(pa.concat_tables(self._journaled))
        journal.reset()  # after the part's rename; a kill in between: resume drops the copies
        self._journaled, self._journal_rows = [], 0

    def write(self, results: Sequence[RowResult]) -> str:
        """Commit `results` as one part now, past the journal; returns its file name ("" for
        no results). `append` is the way for a running job; this one suits bulk loads."""
        if not results:
            return ""
        self.prepare_resume()  # a part must never land beside rows that are due to be cut
        return self._commit(to_table(results, self.schema))

    def _commit(self, table: pa.Table, manifest: bool = True) -> str:
        name = f"part-{self._next:05d}-{uuid.uuid4().hex}.parquet"
        self._next += 1
        _write_parquet(self.dir / name, table)
        self._parts[name] = table.num_rows
        if manifest:
            self._write_manifest()
        return name

    def finish(self, summary: Mapping[str, Any]) -> None:
        """Commit every row handed over into parts, delete the journal, and write the final
        manifest with the job's summary (counts etc.)."""
        with self._writing():
            self._finish(summary)

    def _finish(self, summary: Mapping[str, Any]) -> None:
        self.prepare_resume()
        tables = self._journaled
        if self._pending:
            tables = [*tables, to_table(self._pending, self.schema)]
        self._pending, self._journaled, self._journal_rows = [], [], 0
        if tables:
            table = pa.concat_tables(tables)
            for start in range(0, table.num_rows, self.part_rows):
                self._commit(table.slice(start, self.part_rows), manifest=False)
        if self._journal is not None:
            self._journal.close()
            self._journal = None
        journal = self.dir / JOURNAL
        if journal.exists():  # deleted only once every row in it is in a part
            journal.unlink()
            _fsync_dir(self.dir)
        self._finished = True
        self._summary = dict(summary)
        self._write_manifest(finished=_now())

    def close(self) -> None:
        """Journal and sync what was handed over, and close the journal (idempotent). After
        an error this keeps every finished row for the resume; after `finish` it does nothing;
        `finish` may still follow it (no more `append`)."""
        if self._finished or self._closed:
            return
        try:
            self.flush()
        finally:
            self._closed = True
            if self._journal is not None:
                self._journal.close()
                self._journal = None

    def __enter__(self) -> Sink:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _write_manifest(self, finished: str | None = None) -> None:
        manifest = {
            "format": MANIFEST_FORMAT,
            "fingerprint": self.fingerprint,
            "created": self._created,
            "updated": _now(),
            "finished": finished,
            "schema": _schema_json(self.schema),
            "rows": sum(self._parts.values()),
            "parts": [{"name": n, "rows": r} for n, r in sorted(self._parts.items())],
            "summary": self._summary,
        }
        data = orjson.dumps(manifest, option=orjson.OPT_INDENT_2, default=str)
        _atomic_write(self.dir / MANIFEST, lambda temp: temp.write_bytes(data))

    @property
    def parts(self) -> dict[str, int]:
        """Committed part names -> rows, as this Sink knows them."""
        return dict(self._parts)

    @property
    def journal_rows(self) -> int:
        """Rows in the journal now (not yet in a part)."""
        return self._journal_rows


def _retryable(table: pa.Table) -> pa.ChunkedArray:
    """Per row: does its error type deserve another try on resume?"""
    kinds = pa.array(sorted(RETRYABLE_ERROR_TYPES))
    return pc.fill_null(pc.is_in(table["_error_type"], kinds), False)
