"""Open a job's output for the report: its parts, its questions, its manifest, what it lacks.

The output is a local directory or an object-store prefix (`s3://bucket/out`): both are read
through `evalpipe.stores` (a pyarrow filesystem), and `scan_files` turns their parts into one
lazy polars scan (polars' own reader on a local disk; a pyarrow dataset on a store, so the
store's credential chain and `AWS_ENDPOINT_URL` apply as they do to a job), so every figure is
computed by the same queries wherever the output lives.

The report reads the output as README "The output table" documents it, so it reads the output
of any job and of any evalpipe version: the question layout comes from the parts' schema
metadata (`evalpipe.layout`), or from the column names when an older writer left none; the
lineage columns (`_run_id`, `_scored_at`, ...) may be absent, and each section that needs one
says so instead of failing. Everything here only looks at file names, one footer and the
manifest: the rows are read later, by the lazy queries in `data`."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

import orjson
import polars as pl
import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from evalpipe.errors import ConfigError, InputError, first_line
from evalpipe.input import corpus_paths
from evalpipe.output import (
    JOURNAL,
    LAYOUT_KEY,
    MANIFEST,
    DeltaTarget,
    delta_target,
    part_names,
    schema_version,
)
from evalpipe.stores import Folder, Location, local_dir

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
    labels: tuple[str, ...] = ()  # each probability's option or level label (field metadata)

    def label(self, prob: str) -> str:
        """How the table names probability key `prob`: its label, else the key itself."""
        if len(self.labels) == len(self.probs) and prob in self.probs:
            return self.labels[self.probs.index(prob)] or prob
        return prob

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


def scan_files(fs: Any, paths: list[str] | tuple[str, ...]) -> pl.LazyFrame:
    """Parquet files `paths` of filesystem `fs`, as one lazy scan."""
    if isinstance(fs, pafs.LocalFileSystem):
        return pl.scan_parquet(list(paths))
    import pyarrow.dataset as ds

    return pl.scan_pyarrow_dataset(ds.dataset(list(paths), filesystem=fs, format="parquet"))


@dataclass(frozen=True, slots=True)
class Output:
    """A job's output (a local directory or an object-store prefix), opened: nothing of its
    rows is read yet. `parts`: the part files' paths in `folder.fs`."""

    folder: Folder
    parts: tuple[str, ...]
    schema: pl.Schema
    questions: tuple[Question, ...]
    manifest: dict[str, Any] | None
    notes: tuple[str, ...] = field(default=())
    journal: bool = False  # a journal: a run is going on or was killed; its rows are not in parts

    @property
    def id_column(self) -> str:
        return next(iter(self.schema))

    @property
    def shown(self) -> str:
        """Where the output is, as the page names it: its absolute path, or its URI."""
        local = self.folder.local
        return str(local.resolve()) if local is not None else self.folder.shown

    @property
    def name(self) -> str:
        """The output folder's own name (`dt=2026-11-24`, `demo`)."""
        return self.shown.rstrip("/").rsplit("/", 1)[-1] or self.shown

    def has(self, column: str) -> bool:
        return column in self.schema

    @property
    def missing_lineage(self) -> tuple[str, ...]:
        return tuple(name for name in LINEAGE if name not in self.schema)

    def scan(self) -> pl.LazyFrame:
        """Every committed row, lazily (the parts, not the journal or temporary files)."""
        return scan_files(self.folder.fs, self.parts)


def _folder(location: Location) -> Folder:
    try:
        return Folder(location, key="output")
    except ConfigError as exc:  # an unknown scheme, a store that cannot be reached
        raise InputError(exc.message) from None


def _part_files(folder: Folder) -> tuple[str, ...]:
    where = folder.shown
    try:
        kind = folder.fs.get_file_info(folder.root).type
        if kind == pafs.FileType.NotFound:
            raise InputError(f"output '{where}' does not exist; give a job's output.path")
        if kind != pafs.FileType.Directory:
            raise InputError(f"output '{where}' is not a directory; give a job's output.path")
        return tuple(folder.path(name) for name in part_names(folder))
    except OSError as exc:
        raise InputError(f"output '{where}' cannot be read: {first_line(exc)}") from None


def _read_manifest(folder: Folder) -> dict[str, Any] | None:
    file = folder.shown_name(MANIFEST)
    try:
        raw = folder.read_bytes(MANIFEST)
        if raw is None:
            return None
        manifest = orjson.loads(raw)
    except (OSError, orjson.JSONDecodeError) as exc:
        raise InputError(f"'{file}' cannot be read: {first_line(exc)}") from None
    if not isinstance(manifest, dict):
        raise InputError(f"'{file}' is not an evalpipe manifest (not a JSON object)")
    return manifest


def _arrow_schema(folder: Folder, part: str) -> pa.Schema:
    try:
        return pq.read_schema(part, filesystem=folder.fs)
    except (OSError, pa.ArrowException) as exc:
        shown = folder.shown_name(_base(part))
        raise InputError(f"part '{shown}' cannot be read: {first_line(exc)}") from None


def _base(path: str) -> str:
    return path.rsplit("/", 1)[-1]


def _journal(folder: Folder) -> bool:
    """Whether a run's journal is on this machine: in a local output, or in the local staging
    folder of an object-store output (the journal never goes to a store)."""
    return (local_dir(folder.location) / JOURNAL).exists()


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
    return tuple(replace(q, labels=_labels(schema, q)) for q in questions)


def _labels(schema: pa.Schema, q: Question) -> tuple[str, ...]:
    """The labels the writer put on a question's probability columns (`evalpipe.label`)."""
    metadata = [schema.field(q.prob(p)).metadata or {} for p in q.probs]
    return tuple(m.get(b"evalpipe.label", b"").decode() for m in metadata)


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


def _delta_output(target: DeltaTarget) -> Output:
    """A Delta table (a night of it: `TABLE/dt=...`, a version: `TABLE@N`): the Parquet files
    of that version, its schema and the runs its commits recorded."""
    folder = _folder(target.location)
    try:
        parts = tuple(folder.path(name) for name in target.files())
        arrow, manifest = target.schema(), target.manifest()
    except Exception as exc:  # deltalake's errors: one line, whatever the cause
        raise InputError(f"output '{target.shown}' cannot be read: {first_line(exc)}") from None
    if not parts:
        raise InputError(f"output '{target.shown}' holds no rows")
    arrow = pa.schema([f for f in arrow if f.name not in (target.partition or {})], arrow.metadata)
    questions, notes = _questions(arrow)
    frame = pl.from_arrow(arrow.empty_table())
    assert isinstance(frame, pl.DataFrame)
    return Output(folder, parts, frame.schema, questions, manifest, notes, False)


def open_output(location: Location) -> Output:
    """Open `location` (a local directory or an object-store URI) as a job's output; InputError
    (one line, naming it) if it is not one. A Delta table is read as `evalpipe.output.DeltaTarget`
    says (a night: `TABLE/dt=2026-11-27`)."""
    target = delta_target(location)
    if target is not None:
        return _delta_output(target)
    folder = _folder(location)
    where = folder.shown
    parts = _part_files(folder)
    manifest = _read_manifest(folder)
    if not parts:
        what = "no committed rows yet" if manifest is not None else "not an evalpipe output"
        raise InputError(f"output '{where}' holds no {PART_GLOB} files: {what}")
    arrow = _arrow_schema(folder, parts[0])
    missing = [name for name in REQUIRED if name not in arrow.names]
    if missing:
        raise InputError(
            f"output '{where}' is not an evalpipe output: part '{_base(parts[0])}' has no "
            f"column '{missing[0]}'"
        )
    questions, notes = _questions(arrow)
    frame = pl.from_arrow(arrow.empty_table())
    assert isinstance(frame, pl.DataFrame)
    return Output(folder, parts, frame.schema, questions, manifest, notes, _journal(folder))


def open_corpus(path: Location, out: Output) -> pl.LazyFrame:
    """The corpus `out` scored (local or an object-store URI), lazily; InputError unless it is
    Parquet with `out`'s id column of the same type (checked here, before any figure is
    computed)."""
    fs, files = corpus_paths(str(path), "--input")  # as the job read it
    try:
        rows = scan_files(fs, files)
        schema = rows.collect_schema()
    except (OSError, pa.ArrowException, pl.exceptions.PolarsError) as exc:
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
