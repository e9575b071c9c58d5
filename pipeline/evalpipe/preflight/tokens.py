"""How the service counts tokens, measured: `evalpipe plan --calibrate N`.

evalpipe counts tokens with its own tokenizer (`evalpipe.contract.tokens`); the service bills with
one of its own, which the job cannot see, and long words, numbers, code or other scripts can cost
several of its tokens per word. Before a big job, `plan --calibrate N` sends N real requests
(billed, and reported as such) with states of the corpus, and compares the `usage` the service bills
with evalpipe's count of the same requests. The ratio then plans the job as the service will count
it: rows split before the service refuses them, and a cost that is the bill.

A request the service refuses as too long is split as a run splits it
(`evalpipe.planning.split_refused`) and the smallest part is sent, down to a lone question; if that
is refused too, the row is counted as refused and left out of the ratio.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

from evalpipe.contract import validate_questions
from evalpipe.errors import ContextLengthError, EvalpipeError
from evalpipe.planning import UNKNOWN, PreparedJob, Price, Request, price_of, split_refused
from evalpipe.send import (
    INTERACTIVE_POLICY,
    CallResult,
    EvalClient,
    api_key,
    request_body,
    service_url,
)

IN_FLIGHT = 8  # calibration requests sent at once


@dataclass(frozen=True)
class TokenCalibration:
    """What N calibration requests measured."""

    requests: int  # answered, and billed
    refused_for_length: int
    estimated_tokens: int  # evalpipe's count of the answered requests
    billed_tokens: int  # the service's
    price: Price = UNKNOWN  # the config's, for what the calibration cost

    @property
    def ratio(self) -> float | None:
        """The service's count per token of evalpipe's; None when nothing was answered."""
        return self.billed_tokens / self.estimated_tokens if self.estimated_tokens else None

    def figures(self) -> dict[str, Any]:
        ratio = self.ratio
        return {
            "calibration_requests": self.requests,
            "calibration_refused_for_length": self.refused_for_length,
            "calibration_billed_tokens": self.billed_tokens,
            "calibration_cost_usd": self.price.cost(self.billed_tokens),
            "service_token_ratio": None if ratio is None else round(ratio, 4),
        }


def calibrate_tokens(prepared: PreparedJob, n: int) -> TokenCalibration:
    """Send up to `n` requests of the corpus's states to the service and measure its count."""
    service = prepared.config.service
    key = api_key(service)
    sample = list(prepared.sample(n))
    with service_url(service, prepared.config.limits, key) as url:
        return asyncio.run(_measure(url, key, prepared, sample))


async def _measure(
    url: str, key: str, prepared: PreparedJob, sample: list[tuple[Any, Request]]
) -> TokenCalibration:
    slots = asyncio.Semaphore(IN_FLIGHT)
    async with EvalClient(url, key, policy=INTERACTIVE_POLICY) as client:
        await client.probe(wait=prepared.config.service.connect_wait)
        done = await asyncio.gather(
            *(_one(client, slots, prepared, state, request) for state, request in sample)
        )
    answered = [(request, result) for request, result in done if result is not None]
    return TokenCalibration(
        requests=len(answered),
        refused_for_length=len(done) - len(answered),
        estimated_tokens=sum(request.tokens for request, _ in answered),
        billed_tokens=sum(_billed(result) for _, result in answered),
        price=price_of(prepared.config),
    )


async def _one(
    client: EvalClient, slots: asyncio.Semaphore, prepared: PreparedJob, state: Any, r: Request
) -> tuple[Request, CallResult | None]:
    """A request, or after a refusal for length the smallest of its parts, and so on (the
    module docstring); (the request answered, its result), or (r, None) if even a lone
    question was refused for length."""
    request = r
    while True:
        result = await _send(client, slots, prepared, state, request)
        if not isinstance(result.error, ContextLengthError):
            if result.error is not None:
                raise EvalpipeError(f"calibration request failed: {result.error.message}")
            return request, result
        parts = split_refused(request, prepared.planner.question_tokens)
        if len(parts) == 1:
            return r, None
        request = min(parts, key=lambda part: part.tokens)


async def _send(
    client: EvalClient, slots: asyncio.Semaphore, prepared: PreparedJob, state: Any, r: Request
) -> CallResult:
    payload = request_body(state, prepared.config.model, prepared.questions, r.keys)
    async with slots:
        return await client.evaluate(payload, validate_questions(payload["questions"]), r.tokens)


def _billed(result: CallResult) -> int:
    assert result.response is not None  # answered: it has its checked response
    return result.response.usage.input_tokens
