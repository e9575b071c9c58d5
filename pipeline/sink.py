"""Flat Parquet out: results become part files that survive kill -9, and a resume starts there.

This is one of the two places that know Parquet (the other is `source`). The output directory
holds one table (DESIGN "Output table"): every part has the schema `output_schema` gives, even
a part of error rows only, so polars, pyarrow and DuckDB read the directory as one table.

Commits. A part is written to `.part-NNNNN-<uuid>.parquet.<uuid>.tmp` (a name readers ignore),
flushed, fsynced, then renamed into place with `os.replace`: the rename is the commit, so a
part is either whole or absent. `_manifest.json` (fingerprint, schema, parts, summary) is
rewritten the same way *after* each part; it is a summary, and on resume the parts on disk are
the truth, so a kill between the two loses nothing.

Resume. `committed()` returns the ids that already have a final row (answered, or an error not
worth retrying). Rows with a retryable error type are cut out of their parts first (the part is
rewritten under its own name, again with one atomic rename: never two copies of a row), so when
they are retried and written again every id is in the table exactly once.

Nothing here sees the API key; only the answers, the model ID, token counts and error text.
"""

from __future__ import annotations

import os
import re
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from pipeline.contract import ChoiceQuestion, NoulQuestion, ScoreQuestion, validate_questions
from pipeline.errors import RETRYABLE_ERROR_TYPES, ConfigError, ResumeConflict

MANIFEST = "_manifest.json"
MANIFEST_FORMAT = 1
LAYOUT_KEY = b"evalpipe.layout"  # schema metadata: which columns belong to which question
META_FIELDS = (
    ("_model", pa.string()),  # the versioned model ID that answered
    ("_input_tokens", pa.int64()),
    ("_error_type", pa.string()),
    ("_error", pa.string()),
)
COMPRESSION = "zstd"
_PART = re.compile(r"^part-(\d{5,})-[0-9a-f]{32}\.parquet$")
_TEMP = re.compile(r"^\.(part-\d{5,}-[0-9a-f]{32}\.parquet|_manifest\.json)\.[0-9a-f]{32}\.tmp$")
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


@dataclass(frozen=True)
class ResumeState:
    """What `prepare_resume` found: final ids, rows kept, rows cut out to be retried."""

    ids: set[Any]
    rows: int
    retry_rows: int
    temp_files_removed: int


# --------------------------------------------------------------------------- sink


class Sink:
    """The output directory of one job: parts, commits, manifest and resume (module docstring).

    One writer per directory at a time (the driver); readers may read while it writes.
    """

    def __init__(
        self, out_dir: Path, schema: pa.Schema, fingerprint: str, *, restart: bool = False
    ) -> None:
        self.dir = Path(out_dir)
        self.schema = schema
        self.fingerprint = fingerprint
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
            if self._part_names():
                raise ResumeConflict(
                    f"output dir '{self.dir}' holds part files but no {MANIFEST}, so its config "
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
            if _PART.match(name) or _TEMP.match(name) or name == MANIFEST:
                (self.dir / name).unlink(missing_ok=True)
        _fsync_dir(self.dir)

    # ----------------------------------------------------------------------- resume

    def prepare_resume(self) -> ResumeState:
        """Reconcile the dir with a killed or finished run; idempotent within one Sink.

        Deletes leftover temporary files, cuts rows with a retryable error out of their parts,
        and rebuilds the manifest's part list from the parts on disk (the truth).
        """
        if self._resume is not None:
            return self._resume
        removed = 0
        for name in self._names():
            if _TEMP.match(name):
                (self.dir / name).unlink(missing_ok=True)
                removed += 1
        ids: set[Any] = set()
        rows = retry = 0
        for name in self._part_names():
            kept, cut = self._reconcile_part(name, ids)
            rows, retry = rows + kept, retry + cut
            self._next = max(self._next, _sequence(name) + 1)
        if removed or retry:
            _fsync_dir(self.dir)
        self._resume = ResumeState(ids, rows, retry, removed)
        self._write_manifest()
        return self._resume

    def _reconcile_part(self, name: str, ids: set[Any]) -> tuple[int, int]:
        """Add one part's final ids to `ids`; cut its retryable rows. Returns (kept, cut)."""
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
        retry = pc.fill_null(
            pc.is_in(table["_error_type"], pa.array(sorted(RETRYABLE_ERROR_TYPES))), False
        )
        cut = pc.sum(retry).as_py() or 0
        keep = pc.invert(retry)
        ids.update(table.column(0).filter(keep).to_pylist())
        kept = table.num_rows - cut
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

    def committed(self) -> tuple[set[Any], int]:
        """(ids with a final result, rows in the table) as this run starts; see prepare_resume.

        Computed once per Sink: later calls return the same snapshot, not this run's writes.
        """
        state = self.prepare_resume()
        return state.ids, state.rows

    # ----------------------------------------------------------------------- writing

    def write(self, results: Sequence[RowResult]) -> str:
        """Commit `results` as one part and return its file name ("" for no results)."""
        if not results:
            return ""
        self.prepare_resume()  # a part must never land beside rows that are due to be cut
        table = to_table(results, self.schema)
        name = f"part-{self._next:05d}-{uuid.uuid4().hex}.parquet"
        self._next += 1
        _write_parquet(self.dir / name, table)
        self._parts[name] = table.num_rows
        self._write_manifest()
        return name

    def finish(self, summary: Mapping[str, Any]) -> None:
        """Write the final manifest with the job's summary (counts etc.)."""
        self.prepare_resume()
        self._summary = dict(summary)
        self._write_manifest(finished=_now())

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
