"""Token counting and the service's context limits, shared by the service and the planner.

The embedded reference service bills `usage.input_tokens` as the state's tokens plus every
question's; the planner estimates a row's tokens with the same functions before sending, so
against the embedded service the estimate is exact, and against the real service it is
calibrated from `usage`.
A token is a run of word characters or one punctuation character (`count_text`); the walkers
take another text counter for a service that counts otherwise (the embedded service's
rehearsal rules, `evalpipe.service.counting`). Question keys are never counted: the service's
contract says they do not reach the model.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

TextCounter = Callable[[str], int]
ValueCounter = Callable[[Any], int]  # tokens of one JSON value (an instructions, a rubric)

CONTEXT_LIMIT = 64_000  # state plus all questions
QUESTION_CONTEXT_LIMIT = 32_000  # state plus the single longest question

# A state's bytes bound its tokens from below: no tokenizer's tokens average more than this many
# bytes of text over a whole state (a BPE token is a few bytes; the longest merges of common
# vocabularies are tens). A state larger than the longest context it could be asked in, times
# this, cannot fit, however few tokens a count by words makes of it (a 100 MB string without a
# space is one word): `context_violation`'s first rule.
MAX_TOKEN_BYTES = 32
MAX_STATE_BYTES = QUESTION_CONTEXT_LIMIT * MAX_TOKEN_BYTES

_TOKEN = re.compile(r"\w+|[^\w\s]")


def count_text(text: str) -> int:
    """Tokens in one string."""
    return len(_TOKEN.findall(text))


def count_value(value: Any, text: TextCounter = count_text) -> int:
    """Tokens in a JSON value: strings by words, objects by keys and values, scalars as text."""
    if isinstance(value, str):
        return text(value)
    if isinstance(value, Mapping):
        return sum(text(str(k)) + count_value(v, text) for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return sum(count_value(v, text) for v in value)
    if value is None or isinstance(value, bool):
        return 1
    return text(str(value))


def count_question(
    question: Mapping[str, Any], text: TextCounter = count_text, value: ValueCounter | None = None
) -> int:
    """Tokens of one question: its instructions and its criteria (options and levels).
    `value` counts one instructions, rubric or level (default: `count_value` by `text`)."""
    one = value or (lambda v: count_value(v, text))
    total = one(question.get("instructions"))
    criteria = question.get("criteria")
    if isinstance(criteria, Mapping):
        for option, rubric in criteria.items():
            if rubric is not None:
                total += one(rubric)
            if question.get("type") == "choice":
                total += text(str(option))
    elif isinstance(criteria, list):
        total += sum(one(level) for level in criteria)
    return total


def count_questions(questions: Mapping[str, Mapping[str, Any]]) -> dict[str, int]:
    """Tokens per question key."""
    return {key: count_question(q) for key, q in questions.items()}


def context_violation(
    state_tokens: int, question_tokens: Mapping[str, int], state_bytes: int = 0
) -> str | None:
    """The context rule of the service (its published limits), stated once: why a request of these
    sizes is over a context limit, or None if it fits.

    A state of more than MAX_STATE_BYTES bytes (`state_bytes`: the UTF-8 bytes of its text) is
    over every limit whatever its count of tokens. Then the per-question limit: a state that is
    over it with its longest question cannot be asked at all, however its questions are split,
    while a request that is over the total limit only may be split into requests that fit
    (`evalpipe.planning`).
    """
    if state_bytes > MAX_STATE_BYTES:
        return (
            f"context limit: the state is {state_bytes:,} bytes; none over {MAX_STATE_BYTES:,} "
            f"fits the context ({QUESTION_CONTEXT_LIMIT:,} tokens of at most {MAX_TOKEN_BYTES} "
            "bytes each)"
        )
    if question_tokens:
        longest_key = max(question_tokens, key=question_tokens.__getitem__)
        longest = question_tokens[longest_key]
        if state_tokens + longest > QUESTION_CONTEXT_LIMIT:
            return (
                f"context limit: state plus the longest question ({longest_key!r}) is "
                f"{state_tokens + longest} tokens (at most {QUESTION_CONTEXT_LIMIT})"
            )
    total = state_tokens + sum(question_tokens.values())
    if total > CONTEXT_LIMIT:
        return (
            f"context limit: state plus all questions is {total} tokens (at most {CONTEXT_LIMIT})"
        )
    return None


class CountRatio:
    """The service's token count per token of ours, measured from what it bills: a fading
    ratio of billed to estimated tokens (recent answers weigh most; 1.0 until the first)."""

    FADE = 0.98  # each answer's weight against the ones before it

    def __init__(self) -> None:
        self._estimated = 0.0
        self._billed = 0.0
        self.samples = 0  # answers measured

    def add(self, estimated: int, billed: int) -> None:
        self._estimated = self._estimated * self.FADE + estimated
        self._billed = self._billed * self.FADE + billed
        self.samples += 1

    @property
    def ratio(self) -> float:
        return self._billed / self._estimated if self._estimated > 0 else 1.0
