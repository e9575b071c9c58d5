"""An output table opened for analysis: its rows, its questions and their columns, its manifest.

A Delta table (`output.format: delta`) is read through `evalpipe.output.delta_target`: the whole
table, a version (`TABLE@VERSION`) or one night (`TABLE/dt=2026-11-27`), its manifest made from
the commit info.

`describe`, `diff` and `agree` read outputs as analysts do, local or on an object store
(`s3://...`, through `evalpipe.stores`), of any schema version: version 2 tables name their
questions in the schema metadata (`evalpipe.layout`) and their labels in the field metadata;
version 1 tables (`K__noul`, `K__p__0`) are understood by their column names. A question's
columns are resolved here once, so the statistics never build a column name themselves.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson
import polars as pl
import pyarrow as pa

from evalpipe.errors import InputError, first_line
from evalpipe.output import (
    LAYOUT_KEY,
    MANIFEST,
    DeltaTarget,
    SampleFile,
    delta_target,
    part_names,
    schema_layout,
    schema_version,
)
from evalpipe.stores import Folder

REQUIRED = ("_model", "_error_type")
KINDS = ("noul", "choice", "score")


@dataclass(frozen=True, slots=True)
class Question:
    """One question's columns. `head`: p(yes), the chosen option or the expected level;
    `probs`: the probability columns, in criteria order, with `labels` (options, or level
    labels; a version 1 table knows only the level indices)."""

    key: str
    kind: str
    head: str
    probs: tuple[str, ...] = ()
    labels: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Table:
    """An output, read: `rows` holds every committed row (parts only, never the journal)."""

    shown: str
    schema: pa.Schema
    rows: pl.DataFrame
    questions: tuple[Question, ...]
    manifest: dict[str, Any] | None
    sample: dict[str, Any] | None = None  # `evalpipe estimate`'s design and estimates, if any

    @property
    def id_column(self) -> str:
        return str(self.schema.names[0])

    @property
    def version(self) -> int:
        return schema_version(self.schema)

    def question(self, key: str) -> Question | None:
        return next((q for q in self.questions if q.key == key), None)


def _v2_questions(schema: pa.Schema) -> tuple[Question, ...]:
    labels = {f.name: (f.metadata or {}).get(b"evalpipe.label", b"").decode() for f in schema}
    out = []
    for key, kind, probs, names in schema_layout(schema):
        columns = tuple(f"{key}__p__{n}" for n in names)
        head = f"{key}__p_true" if kind == "noul" else f"{key}__{kind}"
        shown = tuple(labels[c] or p for c, p in zip(columns, probs, strict=True))
        out.append(Question(key, kind, head, columns, shown))
    return tuple(out)


def _v1_questions(schema: pa.Schema) -> tuple[Question, ...]:
    """Version 1 (or no layout): `K__noul`, `K__choice`, `K__score` name the questions."""
    names = schema.names
    out = []
    for name in names:
        for kind in KINDS:
            key = name[: -len(kind) - 2]
            if not key or name != f"{key}__{kind}":
                continue
            prefix = f"{key}__p__"
            probs = tuple(n for n in names if n.startswith(prefix)) if kind != "noul" else ()
            out.append(Question(key, kind, name, probs, tuple(p[len(prefix) :] for p in probs)))
    return tuple(out)


def questions_of(schema: pa.Schema) -> tuple[Question, ...]:
    """The questions of a table, from its layout (version 2) or its column names."""
    meta = schema.metadata or {}
    if LAYOUT_KEY in meta and schema_version(schema) >= 2:
        return _v2_questions(schema)
    return _v1_questions(schema)


def _manifest(folder: Folder) -> dict[str, Any] | None:
    try:
        raw = folder.read_bytes(MANIFEST)
        manifest = orjson.loads(raw) if raw is not None else None
    except (OSError, orjson.JSONDecodeError) as exc:
        shown = folder.shown_name(MANIFEST)
        raise InputError(f"'{shown}' cannot be read: {first_line(exc)}") from None
    return manifest if isinstance(manifest, dict) else None


def _parts(folder: Folder) -> list[str]:
    try:
        parts = part_names(folder)
    except OSError as exc:
        raise InputError(f"output '{folder.shown}' cannot be read: {first_line(exc)}") from None
    if not parts:
        raise InputError(f"output '{folder.shown}' holds no part-*.parquet files")
    return parts


def _delta_table(target: DeltaTarget) -> Table:
    """A Delta table (`output.format: delta`), a version of it or one partition's rows."""
    try:
        schema, arrow, manifest = target.schema(), target.rows(), target.manifest()
    except Exception as exc:
        raise InputError(f"output '{target.shown}' cannot be read: {first_line(exc)}") from None
    rows = pl.from_arrow(arrow)
    assert isinstance(rows, pl.DataFrame)
    return Table(
        target.shown, schema, rows, questions_of(schema), {**manifest, "rows": rows.height}
    )


def open_table(location: str) -> Table:
    """Every committed row of the output at `location`; InputError (one line) if it is not an
    evalpipe output. A Delta table is read as `TABLE`, `TABLE@VERSION` or one partition,
    `TABLE/dt=2026-11-27` (`evalpipe.output.DeltaTarget`)."""
    target = delta_target(location)
    if target is not None:
        return _delta_table(target)
    folder = Folder(location, key="OUTPUT")  # ConfigError (exit 2) for a URI it cannot use
    parts = _parts(folder)
    try:
        tables = [folder.read_table(name) for name in parts]
        arrow = pa.concat_tables(tables, promote_options="permissive")
    except (OSError, pa.ArrowException) as exc:
        raise InputError(f"output '{folder.shown}' cannot be read: {first_line(exc)}") from None
    schema = tables[0].schema
    missing = [c for c in REQUIRED if c not in schema.names]
    if missing:
        raise InputError(f"output '{folder.shown}' is not an evalpipe output: no '{missing[0]}'")
    rows = pl.from_arrow(arrow)
    assert isinstance(rows, pl.DataFrame)
    sample = SampleFile(location).read()
    return Table(folder.shown, schema, rows, questions_of(schema), _manifest(folder), sample)


def read_schema(location: str) -> tuple[pa.Schema, dict[str, Any] | None, str]:
    """The schema of the first part (its footer only), the manifest, and the output's name
    (of a Delta table: its schema, its runs from the commit info)."""
    target = delta_target(location)
    if target is not None:
        table = _delta_table(target)
        return table.schema, table.manifest, table.shown
    folder = Folder(location, key="OUTPUT")
    parts = _parts(folder)
    try:
        with folder.open_parquet(parts[0]) as parquet:
            schema = parquet.schema_arrow
    except (OSError, pa.ArrowException) as exc:
        raise InputError(f"output '{folder.shown}' cannot be read: {first_line(exc)}") from None
    return schema, _manifest(folder), folder.shown
