"""The reference evaluator: well-formed, deterministic and content-sensitive answers."""

from __future__ import annotations

import math
import subprocess
import sys
from typing import Any

import orjson
import pytest

from conftest import QUESTIONS, STATE
from evalpipe.contract.resources import check_response, validate_questions
from evalpipe.service.evaluator import (
    answer,
    compile_questions,
    confidence,
    evaluate,
    flatten,
    json_text,
)

pytestmark = pytest.mark.patient  # `make test` runs it beside the rest (the Makefile)

PARSED = validate_questions(QUESTIONS)


def response(state: Any, questions: dict[str, Any] = QUESTIONS) -> dict[str, Any]:
    usage = {"input_tokens": 0, "output_tokens": 0}
    return {"model": "model-1.13.0", "answers": evaluate(state, questions), "usage": usage}


@pytest.mark.parametrize(
    "state",
    [
        STATE,
        {"title": "Loose button", "body": STATE, "stars": 3, "verified": True, "reply": None},
        [{"role": "user", "content": STATE}, {"role": "agent", "content": "Sorry!"}],
        "",
        [],
        {},
    ],
    ids=["string", "object", "array", "empty-string", "empty-array", "empty-object"],
)
def test_answers_pass_the_contract_checks(state: Any) -> None:
    check_response(PARSED, response(state))


def test_distributions_are_exact() -> None:
    answers = evaluate(STATE, QUESTIONS)
    for key in ("sentiment", "quality"):
        probabilities = answers[key]["probabilities"]
        assert abs(math.fsum(probabilities.values()) - 1.0) < 1e-9
        n, top = len(probabilities), max(probabilities.values())
        assert answers[key]["confidence"] == pytest.approx((n * top - 1) / (n - 1))
    choice = answers["sentiment"]
    assert choice["probabilities"][choice["choice"]] == max(choice["probabilities"].values())
    score = answers["quality"]
    expected = math.fsum(int(k) * p for k, p in score["probabilities"].items())
    assert score["score"] == pytest.approx(expected)
    assert score["legend"] == {"0": "poor", "1": "fair", "2": "good", "3": "excellent"}
    assert "confidence" not in answers["helpful"] and 0 <= answers["helpful"]["noul"] <= 1


def test_legend_json_encodes_non_strings() -> None:
    levels = ["low", {"label": "mid", "min": 3}, ["high", 5], None]
    question = {"type": "score", "instructions": "Rate", "criteria": levels}
    legend = evaluate(STATE, {"q": question})["q"]["legend"]
    assert legend == {"0": "low", "1": '{"label":"mid","min":3}', "2": '["high",5]', "3": "null"}


def test_single_option_and_single_level_are_certain() -> None:
    questions = {
        "c": {"type": "choice", "instructions": "Pick", "criteria": {"only": None}},
        "s": {"type": "score", "instructions": "Rate", "criteria": ["one level"]},
    }
    answers = evaluate(STATE, questions)
    assert answers["c"] == {
        "type": "choice",
        "choice": "only",
        "probabilities": {"only": 1.0},
        "confidence": 1.0,
    }
    assert answers["s"]["score"] == 0.0 and answers["s"]["confidence"] == 1.0


def test_255_options_sum_to_one() -> None:
    criteria = {f"option {i}": f"rubric {i}" for i in range(255)}
    answer = evaluate(STATE, {"q": {"type": "choice", "instructions": "x", "criteria": criteria}})
    probabilities = answer["q"]["probabilities"]
    assert list(probabilities) == list(criteria)
    assert abs(math.fsum(probabilities.values()) - 1.0) < 1e-9


def test_noul_without_criteria_uses_the_instructions() -> None:
    question = {"type": "noul", "instructions": "Is the jacket button loose?"}
    about = evaluate("the jacket button is loose", {"q": question})["q"]["noul"]
    unrelated = evaluate("weather forecast for tomorrow", {"q": question})["q"]["noul"]
    assert about > unrelated


def test_noul_follows_true_and_false_criteria() -> None:
    question = {
        "type": "noul",
        "instructions": "Is the customer happy?",
        "criteria": {"true": "happy delighted love great", "false": "angry broken refund awful"},
    }
    happy = evaluate("I love it, great jacket, delighted", {"q": question})["q"]["noul"]
    angry = evaluate("awful, broken zipper, I want a refund", {"q": question})["q"]["noul"]
    assert happy > 0.5 > angry


def test_choice_follows_word_overlap() -> None:
    criteria = {"shipping": "delivery late parcel courier", "sizing": "too small large fit size"}
    question = {"type": "choice", "instructions": "What is the complaint about?"}
    question["criteria"] = criteria
    assert evaluate("the parcel delivery was late", {"q": question})["q"]["choice"] == "shipping"
    assert evaluate("it is too small, wrong size", {"q": question})["q"]["choice"] == "sizing"


def test_answers_depend_on_instructions_and_criteria() -> None:
    base = evaluate(STATE, QUESTIONS)
    reworded = {**QUESTIONS, "sentiment": {**QUESTIONS["sentiment"], "instructions": "Tone?"}}
    assert evaluate(STATE, reworded)["sentiment"] != base["sentiment"]
    criteria = {"positive": "fits well", "mixed": None, "negative": "button came loose"}
    rubric = {**QUESTIONS, "sentiment": {**QUESTIONS["sentiment"], "criteria": criteria}}
    assert evaluate(STATE, rubric)["sentiment"] != base["sentiment"]


def test_different_states_get_different_answers() -> None:
    states = [f"{STATE} Review number {i}." for i in range(20)]
    nouls = {evaluate(s, QUESTIONS)["helpful"]["noul"] for s in states}
    assert len(nouls) == 20


def test_question_keys_do_not_change_answers() -> None:
    renamed = {f"renamed_{k}": q for k, q in QUESTIONS.items()}
    assert list(evaluate(STATE, renamed).values()) == list(evaluate(STATE, QUESTIONS).values())


@pytest.mark.subprocess
def test_deterministic_across_processes() -> None:
    # A fresh interpreter has another hash seed: answers must not depend on it.
    script = (
        "import orjson, sys; from evalpipe.service.evaluator import evaluate; "
        "state, questions = orjson.loads(sys.stdin.buffer.read()); "
        "sys.stdout.buffer.write(orjson.dumps(evaluate(state, questions)))"
    )
    payload = orjson.dumps([STATE, QUESTIONS])
    runs = [
        subprocess.run(
            [sys.executable, "-c", script], input=payload, capture_output=True, check=True
        ).stdout
        for _ in range(2)
    ]
    assert runs[0] == runs[1] == orjson.dumps(evaluate(STATE, QUESTIONS))


def test_compiled_questions_can_be_reused() -> None:
    # One compiled map answers many states (the service keeps it for a job's every row), each
    # as a fresh compilation would, and the answers follow the state, not the first one asked.
    compiled = compile_questions(QUESTIONS)
    states = [STATE, "Broken on arrival, the worst purchase I made this year.", "ok"]
    first = [answer(state, compiled) for state in states]
    again = [answer(state, compile_questions(QUESTIONS)) for state in states]
    assert first == again
    assert len({orjson.dumps(a) for a in first}) == len(states)


def test_flatten_reads_every_json_shape() -> None:
    value = {"a": ["x", 1, 2.5, True, None, {"b": "y"}], "c": False}
    assert flatten(value).split("\n") == ["a", "x", "1", "2.5", "true", "b", "y", "c", "false"]
    assert flatten("plain") == "plain"


def test_flatten_survives_deep_nesting() -> None:
    value: Any = "core"
    for _ in range(5000):
        value = [value]
    assert flatten(value) == "core"


def test_unusual_values_do_not_break_the_evaluator() -> None:
    state = {"big": 2**80, "surrogate": "\ud800", "inf": float("inf")}
    levels = [{"n": 2**80}, "\udfff"]
    answers = evaluate(state, {"q": {"type": "score", "instructions": "x", "criteria": levels}})
    assert answers["q"]["legend"]["0"] == '{"n":1208925819614629174706176}'
    assert json_text("\udfff") == "\udfff"


@pytest.mark.parametrize(("p_max", "n", "expected"), [(1.0, 1, 1.0), (0.25, 4, 0.0), (1.0, 4, 1.0)])
def test_confidence(p_max: float, n: int, expected: float) -> None:
    assert confidence(p_max, n) == pytest.approx(expected)


# --------------------------------------------------------------------------- model versions


def test_the_next_version_turns_a_known_share_of_states_around() -> None:
    """model-1.14.0 answers 25% of states anew (every answer flips) and the rest alike."""
    from evalpipe.service.evaluator import revised
    from evalpipe.service.models import CURRENT_VERSION, NEXT_VERSION

    compiled = compile_questions(QUESTIONS)
    states = [f"{STATE} #{i}" for i in range(400)]
    turned = [s for s in states if revised(s, NEXT_VERSION)]
    assert 0.2 < len(turned) / len(states) < 0.3
    assert not any(revised(s, CURRENT_VERSION) for s in states)
    for state in states[:60]:
        old, new = answer(state, compiled), answer(state, compiled, NEXT_VERSION)
        usage = {"input_tokens": 0, "output_tokens": 0}
        check_response(PARSED, {"model": NEXT_VERSION, "answers": new, "usage": usage})
        if state in turned:
            assert new["helpful"]["noul"] == pytest.approx(1 - old["helpful"]["noul"])
            assert new["sentiment"]["choice"] != old["sentiment"]["choice"]
        else:
            assert new == old
