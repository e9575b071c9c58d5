"""How a pack of rows is sent: one request for several rows, its answers fanned back to each.

What goes together is decided by the planner (`evalpipe.planning.packing`); this module builds
the request of a `Pack` (the rows as fields of an object state, each question once per row,
pointed at the row's field) and turns its one answer back into a `JobResult` per row, as if each
row had been sent alone: its answers under its own question keys, its share of the billed
tokens (by our count of its part of the pack), and the pack's size (`pack`, the `_pack` column).

A pack is one request: the client retries it whole (429, 529, timeouts). A 422 that refuses it
for the number of its questions, or as over the context limit by the service's count, sends it
again as two halves (a half of one row goes alone), and each result says the fewest questions
refused and the most answered in the pack, from which the driver learns the service's cap.
Any other failure fails every row of the pack, as it would have failed each row alone.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from evalpipe.errors import ContextLengthError, TooManyQuestionsError
from evalpipe.planning import packed_question
from evalpipe.send.client import CallResult
from evalpipe.send.work import JobResult, StateJob, request_body


@dataclass(frozen=True)
class Pack:
    """Jobs (each one request of one row) sent as one request; `fields` name each job's
    field in the pack's state; `tokens` is the request's size by our count, `shares` each
    job's part of it."""

    jobs: tuple[StateJob, ...]  # each with exactly one request
    fields: tuple[str, ...]
    tokens: int
    shares: tuple[int, ...]

    @property
    def questions(self) -> int:
        return sum(len(job.requests[0].keys) for job in self.jobs)


def pack_payload(
    pack: Pack, model: str, questions: Mapping[str, Mapping[str, Any]]
) -> tuple[dict[str, Any], dict[str, tuple[int, str]]]:
    """The request body of `pack`, and what each of its question keys answers: (the job's
    position in the pack, the question's own key)."""
    state: dict[str, Any] = {}
    asked: dict[str, Any] = {}
    back: dict[str, tuple[int, str]] = {}
    for i, (job, field) in enumerate(zip(pack.jobs, pack.fields, strict=True)):
        state[field] = job.state
        for key in job.requests[0].keys:
            packed_key = f"{field}:{key}"
            asked[packed_key] = packed_question(questions[key], field)
            back[packed_key] = (i, key)
    return request_body(state, model, asked), back


def halves(pack: Pack) -> list[Pack]:
    """The pack in two, by rows (the first half the larger)."""
    cut = (len(pack.jobs) + 1) // 2
    parts = []
    for lo, hi in ((0, cut), (cut, len(pack.jobs))):
        shares = pack.shares[lo:hi]
        parts.append(Pack(pack.jobs[lo:hi], pack.fields[lo:hi], sum(shares), shares))
    return parts


def split_tokens(total: int, shares: tuple[int, ...]) -> list[int]:
    """`total` billed tokens shared in proportion to `shares` (whole tokens, adding up)."""
    weight = sum(shares) or 1
    parts = [total * s // weight for s in shares]
    for i in range(total - sum(parts)):
        parts[i % len(parts)] += 1
    return parts


Call = Callable[[dict[str, Any], dict[str, Any], int], Awaitable[CallResult | None]]
Alone = Callable[[StateJob], Awaitable[JobResult | None]]


async def send_pack(
    pack: Pack,
    model: str,
    questions: Mapping[str, Mapping[str, Any]],
    parsed: Mapping[str, Any],
    call: Call,
    alone: Alone,
    refused_at: list[int] | None = None,
) -> tuple[list[JobResult | None], int, int]:
    """Send `pack` (halving it on a refusal for its size); returns each job's JobResult in
    order (None for an abandoned pack's), the fewest questions refused (0: none) and the most
    answered in one request. `call(payload, parsed questions, tokens)` is the worker's call;
    `alone(job)` sends a lone job as the worker does. `refused_at` holds the fewest questions
    refused so far: a part that asks as many is split without being sent."""
    refused = refused_at if refused_at is not None else [0]
    return await _Sender(model, questions, parsed, call, alone, refused).send(pack)


@dataclass(frozen=True)
class _Sender:
    """One pack's sending, its halves' included: what they all send with, and the fewest
    questions refused so far (`refused_at[0]`, 0: none), which they share."""

    model: str
    questions: Mapping[str, Mapping[str, Any]]
    parsed: Mapping[str, Any]
    call: Call
    alone: Alone
    refused_at: list[int]

    async def send(self, pack: Pack) -> tuple[list[JobResult | None], int, int]:
        refused_at = self.refused_at
        if refused_at[0] and pack.questions >= refused_at[0] and len(pack.jobs) > 1:
            results, accepted = await self.halved(pack)
            return results, refused_at[0], accepted
        body, back = pack_payload(pack, self.model, self.questions)
        asked = {k: self.parsed[key] for k, (_, key) in back.items()}
        result = await self.call(body, asked, pack.tokens)
        if result is None:
            return [None] * len(pack.jobs), 0, 0
        error = result.error
        if not isinstance(error, (TooManyQuestionsError, ContextLengthError)):
            return list(_fanned(pack, back, result)), 0, (pack.questions if error is None else 0)
        if isinstance(error, TooManyQuestionsError):
            refused_at[0] = min(refused_at[0] or pack.questions, pack.questions)
        results, accepted = await self.halved(pack)
        # The refused request was paid for by the rate limit: the first row counts it.
        if results and results[0] is not None:
            first = results[0]
            results[0] = replace(
                first, requests=first.requests + 1, attempts=first.attempts + result.attempts
            )
        return results, refused_at[0], accepted

    async def halved(self, pack: Pack) -> tuple[list[JobResult | None], int]:
        """The pack's two halves sent in turn (a half of one row alone); their results and the
        most questions answered in one request."""
        results: list[JobResult | None] = []
        accepted = 0
        for part in halves(pack):
            if len(part.jobs) == 1:
                done = await self.alone(part.jobs[0])
                results.append(done)
                if done is not None and done.error_type is None:
                    accepted = max(accepted, len(part.jobs[0].requests[0].keys))
                continue
            more, _, most = await self.send(part)
            results += more
            accepted = max(accepted, most)
        return results, accepted


def _fanned(pack: Pack, back: Mapping[str, tuple[int, str]], result: CallResult) -> list[JobResult]:
    """The pack's one answer as a JobResult per job (the request counted on the first)."""
    n = len(pack.jobs)
    retries = result.attempts - 1
    response = result.response
    counts = [(1, result.attempts, retries, result.rate_limited)] + [(0, 0, 0, 0)] * (n - 1)
    error = result.error
    if error is not None or response is None:
        assert error is not None  # a call without an error has its checked response
        return [
            JobResult(job.index, None, None, 0, error.error_type, error.message, *counts[i], pack=n)
            for i, job in enumerate(pack.jobs)
        ]
    answers: list[dict[str, Any]] = [{} for _ in range(n)]
    for packed_key, answer in response.answers.items():
        i, key = back[packed_key]
        answers[i][key] = answer.model_dump()
    billed = split_tokens(response.usage.input_tokens, pack.shares)
    return [
        JobResult(
            job.index,
            answers[i],
            response.model,
            billed[i],
            None,
            None,
            *counts[i],
            estimated_tokens=pack.shares[i],
            pack=n,
        )
        for i, job in enumerate(pack.jobs)
    ]
