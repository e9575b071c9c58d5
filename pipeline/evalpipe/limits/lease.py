"""The worker's side of the Budget: leases spent locally, and what it reports back.

Why a module of its own: this runs in every Worker actor, many thousand times a second at high
rates, while the Budget (evalpipe.limits.budget) is one actor elsewhere. A `LeasePacer` asks the
Budget for a slice of the limits (a `Grant`: some requests and tokens, about 20 ms of the rate)
and spends it on the worker's coroutines without another call; with the next lease it sends a
`Report` of what it saw (answers, billed tokens), and a 429 is reported at once. The client
(evalpipe.send.client) sees it as its `Pacer`.
"""

from __future__ import annotations

import asyncio
import math
from dataclasses import dataclass
from typing import Any

from evalpipe.errors import AuthError


@dataclass(frozen=True)
class Grant:
    """A slice of the budget: requests and tokens a worker may spend, plus the current state."""

    requests: int
    tokens: int
    token_factor: float  # multiply our token estimates by this (calibrated from usage)
    lease_requests: int  # how many requests to ask for next time
    token_capacity: int  # the most tokens one request can be granted
    aborted: str | None = None


@dataclass
class Report:
    """What a worker saw since its last lease; plain data, sent with the next lease."""

    accepted: int = 0
    rate_limited: int = 0
    estimated_tokens: int = 0
    actual_tokens: int = 0

    def take(self) -> Report:
        out = Report(self.accepted, self.rate_limited, self.estimated_tokens, self.actual_tokens)
        self.accepted = self.rate_limited = self.estimated_tokens = self.actual_tokens = 0
        return out


class LeasePacer:
    """A worker's view of the Budget: spends leased slices locally, leases more when empty.

    `budget` is a Ray actor handle of Budget (or, in tests, anything whose `lease` and
    `report` return awaitables). Implements the client's Pacer protocol.
    """

    def __init__(self, budget: Any) -> None:
        self._budget = budget
        self._lock = asyncio.Lock()  # one lease in flight; waiters queue in order
        self._requests = 0
        self._tokens = 0
        self._factor = 1.0
        self._lease = 1
        self._capacity = 2**62  # learned from the first grant
        self._report = Report()

    async def acquire(self, tokens: int) -> None:
        need = min(math.ceil(tokens * self._factor), self._capacity)
        if self._requests >= 1 and self._tokens >= need and not self._lock.locked():
            self._requests -= 1  # the common case at high rates: the lease still has room
            self._tokens -= need
            return
        async with self._lock:
            while True:
                need = min(math.ceil(tokens * self._factor), self._capacity)
                if self._requests >= 1 and self._tokens >= need:
                    break
                ask_req = 0 if self._requests >= 1 else self._lease
                ask_tok = max(0, need - self._tokens) + need * max(0, ask_req - 1)
                grant = await self._call("lease", ask_req, ask_tok, self._report.take())
                if grant.aborted:
                    raise AuthError(grant.aborted)
                self._requests += grant.requests
                self._tokens += grant.tokens
                self._factor, self._lease = grant.token_factor, grant.lease_requests
                self._capacity = grant.token_capacity
            self._requests -= 1
            self._tokens -= need

    def on_success(self, estimated_tokens: int, input_tokens: int) -> None:
        self._report.accepted += 1
        self._report.estimated_tokens += estimated_tokens
        self._report.actual_tokens += input_tokens

    def on_rate_limited(self) -> None:
        self._report.rate_limited += 1
        report = self._report.take()
        self._fire("report", report)

    async def _call(self, method: str, *args: Any) -> Any:
        return await getattr(self._budget, method).remote(*args)

    def _fire(self, method: str, *args: Any) -> None:
        getattr(self._budget, method).remote(*args)
