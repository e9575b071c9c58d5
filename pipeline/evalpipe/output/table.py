"""The output table's shape: its schema, and finished rows flattened into it.

One place decides which columns the output has and of what type (DESIGN "Output table"), so the
journal, the parts and every reader agree: every part has the schema `output_schema` gives, even
a part of error rows only, and polars, pyarrow and DuckDB read the directory as one table.
The question layout travels in the schema's metadata (`LAYOUT_KEY`), so `to_table` needs only
the schema, and every part file says which column answers what; the schema's version
(`columns.SCHEMA_VERSION`) and every column's description (`columns`) travel with it.

Nothing here touches a file; `sink` writes what `to_table` builds.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import orjson
import pyarrow as pa
import pyarrow.compute as pc

from evalpipe.calibration import Calibration, calibrated_arrays
from evalpipe.contract import (
    ChoiceQuestion,
    NoulQuestion,
    ScoreQuestion,
    question_dicts,
    validate_questions,
)
from evalpipe.errors import RETRYABLE_ERROR_TYPES, ConfigError
from evalpipe.output import columns

LAYOUT_KEY = b"evalpipe.layout"  # schema metadata: which columns belong to which question
SERVICE_KEY = b"evalpipe.service"  # schema metadata: the `_service` of every row
SCORED_AT = pa.timestamp("ms", tz="UTC")
META_FIELDS = (  # the tool's own columns, after the answers, in this order (`columns.META`)
    ("_row", pa.int64()),
    ("_model", pa.string()),
    ("_service", pa.string()),
    ("_input_tokens", pa.int64()),
    ("_error_type", pa.string()),
    ("_error", pa.string()),
    ("_run_id", pa.string()),
    ("_scored_at", SCORED_AT),
    ("_state_hash", pa.string()),  # hex of the state's 16-byte digest; null for no valid state
    ("_cached", pa.bool_()),
    ("_reused", pa.bool_()),
    ("_pack", pa.int32()),
)
STATE_HASH = "_state_hash"
ERROR_TYPE = "_error_type"
SAMPLE_WEIGHT = "_sample_weight"  # last, in a sampled output only (`evalpipe estimate`)

# One question's place in the table: (key, type, probability keys in criteria order, the
# probability columns' name parts in the same order).
Layout = list[tuple[str, str, list[str], list[str]]]


@dataclass(slots=True)
class RowResult:
    """The outcome of one input row; plain data, so it pickles across Ray.

    `answers` maps question key -> answer, either `evalpipe.contract.resources` answer models or
    their dicts (`model_dump()` / the response JSON); both convert at the same speed (a model is
    read through its `__dict__`), so do not convert models to dicts for the sink's sake. `scored_at`
    is seconds since the epoch (`time.time()`) when the answer or error arrived; `state_hash` is the
    state's 16-byte digest (`plan.state_key`), None for no valid state.
    """

    id: Any
    answers: Mapping[str, Any] | None = None
    model: str | None = None
    input_tokens: int | None = None
    error_type: str | None = None
    error: str | None = None
    scored_at: float | None = None
    state_hash: bytes | None = None
    cached: int = 0  # how many of its questions the answer cache gave
    reused: bool = False
    position: int | None = None  # its place in the corpus (`_row`)
    pack: int | None = None  # rows in the request that answered it (`_pack`); None: none did


class ArrowAnswers(Mapping[str, Any]):
    """One row's answers held in Arrow: row `row` of `table` (a struct column per question,
    of `answer_types`), answering the questions `answered`. The answer cache gives a job its
    answers so (one JSON parse per batch, in C++), and `to_table` takes them column-wise,
    never making dicts of them; read as a mapping, an answer is a dict."""

    __slots__ = ("answered", "row", "table")

    def __init__(self, table: pa.Table, row: int, answered: tuple[str, ...]) -> None:
        self.table, self.row, self.answered = table, row, answered

    def __getitem__(self, key: str) -> Any:
        if key not in self.answered:
            raise KeyError(key)
        return self.table.column(key)[self.row].as_py()

    def __contains__(self, key: object) -> bool:
        return key in self.answered

    def __iter__(self) -> Iterator[str]:
        return iter(self.answered)

    def __len__(self) -> int:
        return len(self.answered)

    def detached(self) -> ArrowAnswers:
        """The same answers in a table of their own: kept for long (a repeated state's, for
        its later rows), they do not keep the whole batch's table alive."""
        return ArrowAnswers(self.table.take([self.row]), 0, self.answered)


# --------------------------------------------------------------------------- schema


def _parsed(questions: Mapping[str, Any]) -> Mapping[str, Any]:
    """Parsed questions; plain dicts (a config's JSON) are parsed with the contract."""
    parsed = (NoulQuestion, ChoiceQuestion, ScoreQuestion)
    if all(isinstance(q, parsed) for q in questions.values()):
        return questions
    return validate_questions(dict(questions))


def _text(value: Any) -> str:
    return value if isinstance(value, str) else orjson.dumps(value).decode()


def _fields(key: str, question: Any) -> tuple[str, list[str], list[pa.Field]]:
    """(kind, probability keys, fields) of one question."""
    instructions = _text(question.instructions)
    if isinstance(question, ChoiceQuestion):
        options = list(question.criteria)
        return "choice", options, columns.choice_fields(key, instructions, options)
    if isinstance(question, ScoreQuestion):
        levels = [_text(level) for level in question.criteria]
        probs = [str(i) for i in range(len(levels))]
        return "score", probs, columns.score_fields(key, instructions, levels)
    return "noul", [], columns.noul_fields(key, instructions)


def _question_layout(
    questions: Mapping[str, Any], calibration: Calibration | None = None
) -> tuple[Layout, list[tuple[pa.Field, str]]]:
    """The layout and every question's fields (its own, then its calibrated ones), each with
    where its name comes from."""
    layout: Layout = []
    fields: list[tuple[pa.Field, str]] = []
    parsed = _parsed(questions)
    sent = question_dicts(parsed)  # as the service takes them: what a calibration is tied to
    for key, question in parsed.items():
        kind, probs, made = _fields(key, question)
        made[0] = columns.fingerprinted(made[0], Calibration.fingerprint(sent[key]))
        names = [f.name[len(key) + 5 :] for f in made[2:]] if kind != "noul" else []
        layout.append((key, kind, probs, names))
        what = "option" if kind == "choice" else "level"
        origins = [f"questions.{key}"] * (len(made) - len(probs))
        origins += [f"questions.{key}.criteria {what} {p!r}" for p in probs]
        fields.extend(zip(made, origins, strict=True))
        if calibration is not None and key in calibration.questions:
            entry, file = calibration.questions[key], calibration.name
            labels = [(f.metadata or {}).get(columns.LABEL, b"").decode() for f in made[2:]]
            made = columns.calibrated_fields(key, entry, file, labels, names)
            fields.extend((f, f"calibration of questions.{key}") for f in made)
    return layout, fields


def output_schema(
    id_name: str, id_type: pa.DataType, questions: Mapping[str, Any], service: str = "",
    calibration: Calibration | None = None,
) -> pa.Schema:  # fmt: skip
    """The output table's schema (DESIGN "Output table"), every field described
    (`columns`); ConfigError if two names collide. `service` (`ServiceConfig.identity`) is what
    every row's `_service` holds; `calibration` adds calibrated columns (checked by the caller
    against the questions, the service and the model)."""
    layout, answers = _question_layout(questions, calibration)
    fields = [(columns.id_field(id_name, id_type), f"id column {id_name!r}")]
    fields += answers
    fields += [(columns.meta_field(n, t), "the tool's own columns") for n, t in META_FIELDS]
    seen: dict[str, str] = {}
    for field, origin in fields:
        if field.name in seen:
            raise ConfigError(
                f"output column '{field.name}' would be made twice, by {seen[field.name]} and "
                f"by {origin}; rename a question key, an option or the id column"
            )
        seen[field.name] = origin
    metadata = {
        LAYOUT_KEY: orjson.dumps(layout),
        SERVICE_KEY: service.encode(),
        columns.VERSION_KEY: str(columns.SCHEMA_VERSION).encode(),
    }
    return pa.schema([field for field, _ in fields], metadata=metadata)


def with_sample_weight(schema: pa.Schema) -> pa.Schema:
    """The schema of a sampled output: `schema` and `_sample_weight` last (as it is)."""
    if SAMPLE_WEIGHT in schema.names:
        return schema
    return schema.append(columns.meta_field(SAMPLE_WEIGHT, pa.float64()))


def schema_layout(schema: pa.Schema) -> Layout:
    """The question layout `output_schema` stored in `schema` (a version 1 writer's has no
    name parts: empty); ValueError if it has none."""
    raw = (schema.metadata or {}).get(LAYOUT_KEY)
    if raw is None:
        raise ValueError("schema has no question layout; build it with table.output_schema")
    return [(e[0], e[1], list(e[2]), list(e[3]) if len(e) > 3 else []) for e in orjson.loads(raw)]


def schema_json(schema: pa.Schema) -> list[dict[str, str]]:
    """The schema as the manifest and the journal's header record it (names and types)."""
    return [{"name": field.name, "type": str(field.type)} for field in schema]


def schema_version(schema: pa.Schema) -> int:
    """The schema version a table was written with (1 for tables written before versions)."""
    return columns.schema_version(schema)


# --------------------------------------------------------------------------- rows -> table


def _answer_type(kind: str, probs: list[str]) -> pa.StructType:
    if kind == "noul":
        return pa.struct([("noul", pa.float64())])
    head = pa.string() if kind == "choice" else pa.float64()
    distribution = pa.struct([(p, pa.float64()) for p in probs])
    return pa.struct([(kind, head), ("confidence", pa.float64()), ("probabilities", distribution)])


def answer_types(schema: pa.Schema) -> pa.Schema:
    """Each question's answer as one struct, by question key: the columns of it in `schema`
    (an output table's) before they are flattened. What `ArrowAnswers` tables hold."""
    layout = schema_layout(schema)
    return pa.schema([(key, _answer_type(kind, probs)) for key, kind, probs, _ in layout])


# Where answers are held in Arrow (`ArrowAnswers`): their tables, each row's place in those
# tables taken one after the other (null for a row without answers), and the rows whose answers
# are dicts (or models), which come after the tables (`_taken` converts them per question).
_Taken = tuple[list[pa.Table], pa.Array, list[Mapping[str, Any]]]


def _arrow_rows(results: Sequence[RowResult]) -> _Taken | None:
    offsets: dict[int, int] = {}
    tables: list[pa.Table] = []
    rows: list[int | None] = []
    others: list[Mapping[str, Any]] = []
    for result in results:
        answers = result.answers
        if not answers:
            rows.append(None)
        elif type(answers) is ArrowAnswers:
            at = offsets.get(id(answers.table))
            if at is None:
                at = offsets[id(answers.table)] = sum(t.num_rows for t in tables)
                tables.append(answers.table)
            rows.append(at + answers.row)
        else:
            rows.append(-1 - len(others))  # placed once the tables' length is known
            others.append(answers)
    if not tables:
        return None
    held = sum(t.num_rows for t in tables)
    places = [r if r is None or r >= 0 else held - 1 - r for r in rows]
    return tables, pa.array(places, pa.int64()), others


def _taken(arrow: _Taken, key: str, type_: pa.DataType) -> pa.StructArray | None:
    """One question's struct for rows of `_arrow_rows`, or None if a table holds another."""
    tables, rows, others = arrow
    if any(key not in t.schema.names or t.schema.field(key).type != type_ for t in tables):
        return None
    chunks = [chunk for t in tables for chunk in t.column(key).chunks]
    if others:
        chunks.append(_from_dicts(others, key, type_))
    return pa.chunked_array(chunks, type_).take(rows).combine_chunks()


def _from_dicts(
    answers: Sequence[Mapping[str, Any] | None], key: str, type_: pa.DataType
) -> pa.Array:
    """One question's struct from answer mappings: Arrow converts the dicts in C++."""
    dicts: list[Any] = []
    for row in answers:
        answer = row.get(key) if row else None
        # A pydantic model keeps its fields in __dict__: reading it costs nothing.
        dicts.append(answer if answer is None or type(answer) is dict else vars(answer))
    return pa.array(dicts, type=type_)


def _answer_columns(
    results: Sequence[RowResult], key: str, kind: str, probs: list[str], arrow: _Taken | None
) -> list[pa.Array]:
    """One question's columns: taken from the rows' `ArrowAnswers` tables where there are
    any (other rows' dicts converted and taken with them), else Arrow converts the answer
    dicts to a struct in C++; then the struct is flattened (flatten() carries a missing
    answer's null into every child)."""
    type_ = _answer_type(kind, probs)
    struct = None if arrow is None else _taken(arrow, key, type_)
    if struct is None:
        struct = _from_dicts([r.answers for r in results], key, type_)
    columns: list[pa.Array] = struct.flatten()
    if kind == "noul":
        return columns
    return [*columns[:-1], *columns[-1].flatten()]


def state_hashes(digests: Sequence[bytes | None]) -> pa.Array:
    """State digests as the `_state_hash` column holds them (hex; null for no valid state).
    The driver uses it too, to compare a source's states with the committed rows'."""
    return pa.array([None if d is None else d.hex() for d in digests], pa.string())


def _timestamps(seconds: Sequence[float | None]) -> pa.Array:
    """Seconds since the epoch as `_scored_at` (whole milliseconds, UTC)."""
    millis = pc.floor(pc.multiply(pa.array(seconds, pa.float64()), 1000.0))
    return pc.cast(pc.cast(millis, pa.int64()), SCORED_AT)


def _meta_columns(results: Sequence[RowResult], run_id: str, service: str) -> list[pa.Array]:
    """The tool's own columns, in `META_FIELDS` order."""
    return [
        pa.array([r.position for r in results], pa.int64()),
        pa.array([r.model for r in results], pa.string()),
        pa.repeat(pa.scalar(service, pa.string()), len(results)),
        pa.array([r.input_tokens for r in results], pa.int64()),
        pa.array([r.error_type for r in results], pa.string()),
        pa.array([r.error for r in results], pa.string()),
        pa.repeat(pa.scalar(run_id, pa.string()), len(results)),
        _timestamps([r.scored_at for r in results]),
        state_hashes([r.state_hash for r in results]),
        pa.array([r.cached > 0 for r in results], pa.bool_()),
        pa.array([r.reused for r in results], pa.bool_()),
        pa.array([r.pack for r in results], pa.int32()),
    ]


def to_table(results: Sequence[RowResult], schema: pa.Schema, run_id: str) -> pa.Table:
    """Results of run `run_id` as a table of `schema`, built column-wise; values are copied,
    never rounded. An answer for a key that is not a question is ignored; a missing answer
    gives nulls."""
    arrays = [pa.array([r.id for r in results], schema.field(0).type)]
    arrow = _arrow_rows(results)
    for key, kind, probs, _ in schema_layout(schema):
        own = _answer_columns(results, key, kind, probs, arrow)
        arrays.extend(own)
        arrays.extend(calibrated_arrays(schema, key, own))
    service = (schema.metadata or {}).get(SERVICE_KEY, b"").decode()
    arrays.extend(_meta_columns(results, run_id, service))
    # a sampled output's `_sample_weight`: null until `evalpipe estimate` weighs the sample
    arrays.extend(pa.nulls(len(results), f.type) for f in list(schema)[len(arrays) :])
    return pa.Table.from_arrays(arrays, schema=schema)


# --------------------------------------------------------------------------- reading rows back


def retryable(error_types: pa.ChunkedArray | pa.Array) -> pa.ChunkedArray | pa.Array:
    """Per row of an `_error_type` column: does its error deserve another try on resume?"""
    kinds = pa.array(sorted(RETRYABLE_ERROR_TYPES))
    return pc.fill_null(pc.is_in(error_types, kinds), False)


def stale_ids(committed: pa.Table, current: pa.Table) -> pa.Array:
    """The ids of `committed` rows whose state changed since they were scored.

    Both tables hold (id, `_state_hash`) pairs, id first: `committed` as `Sink.committed`
    gives them, `current` the source's rows now (built with `state_hashes`), all at once or one
    batch at a time (ids are unique in a source). An id absent from `current` is not stale (it
    is not sent again either); a state that became invalid, or valid, is a change.
    """
    id_name = committed.schema.names[0]
    now = current.rename_columns([id_name, "_now"])
    joined = committed.rename_columns([id_name, "_then"]).join(now, id_name, join_type="inner")
    # A hex digest is never empty, so "" stands for "no valid state" in the comparison.
    then, later = (pc.fill_null(joined[c], "") for c in ("_then", "_now"))
    return joined[id_name].filter(pc.not_equal(then, later)).combine_chunks()
