"""The evaluation service's contract as code: its resources, the validation it answers
with 422, its token count and context limits, and JSON written one way.
"""

from evalpipe.contract.jsonio import canonical, dumps
from evalpipe.contract.resources import (
    REQUESTS_PER_MINUTE,
    TOKENS_PER_SECOND,
    ChoiceQuestion,
    EvaluationResponse,
    ModelEntry,
    ModelList,
    NoulQuestion,
    ScoreQuestion,
    check_response,
    path_of,
    question_dicts,
    question_warnings,
    validate_questions,
    validate_request,
)
from evalpipe.contract.tokens import (
    CountRatio,
    TextCounter,
    ValueCounter,
    context_violation,
    count_question,
    count_questions,
    count_text,
    count_value,
)

__all__ = [
    "REQUESTS_PER_MINUTE",
    "TOKENS_PER_SECOND",
    "ChoiceQuestion",
    "CountRatio",
    "EvaluationResponse",
    "ModelEntry",
    "ModelList",
    "NoulQuestion",
    "ScoreQuestion",
    "TextCounter",
    "ValueCounter",
    "canonical",
    "check_response",
    "context_violation",
    "count_question",
    "count_questions",
    "count_text",
    "count_value",
    "dumps",
    "path_of",
    "question_dicts",
    "question_warnings",
    "validate_questions",
    "validate_request",
]
