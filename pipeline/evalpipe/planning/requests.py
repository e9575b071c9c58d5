"""A row's requests: which questions go together, decided by one rule wherever a split happens.

A state goes to the service with every question in one request when the state plus the
questions fit the context limits; otherwise its questions are grouped first-fit decreasing
into as few requests as fit (`first_fit`). The same function splits a request the service
refused as too long (`split_refused`: into two of about half its question tokens each), for the
workers and for `plan --calibrate` alike. Token counts are evalpipe's (`evalpipe.contract`),
made once per question by the `Planner` and carried by each `Request` (its state's tokens
too), so nothing downstream counts or subtracts them again.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from typing import Any

from evalpipe.contract import context_violation, count_questions, count_value
from evalpipe.errors import CONTEXT_LIMIT
from evalpipe.planning.counts import state_bytes

_PLANS_KEPT = 1 << 16  # plans of every question kept, by state size (a few MB at most)
# Calibrated planning: the service's count is our count times the measured ratio; plan with
# this margin on top (the ratio varies from row to row), once it is measurably above ours.
SERVICE_MARGIN = 1.05
SAME_COUNT = 1.02  # a ratio up to this is our own count, give or take: no calibration


Sizes = Mapping[str, int]  # question key -> its tokens


@dataclass(frozen=True)
class Request:
    """One evaluate call of a row: which questions it asks, and its input tokens by evalpipe's
    count (`tokens`: the state's plus the questions'; `state_tokens`: the state's alone)."""

    keys: tuple[str, ...]
    tokens: int
    state_tokens: int

    @classmethod
    def of(cls, keys: Collection[str], state_tokens: int, sizes: Sizes) -> Request:
        """The request asking `keys` (in the order of `sizes`) of a state of `state_tokens`."""
        asked = tuple(k for k in sizes if k in keys)
        return cls(asked, state_tokens + sum(sizes[k] for k in asked), state_tokens)


def first_fit(sizes: Sizes, fits: Callable[[Sizes], bool]) -> list[list[str]]:
    """Questions grouped first-fit decreasing: the largest first, each into the first group it
    `fits` with, else into a new one (a question alone always makes a group). Few groups, each
    one that fits: the one rule by which evalpipe splits a row's questions into requests."""
    groups: list[dict[str, int]] = []
    for key, tokens in sorted(sizes.items(), key=lambda kv: (-kv[1], kv[0])):
        for group in groups:
            if fits({**group, key: tokens}):
                group[key] = tokens
                break
        else:
            groups.append({key: tokens})
    return [list(group) for group in groups]


def split_refused(request: Request, sizes: Sizes) -> list[Request]:
    """What to send instead of `request` after the service refused it as too long: its
    questions in two requests of about half its question tokens each, by the same `first_fit`
    (a group may hold half the questions, and half the tokens plus half the largest question:
    with that room first-fit decreasing always makes exactly two groups). A lone question
    cannot be split: `[request]`."""
    if len(request.keys) < 2:
        return [request]
    asked = {k: sizes[k] for k in request.keys}
    most_tokens = (sum(asked.values()) + max(asked.values())) / 2
    most_keys = math.ceil(len(asked) / 2)

    def fits(group: Sizes) -> bool:
        return len(group) <= most_keys and sum(group.values()) <= most_tokens

    return [Request.of(group, request.state_tokens, asked) for group in first_fit(asked, fits)]


@dataclass(frozen=True)
class RowPlan:
    """The requests a row needs, or why it is never sent."""

    requests: tuple[Request, ...]
    error_type: str | None = None
    error: str | None = None


class Planner:
    """Plans rows against one fixed set of questions (their token counts are computed once).

    Token counts are evalpipe's (`evalpipe.contract`); the service counts with a tokenizer of
    its own. `calibrate(ratio)` gives the ratio of the service's count to ours (measured from the
    `usage` it bills): the context limits are then checked against our count times the ratio
    and a margin, so rows are split before the service refuses them. Requests keep their
    tokens in our count (the Budget calibrates the pacing by the account's billed usage).
    """

    def __init__(self, questions: Mapping[str, Mapping[str, Any]]) -> None:
        self.question_tokens = count_questions(questions)
        self._longest = min(self.question_tokens.items(), key=lambda kv: (-kv[1], kv[0]))
        self._all = tuple(questions)
        self._by_tokens: dict[int, RowPlan] = {}  # state tokens -> the plan of every question
        self.scale = 1.0  # the service's count per token of ours, with the margin

    def calibrate(self, ratio: float) -> None:
        """Plan with the service's count: `ratio` of its count to ours (1.0: ours)."""
        scale = ratio * SERVICE_MARGIN if ratio > SAME_COUNT else 1.0
        if abs(scale - self.scale) > 0.01 * self.scale:
            self.scale = scale
            self._by_tokens.clear()

    def _violation(self, state_tokens: int, sizes: Mapping[str, int]) -> str | None:
        """The context rule against the service's count as calibrated (ours until then)."""
        if self.scale == 1.0:
            return context_violation(state_tokens, sizes)
        scaled = {k: math.ceil(t * self.scale) for k, t in sizes.items()}
        found = context_violation(math.ceil(state_tokens * self.scale), scaled)
        if found is None:
            return None
        return f"{found}, by the service's count as measured ({self.scale:.2f} x evalpipe's)"

    @property
    def keys(self) -> tuple[str, ...]:
        return self._all

    def plan(self, state: Any) -> RowPlan:
        return self.oversized(state) or self.plan_tokens(count_value(state))

    @staticmethod
    def oversized(state: Any) -> RowPlan | None:
        """The plan of a state too large in bytes for any request (the context rule's byte
        bound: never sent, however few tokens it counts), else None. Asked before counting."""
        refused = context_violation(0, {}, state_bytes(state))
        return None if refused is None else RowPlan((), CONTEXT_LIMIT, refused)

    def plan_tokens(self, state_tokens: int, keys: Collection[str] | None = None) -> RowPlan:
        """The requests for a state of `state_tokens`, asking `keys` (default: every question).
        A row whose state cannot fit its longest question is refused whatever `keys` holds:
        the answers of a row all come from one rule. The plan of every question depends on
        the state's size alone: it is made once per size."""
        if keys is None or len(keys) == len(self._all):
            plan = self._by_tokens.get(state_tokens)
            if plan is None:
                plan = self._plan(state_tokens, None)
                if len(self._by_tokens) < _PLANS_KEPT:
                    self._by_tokens[state_tokens] = plan
            return plan
        return self._plan(state_tokens, keys)

    def _plan(self, state_tokens: int, keys: Collection[str] | None) -> RowPlan:
        refused = self._violation(state_tokens, dict([self._longest]))
        if refused is not None:
            return RowPlan((), CONTEXT_LIMIT, refused)
        sizes = self.question_tokens
        if keys is not None and len(keys) != len(self._all):
            sizes = {k: t for k, t in sizes.items() if k in keys}

        def fits(group: Sizes) -> bool:
            return self._violation(state_tokens, group) is None

        groups = [list(sizes)] if fits(sizes) else first_fit(sizes, fits)
        return RowPlan(tuple(Request.of(g, state_tokens, sizes) for g in groups))
