"""The embedded service's public contract over real HTTP: auth, validation, answers, models."""

from __future__ import annotations

from typing import Any

import httpx
import orjson
import pytest

from conftest import API_KEY, QUESTIONS, STATE, auth, billed_tokens, embedded, evaluate_body
from evalpipe.contract.resources import check_response, validate_questions
from evalpipe.service import EmbeddedService

# --------------------------------------------------------------------------- auth


@pytest.mark.parametrize(
    "headers",
    [
        {},
        auth("wrong-key"),
        {"Authorization": API_KEY},
        {"Authorization": f"Basic {API_KEY}"},
        {"Authorization": "Bearer"},
        {"Authorization": f"Bearer {API_KEY}x"},
    ],
    ids=["missing", "wrong", "no-scheme", "basic", "empty", "longer"],
)
@pytest.mark.parametrize("endpoint", ["evaluate", "models"])
def test_missing_or_wrong_key_is_401_with_a_json_body(
    service: EmbeddedService, headers: dict[str, str], endpoint: str
) -> None:
    if endpoint == "evaluate":
        url, body = "/v1/evaluate", orjson.dumps(evaluate_body())
        response = httpx.post(service.base_url + url, content=body, headers=headers)
    else:
        response = httpx.get(service.base_url + "/v1/models", headers=headers)
    assert response.status_code == 401
    assert response.headers["content-type"] == "application/json"
    assert response.json()["error"]["type"] == "authentication_error"
    assert API_KEY not in response.text


def test_auth_comes_before_validation(service: EmbeddedService) -> None:
    response = httpx.post(service.base_url + "/v1/evaluate", content=b"not json")
    assert response.status_code == 401


# --------------------------------------------------------------------------- 422s


def _without(path: tuple[str, ...]) -> dict[str, Any]:
    body = evaluate_body()
    node = body
    for part in path[:-1]:
        node = node[part]
    del node[path[-1]]
    return body


def _question(question: dict[str, Any]) -> dict[str, Any]:
    return evaluate_body(questions={"q": question})


def _choice(n: int) -> dict[str, Any]:
    criteria = {f"o{i}": None for i in range(n)}
    return _question({"type": "choice", "instructions": "x", "criteria": criteria})


def _score(n: int) -> dict[str, Any]:
    return _question(
        {"type": "score", "instructions": "x", "criteria": [f"l{i}" for i in range(n)]}
    )


MALFORMED: list[tuple[str, Any, list[Any]]] = [
    ("missing state", _without(("state",)), ["body", "state"]),
    ("missing model", _without(("model",)), ["body", "model"]),
    ("missing questions", _without(("questions",)), ["body", "questions"]),
    ("state number", evaluate_body(state=3), ["body", "state"]),
    ("state bool", evaluate_body(state=True), ["body", "state"]),
    ("state null", evaluate_body(state=None), ["body", "state"]),
    ("model number", evaluate_body(model=13), ["body", "model"]),
    ("model empty", evaluate_body(model=" "), ["body", "model"]),
    ("unknown model", evaluate_body(model="model-9.9.9"), ["body", "model"]),
    ("extra field", evaluate_body(temperature=0), ["body", "temperature"]),
    ("no questions", evaluate_body(questions={}), ["body", "questions"]),
    ("questions array", evaluate_body(questions=[]), ["body", "questions"]),
    ("question string", evaluate_body(questions={"q": "x"}), ["body", "questions", "q"]),
    (
        "bad type",
        _question({"type": "rank", "instructions": "x"}),
        ["body", "questions", "q", "type"],
    ),
    ("missing type", _question({"instructions": "x"}), ["body", "questions", "q", "type"]),
    (
        "missing instructions",
        _without(("questions", "sentiment", "instructions")),
        ["body", "questions", "sentiment", "instructions"],
    ),
    (
        "instructions number",
        _question({"type": "noul", "instructions": 5}),
        ["body", "questions", "q", "instructions"],
    ),
    (
        "noul criteria extra key",
        _question({"type": "noul", "instructions": "x", "criteria": {"maybe": "?"}}),
        ["body", "questions", "q", "criteria", "maybe"],
    ),
    (
        "noul criteria string",
        _question({"type": "noul", "instructions": "x", "criteria": "yes"}),
        ["body", "questions", "q", "criteria"],
    ),
    (
        "choice without criteria",
        _without(("questions", "sentiment", "criteria")),
        ["body", "questions", "sentiment", "criteria"],
    ),
    ("choice 0 options", _choice(0), ["body", "questions", "q", "criteria"]),
    ("choice 256 options", _choice(256), ["body", "questions", "q", "criteria"]),
    (
        "choice rubric number",
        _question({"type": "choice", "instructions": "x", "criteria": {"a": 1}}),
        ["body", "questions", "q", "criteria", "a"],
    ),
    ("score 0 levels", _score(0), ["body", "questions", "q", "criteria"]),
    ("score 11 levels", _score(11), ["body", "questions", "q", "criteria"]),
    (
        "score criteria object",
        _question({"type": "score", "instructions": "x", "criteria": {"0": "low"}}),
        ["body", "questions", "q", "criteria"],
    ),
    (
        "score level null",
        _question({"type": "score", "instructions": "x", "criteria": ["low", None]}),
        ["body", "questions", "q", "criteria", 1],
    ),
    (
        "numeric question key",
        evaluate_body(questions={"7": {"type": "noul"}}),
        ["body", "questions", "7", "instructions"],
    ),
    (
        "dotted question key",
        evaluate_body(questions={"a.b": {"type": "score", "instructions": "x"}}),
        ["body", "questions", "a.b", "criteria"],
    ),
    ("body array", [evaluate_body()], ["body"]),
    ("body string", "hello", ["body"]),
    ("body null", None, ["body"]),
]


@pytest.mark.parametrize(
    ("body", "loc"), [(b, loc) for _, b, loc in MALFORMED], ids=[m[0] for m in MALFORMED]
)
def test_malformed_bodies_are_422_naming_the_field(
    http: httpx.Client, body: Any, loc: list[Any]
) -> None:
    response = http.post("/v1/evaluate", content=orjson.dumps(body))
    assert response.status_code == 422, response.text
    detail = response.json()["detail"]
    assert loc in [issue["loc"] for issue in detail], detail
    assert all(issue["msg"] and issue["type"] for issue in detail)


@pytest.mark.parametrize(
    "raw", [b"not json", b'{"state": "x",', b"", b"\xff\xfe", b'{"state": NaN}'], ids=repr
)
def test_non_json_is_422_with_the_position(http: httpx.Client, raw: bytes) -> None:
    response = http.post("/v1/evaluate", content=raw)
    assert response.status_code == 422
    [issue] = response.json()["detail"]
    assert issue["loc"] == ["body"] and issue["type"] == "json_invalid"
    assert issue["msg"].startswith("invalid JSON") and "char" in issue["msg"]


@pytest.mark.parametrize(
    "body",
    [_choice(255), _choice(1), _score(10), _score(1), _score(2)],
    ids=["255 options", "1 option", "10 levels", "1 level", "2 levels"],
)
def test_limits_at_their_edge_are_accepted(http: httpx.Client, body: dict[str, Any]) -> None:
    response = http.post("/v1/evaluate", json=body)
    assert response.status_code == 200, response.text
    check_response(validate_questions(body["questions"]), response.json())


def test_json_beyond_what_orjson_holds_is_still_json(http: httpx.Client) -> None:
    raw = b'{"state": {"n": 123456789012345678901234567890}, "model": "model-latest",'
    raw += (
        b' "questions": {"q": {"type": "score", "instructions": "x", "criteria": [{"x": 1e400}]}}}'
    )
    response = http.post("/v1/evaluate", content=raw)
    assert response.status_code == 200, response.text


def test_nesting_too_deep_to_count_is_422_not_500(http: httpx.Client) -> None:
    raw = b'{"model": "model-latest", "questions": {"q": {"type": "noul", "instructions": "x"}},'
    raw += b' "state": ' + b"[" * 900 + b"]" * 900 + b"}"
    response = http.post("/v1/evaluate", content=raw)
    assert response.status_code == 422 and response.json()["detail"][0]["loc"] == ["body"]


# --------------------------------------------------------------------------- answers


STATES = {
    "string": STATE,
    "object": {"title": "Loose button", "body": STATE, "stars": 3, "verified": True},
    "array": [{"role": "user", "content": STATE}, {"role": "agent", "content": "Sorry!"}],
}


@pytest.mark.parametrize("state", list(STATES.values()), ids=list(STATES))
@pytest.mark.parametrize("kind", ["noul", "choice", "score", "all"])
def test_every_question_type_and_state_shape_passes_the_contract(
    http: httpx.Client, state: Any, kind: str
) -> None:
    questions = {k: q for k, q in QUESTIONS.items() if kind in ("all", q["type"])}
    response = http.post("/v1/evaluate", json=evaluate_body(state=state, questions=questions))
    assert response.status_code == 200 and response.headers["content-type"] == "application/json"
    body = response.json()
    check_response(validate_questions(questions), body)
    assert body["usage"] == {"input_tokens": billed_tokens(state, questions), "output_tokens": 0}


def test_noul_criteria_variants_are_accepted(http: httpx.Client) -> None:
    questions = {
        "bare": {"type": "noul", "instructions": "Is it?"},
        "null": {"type": "noul", "instructions": "Is it?", "criteria": None},
        "empty": {"type": "noul", "instructions": "Is it?", "criteria": {}},
        "only_true": {"type": "noul", "instructions": ["Is", "it?"], "criteria": {"true": "y"}},
        "nulls": {"type": "noul", "instructions": {"q": "?"}, "criteria": {"false": None}},
    }
    response = http.post("/v1/evaluate", json=evaluate_body(questions=questions))
    assert response.status_code == 200
    check_response(validate_questions(questions), response.json())


@pytest.mark.parametrize("model", ["model-latest", "model-preview", "model-1.13.0"])
def test_aliases_resolve_to_the_versioned_model(http: httpx.Client, model: str) -> None:
    response = http.post("/v1/evaluate", json=evaluate_body(model=model))
    assert response.status_code == 200 and response.json()["model"] == "model-1.13.0"


def test_the_same_answers_for_every_name_of_the_model(http: httpx.Client) -> None:
    bodies = [
        http.post("/v1/evaluate", json=evaluate_body(model=m)).json()["answers"]
        for m in ("model-latest", "model-preview", "model-1.13.0")
    ]
    assert bodies[0] == bodies[1] == bodies[2]


def test_same_request_same_body(http: httpx.Client, service: EmbeddedService) -> None:
    raw = orjson.dumps(evaluate_body())
    first = http.post("/v1/evaluate", content=raw).content
    assert http.post("/v1/evaluate", content=raw).content == first
    with embedded() as other:
        again = httpx.post(other.base_url + "/v1/evaluate", content=raw, headers=auth())
    assert again.content == first


def test_different_state_different_answers(http: httpx.Client) -> None:
    answers = [
        http.post("/v1/evaluate", json=evaluate_body(state=f"{STATE} ({i})")).json()["answers"]
        for i in range(5)
    ]
    assert len({orjson.dumps(a) for a in answers}) == 5


def test_the_order_of_options_is_kept(http: httpx.Client) -> None:
    for options in (["a", "b", "c"], ["c", "a", "b"]):
        criteria = dict.fromkeys(options)
        question = {"type": "choice", "instructions": "x", "criteria": criteria}
        body = evaluate_body(questions={"q": question})
        answer = http.post("/v1/evaluate", json=body).json()["answers"]["q"]
        assert list(answer["probabilities"]) == options


def test_models_lists_the_aliases_as_the_reference_evaluator(http: httpx.Client) -> None:
    response = http.get("/v1/models")
    assert response.status_code == 200 and response.headers["content-type"] == "application/json"
    models = response.json()["models"]
    assert [m["name"] for m in models] == ["model-latest", "model-preview"]
    for entry in models:
        assert set(entry) == {"name", "description", "release_date"}
        assert "reference evaluator for offline runs" in entry["description"].lower()
        assert "not the production model" in entry["description"]
        year, month, day = entry["release_date"].split("-")
        assert (len(year), len(month), len(day)) == (4, 2, 2)


# --------------------------------------------------------------------------- context, size


def test_a_70000_word_state_exceeds_the_context(http: httpx.Client) -> None:
    state = " ".join(["word"] * 70_000)
    response = http.post("/v1/evaluate", json=evaluate_body(state=state))
    assert response.status_code == 422
    [issue] = response.json()["detail"]
    assert issue["loc"] == ["body", "state"] and issue["type"] == "context_limit"
    # over both limits: the one no split of the questions can mend is named
    assert "context limit" in issue["msg"] and "32000" in issue["msg"]


def test_questions_that_fit_one_at_a_time_but_not_together_are_refused(
    http: httpx.Client,
) -> None:
    state = " ".join(["word"] * 10_000)
    questions = {k: {"type": "noul", "instructions": " ".join(["why"] * 14_000)} for k in "abcd"}
    response = http.post("/v1/evaluate", json=evaluate_body(state=state, questions=questions))
    assert response.status_code == 422
    [issue] = response.json()["detail"]
    assert issue["type"] == "context_limit" and "64000" in issue["msg"]


def test_state_plus_longest_question_over_32k_is_refused(http: httpx.Client) -> None:
    state = " ".join(["word"] * 31_990)
    question = {"type": "noul", "instructions": " ".join(["why"] * 20)}
    response = http.post("/v1/evaluate", json=evaluate_body(state=state, questions={"q": question}))
    assert response.status_code == 422
    assert "32000" in response.json()["detail"][0]["msg"]


def test_a_state_just_under_32k_with_a_small_question_is_accepted(http: httpx.Client) -> None:
    state = " ".join(["word"] * 31_900)
    questions = {"q": {"type": "noul", "instructions": "Is it long?"}}
    response = http.post("/v1/evaluate", json=evaluate_body(state=state, questions=questions))
    assert response.status_code == 200
    assert response.json()["usage"]["input_tokens"] == billed_tokens(state, questions)


def test_a_body_over_the_size_limit_is_413() -> None:
    with embedded(max_body_bytes=2000) as small:
        url, big = small.base_url + "/v1/evaluate", evaluate_body(state="x " * 1500)
        response = httpx.post(url, json=big, headers=auth())
        assert response.status_code == 413
        assert response.json()["error"]["type"] == "request_too_large"

        def chunks() -> Any:
            yield orjson.dumps(big)

        chunked = httpx.post(url, content=chunks(), headers=auth())  # no Content-Length
        assert chunked.status_code == 413
        assert httpx.post(url, json=evaluate_body(), headers=auth()).status_code == 200


def test_unknown_routes_and_methods(http: httpx.Client) -> None:
    assert http.get("/v1/evaluate").status_code == 405
    assert http.get("/v2/models").status_code == 404
