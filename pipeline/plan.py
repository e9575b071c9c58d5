"""Planning a row before it is sent: its tokens, the context limits, and how to split it.

A row whose state plus all questions exceeds the context limit is split into several requests
(questions grouped so each request fits); a row that cannot fit even one question is a row error
`context_limit`, never sent. This module also prices a job and gives the shortest time the
account's limits allow, for `evalpipe plan` and the summary.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pipeline.errors import CONTEXT_LIMIT
from pipeline.tokens import CONTEXT_LIMIT as TOTAL_LIMIT
from pipeline.tokens import QUESTION_CONTEXT_LIMIT, count_questions, count_value

PRICE_PER_MILLION_INPUT_TOKENS = 0.042  # dollars, model-1.13.0 (spec section 1)


@dataclass(frozen=True)
class Request:
    """One evaluate call of a row: which questions it asks and its estimated input tokens."""

    keys: tuple[str, ...]
    tokens: int


@dataclass(frozen=True)
class RowPlan:
    """The requests a row needs, or why it is never sent."""

    requests: tuple[Request, ...]
    error_type: str | None = None
    error: str | None = None


class Planner:
    """Plans rows against one fixed set of questions (their token counts are computed once)."""

    def __init__(self, questions: Mapping[str, Mapping[str, Any]]) -> None:
        self.question_tokens = count_questions(questions)
        self._by_size = sorted(self.question_tokens.items(), key=lambda kv: (-kv[1], kv[0]))
        self._all = tuple(questions)
        self._all_tokens = sum(self.question_tokens.values())

    def plan(self, state: Any) -> RowPlan:
        return self.plan_tokens(count_value(state))

    def plan_tokens(self, state_tokens: int) -> RowPlan:
        longest_key, longest = self._by_size[0]
        if state_tokens + longest > QUESTION_CONTEXT_LIMIT:
            return RowPlan(
                (),
                CONTEXT_LIMIT,
                f"state is {state_tokens} tokens; with question {longest_key!r} "
                f"({longest} tokens) it exceeds the {QUESTION_CONTEXT_LIMIT}-token context limit",
            )
        if state_tokens + self._all_tokens <= TOTAL_LIMIT:
            return RowPlan((Request(self._all, state_tokens + self._all_tokens),))
        return RowPlan(tuple(self._split(state_tokens)))

    def _split(self, state_tokens: int) -> list[Request]:
        """First-fit decreasing: few requests, each within the total limit (state included)."""
        room = TOTAL_LIMIT - state_tokens
        groups: list[list[str]] = []
        sizes: list[int] = []
        for key, tokens in self._by_size:
            for i, size in enumerate(sizes):
                if size + tokens <= room:
                    groups[i].append(key)
                    sizes[i] += tokens
                    break
            else:
                groups.append([key])
                sizes.append(tokens)
        order = {key: i for i, key in enumerate(self._all)}
        return [
            Request(tuple(sorted(group, key=order.__getitem__)), state_tokens + size)
            for group, size in zip(groups, sizes, strict=True)
        ]


def cost(input_tokens: int) -> float:
    """Dollars for this many input tokens."""
    return input_tokens * PRICE_PER_MILLION_INPUT_TOKENS / 1_000_000


def minimum_seconds(requests: int, tokens: int, rpm: float, tps: float) -> float:
    """The floor the limits set: requests / (RPM/60) or tokens / TPS, whichever is larger."""
    return max(requests / (rpm / 60.0), tokens / tps)
