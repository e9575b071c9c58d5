"""The evaluation service's contract as code: its resources (the request and response bodies,
the questions), the validation the service answers with 422 (plus its context and rate limits)
and the checks every response must pass.

Everything else in evalpipe speaks through this module: the config validates its questions
here before anything is sent, the embedded service rejects what this module rejects, and the
client checks every response here. Every problem names its path, e.g.
`questions.sentiment.criteria: at most 255 options (got 300)`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sized
from typing import Annotated, Any, Literal, TypeVar

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    PlainValidator,
    TypeAdapter,
    ValidationError,
)
from pydantic_core import PydanticCustomError

from evalpipe.errors import ContractError, InvalidResponseError

C = TypeVar("C", bound=Sized)

QUESTION_TYPES = ("noul", "choice", "score")
REQUESTS_PER_MINUTE = 1200  # an account's default limits, for model-1.13.0
TOKENS_PER_SECOND = 250_000
MAX_OPTIONS = 255
MAX_LEVELS = 10
MIN_RECOMMENDED_LEVELS = 2
PROBABILITY_TOLERANCE = 1e-6


# --------------------------------------------------------------------------- value types


def json_type(value: Any) -> str:
    """The JSON name of a Python value's type, for messages."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object" if isinstance(value, dict) else type(value).__name__


def _text(value: Any) -> Any:
    if isinstance(value, (str, dict, list)):
        return value
    raise PydanticCustomError(
        "text_type",
        "must be a string, object or array (got {got})",
        {"got": json_type(value)},
    )


def _text_or_null(value: Any) -> Any:
    return None if value is None else _text(value)


Text = Annotated[Any, PlainValidator(_text)]
TextOrNull = Annotated[Any, PlainValidator(_text_or_null)]


def _counted(what: str, limit: int) -> Callable[[C], C]:
    """A validator of a criteria list or map: 1 to `limit` entries, else the service's error
    (`too_few_options`, `too_many_levels`, ...)."""

    def check(criteria: C) -> C:
        if not criteria:
            raise PydanticCustomError(f"too_few_{what}s", f"at least 1 {what} (got 0)")
        if len(criteria) > limit:
            raise PydanticCustomError(
                f"too_many_{what}s",
                "at most {limit} " + what + "s (got {got})",
                {"limit": limit, "got": len(criteria)},
            )
        return criteria

    return check


def _questions(questions: dict[str, Any]) -> dict[str, Any]:
    if not questions:
        raise PydanticCustomError("too_few_questions", "at least 1 question (got 0)")
    return questions


def _model_name(name: str) -> str:
    if not name.strip():
        raise PydanticCustomError("empty_model", "must name a model (got an empty string)")
    return name


# --------------------------------------------------------------------------- requests


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class NoulCriteria(_Strict):
    """What yes (`true`) and no (`false`) mean; both optional."""

    true: TextOrNull = None
    false: TextOrNull = None


class NoulQuestion(_Strict):
    type: Literal["noul"]
    instructions: Text
    criteria: NoulCriteria | None = None


class ChoiceQuestion(_Strict):
    type: Literal["choice"]
    instructions: Text
    criteria: Annotated[dict[str, TextOrNull], AfterValidator(_counted("option", MAX_OPTIONS))]


class ScoreQuestion(_Strict):
    type: Literal["score"]
    instructions: Text
    criteria: Annotated[list[Text], AfterValidator(_counted("level", MAX_LEVELS))]


Question = Annotated[NoulQuestion | ChoiceQuestion | ScoreQuestion, Field(discriminator="type")]
Questions = Annotated[dict[str, Question], AfterValidator(_questions)]


class EvaluationRequest(_Strict):
    """The body of `POST /v1/evaluate`: a state, a model and the questions."""

    state: Text
    model: Annotated[str, AfterValidator(_model_name)]
    questions: Questions


# --------------------------------------------------------------------------- responses


class Usage(BaseModel):
    model_config = ConfigDict(strict=True)

    input_tokens: int = 0
    output_tokens: int = 0


class NoulAnswer(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    type: Literal["noul"]
    noul: float


class ChoiceAnswer(BaseModel):
    model_config = ConfigDict(strict=True)

    type: Literal["choice"]
    choice: str
    probabilities: dict[str, float]
    confidence: float


class ScoreAnswer(BaseModel):
    model_config = ConfigDict(strict=True)

    type: Literal["score"]
    score: float
    legend: dict[str, str]
    probabilities: dict[str, float]
    confidence: float


Answer = Annotated[NoulAnswer | ChoiceAnswer | ScoreAnswer, Field(discriminator="type")]


class EvaluationResponse(BaseModel):
    """The body of a 200 from `POST /v1/evaluate`: the model that answered, an answer per
    question key, and the usage billed."""

    model_config = ConfigDict(strict=True)

    model: str
    answers: dict[str, Answer]
    usage: Usage


class ModelEntry(BaseModel):
    name: str
    description: str
    release_date: str


class ModelList(BaseModel):
    """The body of `GET /v1/models`: the models and aliases the service accepts."""

    models: list[ModelEntry]


# --------------------------------------------------------------------------- validation

_REQUEST = TypeAdapter(EvaluationRequest)
_QUESTIONS = TypeAdapter(Questions)
_RESPONSE = TypeAdapter(EvaluationResponse)

_MESSAGES = {
    "missing": "field required",
    "extra_forbidden": "unknown field",
    "model_type": "must be an object",
    "dict_type": "must be an object",
    "list_type": "must be an array",
    "string_type": "must be a string",
    "literal_error": "must be one of noul, choice, score",
}

Issue = tuple[tuple[str | int, ...], str, str]  # (loc, msg, type)


def _clean(error: Mapping[str, Any]) -> Issue:
    """One pydantic error as (loc, message, type) in the contract's words."""
    loc = tuple(error["loc"])
    kind = error["type"]
    # A discriminated union puts the question type into the path; the user never wrote it.
    if len(loc) >= 3 and loc[0] == "questions" and loc[2] in QUESTION_TYPES:
        loc = loc[:2] + loc[3:]
    if kind in ("union_tag_not_found", "union_tag_invalid"):
        tag = error.get("ctx", {}).get("tag")
        got = f" (got {tag!r})" if kind == "union_tag_invalid" else ""
        return (*loc, "type"), f"required, one of noul, choice, score{got}", kind
    message = _MESSAGES.get(kind, error["msg"])
    if kind == "extra_forbidden" and len(loc) >= 2 and loc[-2] == "criteria":
        message = "unknown field: noul criteria take only `true` and `false`"
    return loc, message, kind


def path_of(loc: tuple[str | int, ...]) -> str:
    return ".".join(str(part) for part in loc) or "body"


def _contract_error(errors: list[Any], head: tuple[str, ...] | None = None) -> ContractError:
    """ContractError from pydantic errors; `head` replaces the first path element."""
    lines = []
    for loc, msg, kind in map(_clean, errors):
        if head is not None:
            loc = head + loc[1:]
        lines.append((path_of(loc), msg, kind))
    more = f" (and {len(lines) - 1} more)" if len(lines) > 1 else ""
    return ContractError(f"{lines[0][0]}: {lines[0][1]}{more}", tuple(lines))


def validate_request(body: Any) -> EvaluationRequest:
    """Parse an evaluate request body; raises ContractError naming every offending path."""
    if not isinstance(body, dict):
        message = f"must be a JSON object (got {json_type(body)})"
        raise ContractError(f"body: {message}", (("body", message, "model_type"),))
    try:
        return _REQUEST.validate_python(body)
    except ValidationError as exc:
        raise _contract_error(exc.errors(include_url=False)) from None


def validate_questions(
    questions: Any, head: tuple[str, ...] = ("questions",)
) -> dict[str, NoulQuestion | ChoiceQuestion | ScoreQuestion]:
    """Validate a questions map on its own (the job config's `questions`), paths under `head`."""
    try:
        return _QUESTIONS.validate_python(questions)
    except ValidationError as exc:
        errors = [{**e, "loc": ("questions", *e["loc"])} for e in exc.errors(include_url=False)]
        raise _contract_error(errors, head) from None


def question_warnings(questions: Mapping[str, Any], prefix: str = "questions") -> list[str]:
    """Legal but doubtful questions: a score question with fewer than two levels."""
    warnings = []
    for key, question in questions.items():
        if isinstance(question, ScoreQuestion) and len(question.criteria) < MIN_RECOMMENDED_LEVELS:
            warnings.append(
                f"{prefix}.{key}.criteria: a score question should have at least "
                f"{MIN_RECOMMENDED_LEVELS} levels (got {len(question.criteria)})"
            )
    return warnings


def question_dicts(questions: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """Parsed questions back to the JSON the service takes (unset optional fields left out)."""
    return {key: q.model_dump(exclude_none=True) for key, q in questions.items()}


# --------------------------------------------------------------------------- response checks


def _bad(path: str, message: str) -> InvalidResponseError:
    return InvalidResponseError(f"invalid response: {path}: {message}")


def _check_distribution(path: str, probabilities: Mapping[str, float], keys: list[str]) -> None:
    if sorted(probabilities) != sorted(keys):
        raise _bad(
            f"{path}.probabilities",
            f"keys must be exactly {keys} (got {sorted(probabilities)})",
        )
    values = list(probabilities.values())
    if any(not math.isfinite(p) or p < 0 or p > 1 for p in values):
        raise _bad(f"{path}.probabilities", "every probability must be in [0, 1]")
    total = math.fsum(values)
    if abs(total - 1.0) > PROBABILITY_TOLERANCE:
        raise _bad(f"{path}.probabilities", f"must sum to 1 (got {total!r})")


def _check_confidence(path: str, confidence: float) -> None:
    if not (0.0 <= confidence <= 1.0):
        raise _bad(f"{path}.confidence", f"must be in [0, 1] (got {confidence!r})")


def _check_answer(path: str, question: Any, answer: Any) -> None:
    if answer.type != question.type:
        raise _bad(f"{path}.type", f"must be {question.type!r} (got {answer.type!r})")
    if isinstance(answer, NoulAnswer):
        if not (0.0 <= answer.noul <= 1.0):
            raise _bad(f"{path}.noul", f"must be in [0, 1] (got {answer.noul!r})")
        return
    _check_confidence(path, answer.confidence)
    if isinstance(answer, ChoiceAnswer):
        _check_distribution(path, answer.probabilities, list(question.criteria))
        if answer.choice not in answer.probabilities:
            raise _bad(f"{path}.choice", f"{answer.choice!r} is not one of the options")
        best = max(answer.probabilities.values())
        if answer.probabilities[answer.choice] < best - PROBABILITY_TOLERANCE:
            raise _bad(f"{path}.choice", f"{answer.choice!r} is not the most probable option")
        return
    levels = [str(i) for i in range(len(question.criteria))]
    _check_distribution(path, answer.probabilities, levels)
    if sorted(answer.legend) != sorted(levels):
        raise _bad(f"{path}.legend", f"keys must be exactly {levels}")
    if not (0.0 <= answer.score <= len(levels) - 1 + PROBABILITY_TOLERANCE):
        raise _bad(f"{path}.score", f"must be within the levels (got {answer.score!r})")


def check_response(questions: Mapping[str, Any], body: Any) -> EvaluationResponse:
    """Parse and check a 200 body against the questions that were asked: every question answered
    with its type, probabilities that sum to 1, options and levels exactly as asked.

    `questions` are parsed questions (from `validate_questions`). Raises InvalidResponseError
    naming the first broken rule; never anything else.
    """
    try:
        response = _RESPONSE.validate_python(body)
    except ValidationError as exc:
        error = exc.errors(include_url=False)[0]
        raise _bad(path_of(tuple(error["loc"])), error["msg"]) from None
    if set(response.answers) != set(questions):
        missing = sorted(set(questions) - set(response.answers))
        extra = sorted(set(response.answers) - set(questions))
        raise _bad("answers", f"one answer per question (missing {missing}, unexpected {extra})")
    for key, question in questions.items():
        _check_answer(f"answers.{key}", question, response.answers[key])
    return response
