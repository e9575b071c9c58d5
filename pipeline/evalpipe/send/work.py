"""What a worker is handed, what it sends, and what it hands back: `StateJob`, the request
body, and `JobResult`.

Why a module of its own: the worker (`evalpipe.send.actors`) and the packs
(`evalpipe.send.packs`) both make and read these, and the packing measurement and the token
calibration (`evalpipe.job`) send requests of their own. Kept here, below both, the worker
imports the packs and neither imports the other back; and the body of `POST /v1/evaluate` is
built in one place (`request_body`), whoever sends it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from evalpipe.planning import Request


@dataclass(frozen=True)
class StateJob:
    """One distinct state to evaluate: the requests its plan needs."""

    index: int
    state: Any
    requests: tuple[Request, ...]


@dataclass(frozen=True)
class JobResult:
    """What became of a StateJob: merged answers, or the error of the request that failed."""

    index: int
    answers: Mapping[str, Any] | None  # dicts; from the cache, as it gives them
    model: str | None
    input_tokens: int
    error_type: str | None
    error: str | None
    requests: int
    attempts: int
    retries: int
    rate_limited: int
    abandoned: bool = False  # never sent because the job was stopping: no row to write
    refused_for_length: int = 0  # requests the service refused as too long, split and resent
    estimated_tokens: int = 0  # our count of what the answered requests sent (`input_tokens`)
    failed_requests: int = 0  # requests that ended in an error (after their retries)
    error_cause: str | None = None  # a network error's known cause (NetworkError.cause)
    pack: int = 1  # rows that shared the request that answered it (`_pack`)
    questions_refused: int = 0  # the fewest questions of a pack refused as too many (0: none)
    questions_answered: int = 0  # the most questions of a pack's request answered


def request_body(
    state: Any,
    model: str,
    questions: Mapping[str, Any],
    keys: Iterable[str] | None = None,
) -> dict[str, Any]:
    """The body of an evaluate request: `state` asked `questions` of `model` (only those of
    `keys`, in that order, when given: one request of a row's plan)."""
    asked = dict(questions) if keys is None else {key: questions[key] for key in keys}
    return {"state": state, "model": model, "questions": asked}
