"""Open a job's output for the report: its parts, its questions, its manifest, what it lacks.

The report reads the output as README "The output table" documents it, so it reads the output
of any job and of any evalpipe version: the question layout comes from the parts' schema
metadata (`evalpipe.layout`), or from the column names when an older writer left none; the
lineage columns (`_run_id`, `_scored_at`, ...) may be absent, and each section that needs one
says so instead of failing. Everything here only looks at file names, one footer and the
manifest: the rows are read later, by the lazy queries in `data`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq

from evalpipe.errors import InputError, first_line
from evalpipe.input import corpus_files
from evalpipe.output import JOURNAL, LAYOUT_KEY, MANIFEST, part_names, schema_version

PART_GLOB = "part-*.parquet"  # as users read the parts (README); outdir decides what a part is
# Every evalpipe output has had these columns; the lineage columns came later.
REQUIRED = ("_model", "_input_tokens", "_error_type", "_error")
LINEAGE = ("_run_id", "_scored_at", "_state_hash", "_cached", "_reused")
KINDS = ("noul", "choice", "score")


@dataclass(frozen=True, slots=True)
class Question:
    """One question's columns: `key`, its kind, its probability keys in criteria order and
    their column-name parts (`names`, schema version 2; empty: the keys themselves), and the
    schema version of the table (1 named a noul's column `K__noul`)."""

    key: str
    kind: str
    probs: tuple[str, ...] = ()
    names: tuple[str, ...] = ()
    version: int = 2

    @property
    def head(self) -> str:
        """The answer column: p(yes), the chosen option or the expected score."""
        if self.kind == "noul" and self.version >= 2:
            return f"{self.key}__p_true"
        return f"{self.key}__{self.kind}"

    @property
    def confidence(self) -> str:
        """The confidence column (choice and score questions only)."""
        return f"{self.key}__confidence"

    @property
    def columns(self) -> list[str]:
        """Every column of the question, in table order."""
        head = [self.head] if self.kind == "noul" else [self.head, self.confidence]
        return head + [self.prob(p) for p in self.probs]

    def prob(self, name: str) -> str:
        """The column of probability key `name` (an option, or a level index)."""
        if self.names:
            name = self.names[self.probs.index(name)]
        return f"{self.key}__p__{name}"


@dataclass(frozen=True, slots=True)
class Output:
    """A job's output directory, opened: nothing of its rows is read yet."""

    path: Path
    parts: tuple[Path, ...]
    schema: pl.Schema
    questions: tuple[Question, ...]
    manifest: dict[str, Any] | None
    notes: tuple[str, ...] = field(default=())
    journal: bool = False  # a journal: a run is going on or was killed; its rows are not in parts

    @property
    def id_column(self) -> str:
        return next(iter(self.schema))

    def has(self, column: str) -> bool:
        return column in self.schema

    @property
    def missing_lineage(self) -> tuple[str, ...]:
        return tuple(name for name in LINEAGE if name not in self.schema)

    def scan(self) -> pl.LazyFrame:
        """Every committed row, lazily (the glob's files, not the journal or temporary files)."""
        return pl.scan_parquet([str(p) for p in self.parts])


def _part_files(path: Path) -> tuple[Path, ...]:
    if not path.exists():
        raise InputError(f"output '{path}' does not exist; give a job's output.path")
    if not path.is_dir():
        raise InputError(f"output '{path}' is not a directory; give a job's output.path")
    try:
        return tuple(path / name for name in part_names(path))
    except OSError as exc:
        raise InputError(f"output '{path}' cannot be read: {exc.strerror}") from None


def _read_manifest(path: Path) -> dict[str, Any] | None:
    file = path / MANIFEST
    try:
        manifest = orjson.loads(file.read_bytes())
    except FileNotFoundError:
        return None
    except (OSError, orjson.JSONDecodeError) as exc:
        raise InputError(f"'{file}' cannot be read: {first_line(exc)}") from None
    if not isinstance(manifest, dict):
        raise InputError(f"'{file}' is not an evalpipe manifest (not a JSON object)")
    return manifest


def _arrow_schema(part: Path) -> pa.Schema:
    try:
        return pq.read_schema(part)
    except (OSError, pa.ArrowException) as exc:
        raise InputError(f"part '{part}' cannot be read: {first_line(exc)}") from None


def _layout_from_metadata(schema: pa.Schema) -> tuple[Question, ...] | None:
    """The layout the writer stored; None when it is absent or does not match the columns."""
    raw = (schema.metadata or {}).get(LAYOUT_KEY)
    if raw is None:
        return None
    try:
        version = schema_version(schema)
        questions = tuple(
            Question(str(e[0]), str(e[1]), tuple(map(str, e[2])), _names(e), version)
            for e in orjson.loads(raw)
        )
    except (orjson.JSONDecodeError, TypeError, ValueError, IndexError):
        return None
    names = set(schema.names)
    for q in questions:
        if q.kind not in KINDS or not names.issuperset(q.columns):
            return None
    return questions


def _names(entry: list[Any]) -> tuple[str, ...]:
    """A layout entry's column-name parts (schema version 2 stores them fourth)."""
    return tuple(map(str, entry[3])) if len(entry) > 3 else ()


def _layout_from_names(names: list[str]) -> tuple[Question, ...]:
    """Older outputs: `K__noul`, `K__p_true`, `K__choice` or `K__score` name a question; its
    probabilities are the `K__p__*` columns, in table order."""
    questions = []
    for name in names:
        if name.endswith("__p_true") and len(name) > 8:
            questions.append(Question(name[:-8], "noul"))
        for kind in KINDS:
            if name.endswith(f"__{kind}") and len(name) > len(kind) + 2:
                key = name[: -len(kind) - 2]
                prefix = f"{key}__p__"
                probs = tuple(n[len(prefix) :] for n in names if n.startswith(prefix))
                questions.append(Question(key, kind, probs if kind != "noul" else (), (), 1))
    return tuple(questions)


def _questions(schema: pa.Schema) -> tuple[tuple[Question, ...], tuple[str, ...]]:
    stored = _layout_from_metadata(schema)
    if stored is not None:
        return stored, ()
    found = _layout_from_names(schema.names)
    note = (
        "The parts carry no usable question layout (schema metadata 'evalpipe.layout'); "
        "the questions were found by their column names."
    )
    return found, (note,)


def open_output(path: Path) -> Output:
    """Open `path` as a job's output; InputError (one line, naming the path) if it is not one."""
    if "://" in str(path):
        raise InputError(
            f"output '{path}': the report reads a local directory; copy the output here first"
        )
    parts = _part_files(path)
    manifest = _read_manifest(path)
    if not parts:
        what = "no committed rows yet" if manifest is not None else "not an evalpipe output"
        raise InputError(f"output '{path}' holds no {PART_GLOB} files: {what}")
    arrow = _arrow_schema(parts[0])
    missing = [name for name in REQUIRED if name not in arrow.names]
    if missing:
        raise InputError(
            f"output '{path}' is not an evalpipe output: part '{parts[0].name}' has no column "
            f"'{missing[0]}'"
        )
    questions, notes = _questions(arrow)
    schema = pl.scan_parquet(parts[0]).collect_schema()
    journal = (path / JOURNAL).exists()
    return Output(path, parts, schema, questions, manifest, notes, journal)


def open_corpus(path: Path, out: Output) -> pl.LazyFrame:
    """The corpus `out` scored, lazily; InputError unless it is Parquet with `out`'s id column
    of the same type (checked here, before any figure is computed)."""
    files = corpus_files(str(path))  # as the job read it
    try:
        rows = pl.scan_parquet(files)
        schema = rows.collect_schema()
    except (OSError, pl.exceptions.PolarsError) as exc:
        raise InputError(f"--input '{path}' cannot be read: {first_line(exc)}") from None
    theirs, mine = schema.get(out.id_column), out.schema[out.id_column]
    if theirs is None:
        raise InputError(
            f"--input '{path}' has no column '{out.id_column}' (the output's id column)"
        )
    if theirs != mine:
        raise InputError(
            f"--input's id column '{out.id_column}' is {theirs}, the output's is {mine}"
        )
    return rows
