"""The output table's shape: schema, exact values, lineage columns, stale ids."""

from __future__ import annotations

import pickle
from datetime import UTC, datetime
from pathlib import Path

import pyarrow as pa
import pytest

from evalpipe.contract.resources import ChoiceAnswer, NoulAnswer, ScoreAnswer, validate_questions
from evalpipe.errors import ConfigError
from evalpipe.output.table import (
    ArrowAnswers,
    RowResult,
    answer_types,
    output_schema,
    stale_ids,
    state_hashes,
    to_table,
)
from sinkdata import QUESTIONS, SCHEMA, SCORED_AT, answered, digest, failed, run, table_of

LINEAGE = [
    ("_row", "int64"),
    ("_model", "string"),
    ("_service", "string"),
    ("_input_tokens", "int64"),
    ("_error_type", "string"),
    ("_error", "string"),
    ("_run_id", "string"),
    ("_scored_at", "timestamp[ms, tz=UTC]"),
    ("_state_hash", "string"),
    ("_cached", "bool"),
    ("_reused", "bool"),
    ("_pack", "int32"),
]


def test_output_schema_per_question_type() -> None:
    assert [(f.name, str(f.type)) for f in SCHEMA] == [
        ("review_id", "int64"),
        ("helpful__p_true", "double"),
        ("sentiment__choice", "string"),
        ("sentiment__confidence", "double"),
        ("sentiment__p__positive", "double"),
        ("sentiment__p__negative", "double"),
        ("sentiment__p__mixed", "double"),
        ("quality__score", "double"),
        ("quality__confidence", "double"),
        ("quality__p__poor", "double"),
        ("quality__p__ok", "double"),
        *LINEAGE,
    ]


def test_output_schema_takes_question_dicts_too() -> None:
    raw = {"q": {"type": "score", "instructions": "x", "criteria": ["a", "b", "c"]}}
    schema = output_schema("id", pa.string(), raw)
    assert schema.names[1:6] == ["q__score", "q__confidence", "q__p__a", "q__p__b", "q__p__c"]


def test_colliding_names_raise_config_error() -> None:
    clash = validate_questions(
        {
            "a__p": {"type": "noul", "instructions": "x"},
            "a": {"type": "choice", "instructions": "x", "criteria": {"P true": None}},
        }
    )
    with pytest.raises(ConfigError, match="output column 'a__p__p_true' would be made twice"):
        output_schema("id", pa.int64(), clash)
    with pytest.raises(ConfigError, match="'_model'"):
        output_schema("_model", pa.int64(), QUESTIONS)
    with pytest.raises(ConfigError, match="'_run_id'"):
        output_schema("_run_id", pa.string(), QUESTIONS)


def test_exact_floats_round_trip(tmp_path: Path) -> None:
    hard = [0.1 + 0.2, 1 / 3, 5e-324, 1 - 2**-53, 0.0, 1.0, 2.2250738585072014e-308]
    run(tmp_path, [answered(i, p) for i, p in enumerate(hard)])
    got = table_of(tmp_path)
    assert got["helpful__p_true"].to_list() == hard
    assert got["sentiment__p__negative"].to_list() == [(1 - p) / 2 for p in hard]
    assert got["quality__score"].to_list() == [1 - p for p in hard]
    assert got["sentiment__confidence"].to_list() == [p / 3 for p in hard]


def test_models_and_dicts_give_the_same_table() -> None:
    def as_models(result: RowResult) -> RowResult:
        a = result.answers
        assert a is not None
        result = pickle.loads(pickle.dumps(result))
        result.answers = {
            "helpful": NoulAnswer(**a["helpful"]),
            "sentiment": ChoiceAnswer(**a["sentiment"]),
            "quality": ScoreAnswer(**a["quality"]),
        }
        return result

    results = [answered(1, 0.3), failed(2), answered(3, 0.9)]
    from_dicts = to_table(results, SCHEMA, "run-1")
    from_models = to_table([as_models(r) if r.answers else r for r in results], SCHEMA, "run-1")
    assert from_dicts.equals(from_models)
    row = from_dicts.slice(1, 1).to_pylist()[0]
    assert row["review_id"] == 2 and row["_error_type"] == "network"
    nulls = [*SCHEMA.names[1:12], "_input_tokens"]  # the answers, _model, _input_tokens
    assert all(row[name] is None for name in nulls)


def test_answers_held_in_arrow_give_the_same_table_as_dicts(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    hard = [0.1 + 0.2, 1 / 3, 5e-324, 1 - 2**-53, 0.75]
    results = [answered(i, p) for i, p in enumerate(hard)]
    del results[3].answers["sentiment"]  # type: ignore[union-attr]  # one question unanswered
    results.insert(2, failed(9))
    types = answer_types(SCHEMA)
    assert types.names == ["helpful", "sentiment", "quality"]

    def in_arrow(rows: list[RowResult]) -> list[RowResult]:
        table = pa.Table.from_pylist([r.answers for r in rows if r.answers], schema=types)
        held, at = [], 0
        for r in rows:
            r = pickle.loads(pickle.dumps(r))
            if r.answers:
                r.answers, at = ArrowAnswers(table, at, tuple(r.answers)), at + 1
            held.append(r)
        return held

    as_dicts = to_table(results, SCHEMA, "run-1")
    held = in_arrow(results[:3]) + in_arrow(results[3:])  # rows of two tables
    mixed = [*held[:4], results[4], held[5]]  # a row of dicts among them (a repeat's)
    with monkeypatch.context() as patched:  # taken column-wise: no answer is read as a dict
        patched.setattr(ArrowAnswers, "__getitem__", lambda *_: pytest.fail("read one by one"))
        assert to_table(held, SCHEMA, "run-1").equals(as_dicts)
        assert to_table(mixed, SCHEMA, "run-1").equals(as_dicts)
    one = held[4].answers
    assert isinstance(one, ArrowAnswers) and list(one) == ["helpful", "quality"]
    assert "sentiment" not in one and len(one) == 2
    alone = one.detached()  # a copy of its own row: the batch's table can go
    assert alone.table.num_rows == 1 and dict(alone) == dict(one)
    assert one["quality"] == {
        k: v for k, v in results[4].answers["quality"].items() if k not in ("type", "legend")
    }  # type: ignore[index]


def test_lineage_columns() -> None:
    results = [
        RowResult(1, None, scored_at=SCORED_AT + 0.1239, state_hash=digest(1), cached=2),
        RowResult(2, None, scored_at=None, state_hash=None, reused=True, position=7),
    ]
    table = to_table(results, SCHEMA, "run-7").to_pydict()
    assert table["_run_id"] == ["run-7", "run-7"]
    assert table["_scored_at"] == [
        datetime.fromtimestamp(SCORED_AT, UTC).replace(microsecond=123_000),  # whole ms
        None,
    ]
    assert table["_state_hash"] == [digest(1).hex(), None]
    assert (table["_cached"], table["_reused"]) == ([True, False], [False, True])
    assert table["_row"] == [None, 7]


def test_row_result_pickles() -> None:
    result = answered(5)
    assert pickle.loads(pickle.dumps(result)) == result


def test_stale_ids_compares_states_by_id() -> None:
    h = [digest(i).hex() for i in range(6)]
    committed = pa.table(
        {"review_id": [1, 2, 3, 4, 5, 6], "_state_hash": [h[1], h[2], None, h[4], None, "x"]}
    )
    now = {
        1: digest(1),  # unchanged
        2: digest(2, version=1),  # text edited under the same id
        3: digest(3),  # was invalid, valid now
        4: None,  # was valid, invalid now
        5: None,  # invalid then and now
        7: digest(7),  # new: not committed, not stale
    }  # 6 is gone from the source: not stale (it is not sent again either)
    current = pa.table(
        {"review_id": list(now), "_state_hash": state_hashes(list(now.values()))},
    )
    assert sorted(stale_ids(committed, current).to_pylist()) == [2, 3, 4]
    one_batch = current.slice(1, 1)  # the driver may compare one source batch at a time
    assert stale_ids(committed, one_batch).to_pylist() == [2]
