"""The SQL and DataFrame front ends (`evalpipe.duckdb`, `evalpipe.polars`), used as an analyst
and a data scientist use them: real DuckDB over `read_parquet`, real polars LazyFrames, the
real engine on the session's Ray, answers compared with the reference evaluator's own (what the
service answers), requests counted at the service."""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import duckdb
import polars as pl
import pytest

import evalpipe as ep
import evalpipe.duckdb
import evalpipe.polars  # registers the `.evalpipe` namespace
from conftest import embedded
from evalpipe.output import safe_names
from evalpipe.service import EmbeddedService
from evalpipe.service.evaluator import answer, compile_questions

pytestmark = pytest.mark.patient  # `make test` runs it beside the rest (the Makefile)

MODEL = "model-1.13.0"
TEXTS = [
    "The lamp glows warm and bright, sturdy base, would buy again.",
    "Kettle boils fast but the lid broke after a week.",
    "Tent kept us dry through the storm.",
    "The lamp glows warm and bright, sturdy base, would buy again.",  # a repeat
    None,  # not sent, answers null
    "Jacket fits well; a button came loose after two days.",
    "Kettle boils fast but the lid broke after a week.",  # a repeat
]
DISTINCT = len({t for t in TEXTS if t is not None})
IDS = [31, 7, 12, 3, 25, 18, 9]  # not sorted: rows come back in the query's order
HELPFUL = ep.Noul("Does the review help a shopper decide?", true="specific", false="vague")
SENTIMENT = ep.Choice("Overall sentiment?", ["positive", "Very negative", "mixed"])
QUALITY = ep.Score("How well written is it?", ["poor", "fair", "good"])


@pytest.fixture(scope="module")
def service() -> Iterator[EmbeddedService]:
    with embedded() as started:
        yield started


@pytest.fixture(scope="module")
def svc(service: EmbeddedService) -> ep.Service:
    limits = {"requests_per_minute": 60_000, "tokens_per_second": 10_000_000}
    return ep.Service(service.base_url, MODEL, limits=limits)


@pytest.fixture
def reviews(tmp_path: Path) -> Path:
    path = tmp_path / "reviews.parquet"
    pl.DataFrame({"review_id": IDS, "text": TEXTS}).write_parquet(path)
    return path


def sent(service: EmbeddedService) -> int:
    return int(service.stats()["requests_accepted"])


def truth(state: Any, question: ep.Noul | ep.Choice | ep.Score) -> Any:
    """The reference evaluator's answer to one question, as the front ends give it."""
    if state is None:
        return None
    got = answer(state, compile_questions({"q": question.as_dict()}), MODEL)["q"]
    if got["type"] == "noul":
        return got["noul"]
    labels = list(question.levels) if isinstance(question, ep.Score) else got["probabilities"]
    names = safe_names(labels)  # a score's come by level index
    p = dict(zip(names, got["probabilities"].values(), strict=True))
    return {got["type"]: got[got["type"]], "confidence": got["confidence"], "p": p}


def assert_close(got: Any, expected: Any) -> None:
    if isinstance(expected, dict):
        assert isinstance(got, dict) and got.keys() == expected.keys()
        for key in expected:
            assert_close(got[key], expected[key])
    elif isinstance(expected, float):
        assert math.isclose(got, expected, rel_tol=1e-12)
    else:
        assert got == expected


@pytest.mark.ray
def test_sql_over_read_parquet_returns_the_services_answers_and_reruns_free(
    ray_runtime: None, service: EmbeddedService, svc: ep.Service, reviews: Path
) -> None:
    con = evalpipe.duckdb.register(duckdb.connect(), service=svc, progress=False)
    query = f"""
        SELECT review_id, text,
               evalpipe_noul(text, '{HELPFUL.instructions}', 'specific', 'vague') AS helpful,
               evalpipe_choice(text, '{SENTIMENT.instructions}', {list(SENTIMENT.options)})
                   AS sentiment,
               evalpipe_score(text, '{QUALITY.instructions}', {list(QUALITY.levels)}) AS quality
        FROM read_parquet('{reviews}')
    """
    before = sent(service)
    rows = con.sql(query).fetchall()
    assert sent(service) - before == 3 * DISTINCT  # three questions asked apart: three jobs
    assert [r[0] for r in rows] == IDS
    for _, text, helpful, sentiment, quality in rows:
        assert_close(helpful, truth(text, HELPFUL))
        assert_close(sentiment, truth(text, SENTIMENT))
        assert_close(quality, truth(text, QUALITY))
    assert rows[1][3]["p"].keys() == {"positive", "very_negative", "mixed"}
    grouped = con.sql(f"SELECT sentiment.choice, count(*) FROM ({query}) GROUP BY ALL").fetchall()
    assert sum(n for _, n in grouped) == len(TEXTS)
    assert sent(service) - before == 3 * DISTINCT  # the same questions again: nothing sent
    assert con.sql(query).fetchall() == rows


@pytest.mark.ray
def test_sql_ask_sends_one_request_per_distinct_state_for_all_its_questions(
    ray_runtime: None, service: EmbeddedService, svc: ep.Service, reviews: Path
) -> None:
    con = evalpipe.duckdb.register(duckdb.connect(), service=svc, progress=False)
    query = f"""
        SELECT review_id, text, evalpipe_ask(text, {{
            'helpful': evalpipe_noul_question('{HELPFUL.instructions}', 'specific', 'vague'),
            'sentiment': evalpipe_choice_question('{SENTIMENT.instructions}',
                                                  {list(SENTIMENT.options)})
        }}) AS a
        FROM read_parquet('{reviews}')
    """
    before = sent(service)
    rows = con.sql(query).fetchall()
    assert sent(service) - before == DISTINCT
    for _, text, got in rows:
        if text is None:
            assert got is None
            continue
        assert got["_error"] is None
        assert_close(got["helpful"], truth(text, HELPFUL))
        assert_close(got["sentiment"], truth(text, SENTIMENT))
    again = con.sql(query).fetchall()
    assert again == rows and sent(service) - before == DISTINCT  # the rerun sends nothing
    objects = f"""
        SELECT evalpipe_ask({{'id': review_id, 'body': text}},
                            '{{"h": {{"type": "noul", "instructions": "Helpful?"}}}}').h
        FROM read_parquet('{reviews}') WHERE text IS NOT NULL LIMIT 1
    """
    [(p,)] = con.sql(objects).fetchall()  # an object state: a STRUCT
    state = {"id": IDS[0], "body": TEXTS[0]}
    assert_close(p, truth(state, ep.Noul("Helpful?")))
    as_json = "SELECT evalpipe_noul(?::JSON, 'Helpful?')"
    [(same,)] = con.execute(as_json, [json.dumps(state)]).fetchall()  # or JSON of an object
    assert_close(same, truth(state, ep.Noul("Helpful?")))


def test_a_bad_question_is_a_duckdb_error_before_anything_is_sent(
    service: EmbeddedService, svc: ep.Service, reviews: Path
) -> None:
    con = evalpipe.duckdb.register(duckdb.connect(), service=svc, progress=False)
    before = sent(service)
    source = f"FROM read_parquet('{reviews}')"
    bad = {
        f"SELECT evalpipe_choice(text, 'Which?', []) {source}":
            "ConfigError: evalpipe_choice: criteria: at least 1 option",
        f"SELECT evalpipe_score(text, 'How good?', []) {source}":
            "ConfigError: evalpipe_score: criteria: at least 1 level",
        f"SELECT evalpipe_ask(text, '{{\"q\": {{\"type\": \"maybe\"}}}}') {source}":
            "ConfigError: evalpipe_ask: questions.q.type",
        f"SELECT evalpipe_noul(review_id, 'Is it?') {source}":
            "InputError: evalpipe_noul: state: a column of Int64",
    }  # fmt: skip
    for query, message in bad.items():
        with pytest.raises(duckdb.Error, match=message):
            con.sql(query).fetchall()
    assert sent(service) == before


@pytest.mark.ray
def test_a_polars_lazyframe_keeps_row_order_with_one_request_per_distinct_state(
    ray_runtime: None, service: EmbeddedService, svc: ep.Service, reviews: Path
) -> None:
    questions = {"helpful": HELPFUL, "quality": QUALITY}
    pipeline = (
        pl.scan_parquet(reviews)
        .filter(pl.col("review_id") != 12)
        .with_columns(answers=pl.col("text").evalpipe.ask(questions, service=svc, progress=False))
        .with_columns(pl.col("answers").struct.field("quality").struct.field("score"))
    )
    before = sent(service)
    frame = pipeline.collect()
    kept = [(i, t) for i, t in zip(IDS, TEXTS, strict=True) if i != 12]
    assert sent(service) - before == len({t for _, t in kept if t is not None})
    assert frame["review_id"].to_list() == [i for i, _ in kept]
    for (_, text), got in zip(kept, frame["answers"].to_list(), strict=True):
        if text is None:
            assert got is None
            continue
        assert_close(got["helpful"], truth(text, HELPFUL))
        assert_close(got["quality"], truth(text, QUALITY))
    assert frame["score"].to_list()[0] == frame["answers"].to_list()[0]["quality"]["score"]
    asked = sent(service)
    eager = pl.read_parquet(reviews).with_columns(
        helpful=pl.col("text").evalpipe.noul(HELPFUL, service=svc, progress=False),
        sentiment=pl.col("text").evalpipe.choice(SENTIMENT, service=svc, progress=False),
        quality=pl.col("text").evalpipe.score(QUALITY, service=svc, progress=False),
    )  # a DataFrame; three jobs at once on polars' pool (each waiting on none of the others)
    # the questions of the ask above come from the answer cache, but for the row filtered out
    assert sent(service) - asked == 1 + DISTINCT + 1
    for text, *got in eager.select("text", "helpful", "sentiment", "quality").rows():
        for answered, question in zip(got, (HELPFUL, SENTIMENT, QUALITY), strict=True):
            assert_close(answered, truth(text, question))
