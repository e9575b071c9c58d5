"""The contract module on its own: request validation (the 422 rules, the context limits) and
the checks every response must pass."""

from __future__ import annotations

import copy
import pickle
from typing import Any

import pytest

from evalpipe.contract.resources import (
    check_response,
    question_dicts,
    question_warnings,
    validate_questions,
    validate_request,
)
from evalpipe.errors import ContractError, InvalidResponseError

QUESTIONS: dict[str, Any] = {
    "helpful": {"type": "noul", "instructions": "Is it helpful?", "criteria": {"true": "yes"}},
    "sentiment": {
        "type": "choice",
        "instructions": "Sentiment?",
        "criteria": {"positive": None, "negative": "unhappy", "mixed": {"both": True}},
    },
    "quality": {"type": "score", "instructions": "Quality?", "criteria": ["poor", "fair", "good"]},
}


def request(**changes: Any) -> dict[str, Any]:
    body = {"state": "a text", "model": "model-1.13.0", "questions": copy.deepcopy(QUESTIONS)}
    body.update(changes)
    return body


def question(key: str, **changes: Any) -> dict[str, Any]:
    body = request()
    body["questions"][key].update(changes)
    return body


@pytest.mark.parametrize("state", ["text", {"a": 1, "b": [1, "x"]}, ["turn one", "turn two"]])
def test_valid_states(state: Any) -> None:
    parsed = validate_request(request(state=state))
    assert parsed.state == state
    assert set(parsed.questions) == set(QUESTIONS)


BAD: list[tuple[dict[str, Any], str, str]] = [
    (request(state=3), "state", "must be a string, object or array (got number)"),
    (request(state=True), "state", "(got boolean)"),
    (request(state=None), "state", "(got null)"),
    ({"model": "m", "questions": QUESTIONS}, "state", "field required"),
    ({"state": "s", "questions": QUESTIONS}, "model", "field required"),
    ({"state": "s", "model": "m"}, "questions", "field required"),
    (request(model=""), "model", "must name a model"),
    (request(questions={}), "questions", "at least 1 question"),
    (request(questions=[]), "questions", "must be an object"),
    (request(extra=1), "extra", "unknown field"),
    (question("helpful", type="maybe"), "questions.helpful.type", "one of noul, choice, score"),
    (request(questions={"q": {"instructions": "x"}}), "questions.q.type", "required"),
    (request(questions={"q": {"type": "noul"}}), "questions.q.instructions", "field required"),
    (question("helpful", instructions=5), "questions.helpful.instructions", "got number"),
    (question("helpful", criteria={"maybe": "x"}), "questions.helpful.criteria.maybe", "only"),
    (question("helpful", criteria="yes"), "questions.helpful.criteria", "must be an object"),
    (question("sentiment", criteria={}), "questions.sentiment.criteria", "at least 1 option"),
    (
        question("sentiment", criteria={f"o{i}": None for i in range(300)}),
        "questions.sentiment.criteria",
        "at most 255 options (got 300)",
    ),
    (question("sentiment", criteria={"a": 1}), "questions.sentiment.criteria.a", "got number"),
    (question("sentiment", criteria=["a"]), "questions.sentiment.criteria", "must be an object"),
    (question("quality", criteria=[]), "questions.quality.criteria", "at least 1 level"),
    (
        question("quality", criteria=[str(i) for i in range(11)]),
        "questions.quality.criteria",
        "at most 10 levels (got 11)",
    ),
    (question("quality", criteria=[1, 2]), "questions.quality.criteria.0", "got number"),
    (question("quality", criteria="abc"), "questions.quality.criteria", "must be an array"),
]


@pytest.mark.parametrize(("body", "path", "fragment"), BAD)
def test_invalid_requests_name_their_path(body: dict[str, Any], path: str, fragment: str) -> None:
    with pytest.raises(ContractError) as info:
        validate_request(body)
    paths = [p for p, _, _ in info.value.issues]
    assert path in paths, info.value.issues
    message = dict((p, m) for p, m, _ in info.value.issues)[path]
    assert fragment in message
    assert str(info.value).startswith(info.value.issues[0][0] + ": ")


def test_body_must_be_an_object() -> None:
    with pytest.raises(ContractError, match="body: must be a JSON object"):
        validate_request([1, 2])


def test_limits_at_their_edges_are_accepted() -> None:
    validate_request(question("sentiment", criteria={f"o{i}": None for i in range(255)}))
    validate_request(question("quality", criteria=[str(i) for i in range(10)]))
    one = validate_request(question("quality", criteria=["only"]))
    assert question_warnings(one.questions) == [
        "questions.quality.criteria: a score question should have at least 2 levels (got 1)"
    ]


def test_noul_criteria_are_optional_and_round_trip() -> None:
    parsed = validate_questions({"q": {"type": "noul", "instructions": "x"}})
    assert question_dicts(parsed) == {"q": {"type": "noul", "instructions": "x"}}
    assert question_dicts(validate_questions(QUESTIONS)) == QUESTIONS


def test_validate_questions_prefixes_paths_and_errors_pickle() -> None:
    with pytest.raises(ContractError) as info:
        validate_questions({"s": {"type": "choice", "instructions": "x", "criteria": {}}})
    assert str(info.value) == "questions.s.criteria: at least 1 option (got 0)"
    again = pickle.loads(pickle.dumps(info.value))
    assert again.issues == info.value.issues and str(again) == str(info.value)


# --------------------------------------------------------------------------- responses


def good_response() -> dict[str, Any]:
    return {
        "model": "model-1.13.0",
        "answers": {
            "helpful": {"type": "noul", "noul": 0.7},
            "sentiment": {
                "type": "choice",
                "choice": "negative",
                "probabilities": {"positive": 0.2, "negative": 0.5, "mixed": 0.3},
                "confidence": 0.25,
            },
            "quality": {
                "type": "score",
                "score": 1.2,
                "legend": {"0": "poor", "1": "fair", "2": "good"},
                "probabilities": {"0": 0.2, "1": 0.4, "2": 0.4},
                "confidence": 0.1,
            },
        },
        "usage": {"input_tokens": 12, "output_tokens": 0},
    }


PARSED = validate_questions(QUESTIONS)


def test_a_good_response_passes() -> None:
    response = check_response(PARSED, good_response())
    assert response.model == "model-1.13.0"
    assert response.answers["sentiment"].choice == "negative"
    assert response.usage.input_tokens == 12


def broken(path: list[str], value: Any) -> dict[str, Any]:
    body = good_response()
    target = body
    for part in path[:-1]:
        target = target[part]
    if value is KeyError:
        del target[path[-1]]
    else:
        target[path[-1]] = value
    return body


BROKEN = [
    (broken(["answers", "helpful"], KeyError), "one answer per question"),
    (broken(["answers", "extra"], {"type": "noul", "noul": 0.1}), "unexpected"),
    (broken(["answers", "helpful", "type"], "choice"), "answers.helpful"),
    (broken(["answers", "helpful", "confidence"], 0.5), "answers.helpful"),
    (broken(["answers", "helpful", "noul"], 1.5), "must be in [0, 1]"),
    (broken(["answers", "sentiment", "choice"], "positive"), "not the most probable"),
    (
        broken(["answers", "sentiment", "probabilities"], {"positive": 0.2, "negative": 0.5}),
        "keys must be exactly",
    ),
    (
        broken(
            ["answers", "sentiment", "probabilities"],
            {"positive": 0.2, "negative": 0.5, "mixed": 0.31},
        ),
        "must sum to 1",
    ),
    (broken(["answers", "sentiment", "confidence"], 1.2), "confidence"),
    (broken(["answers", "sentiment", "confidence"], KeyError), "answers.sentiment"),
    (broken(["answers", "quality", "legend"], KeyError), "answers.quality"),
    (broken(["answers", "quality", "legend"], {"0": "a"}), "legend"),
    (
        broken(["answers", "quality", "probabilities"], {"0": 0.5, "1": 0.5, "3": 0.0}),
        "keys must be exactly",
    ),
    (broken(["answers", "quality", "score"], 7.0), "within the levels"),
    (broken(["model"], KeyError), "model"),
    (broken(["usage"], "lots"), "usage"),
    (broken(["answers", "helpful", "noul"], "0.5"), "answers.helpful"),
]


@pytest.mark.parametrize(("body", "fragment"), BROKEN)
def test_broken_responses_are_typed_errors(body: dict[str, Any], fragment: str) -> None:
    with pytest.raises(InvalidResponseError) as info:
        check_response(PARSED, body)
    assert fragment in str(info.value)
    assert info.value.error_type == "invalid_response"


@pytest.mark.parametrize("body", [None, "text", [], 5])
def test_non_object_bodies_are_typed_errors(body: Any) -> None:
    with pytest.raises(InvalidResponseError):
        check_response(PARSED, body)


def test_probability_tolerance_is_one_in_a_million() -> None:
    body = good_response()
    body["answers"]["sentiment"]["probabilities"]["mixed"] = 0.3 + 5e-7
    check_response(PARSED, body)
    body["answers"]["sentiment"]["probabilities"]["mixed"] = 0.3 + 5e-6
    with pytest.raises(InvalidResponseError):
        check_response(PARSED, body)
