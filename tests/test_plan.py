"""Token counting, the context limits and the splitting of over-long rows."""

from __future__ import annotations

import pytest

from pipeline.plan import Planner, cost, minimum_seconds
from pipeline.tokens import (
    CONTEXT_LIMIT,
    QUESTION_CONTEXT_LIMIT,
    context_violation,
    count_question,
    count_request,
    count_text,
    count_value,
)


def test_tokens_are_words_and_punctuation() -> None:
    assert count_text("Hello, world!") == 4
    assert count_text("") == 0
    assert count_text("café naïve 東京") == 3


def test_values_count_keys_and_scalars() -> None:
    assert count_value({"rating": 5, "text": "good stuff"}) == 1 + 1 + 1 + 2
    assert count_value(["a b", None, True]) == 4


def test_question_keys_are_not_counted_but_options_are() -> None:
    noul = {"type": "noul", "instructions": "Is it good?", "criteria": {"true": "yes it is"}}
    assert count_question(noul) == 4 + 3
    choice = {"type": "choice", "instructions": "Pick", "criteria": {"red": None, "blue": "sky"}}
    assert count_question(choice) == 1 + 1 + 2
    assert count_request("a b", {"any-key": choice}) == count_request("a b", {"k": choice}) == 6


def test_context_violation_edges() -> None:
    assert context_violation(QUESTION_CONTEXT_LIMIT - 10, {"q": 10}) is None
    assert "longest question" in context_violation(QUESTION_CONTEXT_LIMIT - 10, {"q": 11})
    quarter = CONTEXT_LIMIT // 4
    assert context_violation(quarter, {"a": quarter, "b": quarter, "c": quarter}) is None
    assert "all questions" in context_violation(
        quarter, {"a": quarter, "b": quarter, "c": quarter + 1}
    )


def question(words: int) -> dict:
    return {"type": "noul", "instructions": " ".join(["word"] * words)}


def test_a_row_that_fits_is_one_request_with_every_question() -> None:
    planner = Planner({"a": question(10), "b": question(20)})
    plan = planner.plan("one two three")
    assert plan.error_type is None
    assert [(r.keys, r.tokens) for r in plan.requests] == [(("a", "b"), 33)]


def test_an_over_long_row_is_split_so_every_request_fits() -> None:
    questions = {k: question(15_000) for k in "abcde"}
    planner = Planner(questions)
    state = " ".join(["w"] * 10_000)
    plan = planner.plan(state)
    assert plan.error_type is None
    assert len(plan.requests) == 2  # 10k + 5 x 15k > 64k; 10k + 3 x 15k fits
    assert sorted(k for r in plan.requests for k in r.keys) == list("abcde")
    for r in plan.requests:
        assert context_violation(10_000, {k: 15_000 for k in r.keys}) is None
        assert r.tokens == 10_000 + 15_000 * len(r.keys)


def test_a_state_that_cannot_fit_one_question_is_a_context_limit_error() -> None:
    planner = Planner({"small": question(5), "big": question(3_000)})
    plan = planner.plan(" ".join(["w"] * 29_500))
    assert plan.requests == ()
    assert plan.error_type == "context_limit"
    assert "'big'" in plan.error


@pytest.mark.parametrize(("requests", "tokens", "expected"), [(1200, 10, 60.0), (10, 500_000, 2.0)])
def test_minimum_duration_is_the_binding_limit(requests: int, tokens: int, expected: float) -> None:
    assert minimum_seconds(requests, tokens, rpm=1200, tps=250_000) == expected


def test_cost_is_per_million_input_tokens() -> None:
    assert cost(1_000_000) == pytest.approx(0.042)
