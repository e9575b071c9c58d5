"""The worker's side of the Budget: leases spent locally, and what it reports back.

Why a module of its own: this runs in every Worker actor, many thousand times a second at high
rates, while the Budget (evalpipe.limits.budget) is one actor elsewhere. A `LeasePacer` asks the
Budget for a slice of the limits (a `Grant`: some requests and tokens, about 20 ms of the rate)
and spends it on the worker's coroutines without another call; with the next lease it sends a
`Report` of what it saw (answers, billed tokens), and a 429 is reported at once. The client
(evalpipe.send.client) sees it as its `Pacer`.

The Budget is an actor elsewhere, and it can die (an operator's `ray.kill`, its process gone).
A lease that finds it dead does not fail the request: the pacer holds its requests back and
asks again every `RETRY_SECONDS`, on the replacement the driver hands in with `rebind` as soon
as it has made one (evalpipe.send.fleet), so nothing goes out unpaced meanwhile. Only a Budget
neither back nor replaced within `LOST_SECONDS` ends the job (`BudgetLost`).
"""

from __future__ import annotations

import asyncio
import contextlib
import math
from dataclasses import dataclass
from typing import Any

from evalpipe.errors import AuthError, BudgetLost

RETRY_SECONDS = 0.5  # a lease that found the Budget dead is asked again this often ...
LOST_SECONDS = 120.0  # ... until it is back or replaced, or this long has passed


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
        self._rebound: asyncio.Event | None = None  # made on the loop that waits on it

    def rebind(self, budget: Any) -> None:
        """Lease from `budget` from now on: the replacement of one that died."""
        self._budget = budget
        if self._rebound is not None:
            self._rebound.set()

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
                grant = await self._granted(ask_req, ask_tok)
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

    async def _granted(self, requests: int, tokens: int) -> Grant:
        """A grant from the Budget, waiting out its death until it is back or replaced."""
        report = self._report.take()
        lost_at: float | None = None
        while True:
            handle = self._budget
            try:
                grant: Grant = await self._call("lease", requests, tokens, report)
                return grant
            except Exception as exc:
                if not _actor_gone(exc):
                    raise
                loop = asyncio.get_running_loop()
                lost_at = loop.time() if lost_at is None else lost_at
                if loop.time() - lost_at > LOST_SECONDS:
                    raise BudgetLost(
                        f"the account's budget actor died and was not replaced within "
                        f"{LOST_SECONDS:g}s ({type(exc).__name__}); run the same command "
                        "again to resume"
                    ) from None
                report = Report()  # what it saw went with the dead Budget
                await self._replaced(handle)

    async def _replaced(self, dead: Any) -> None:
        """Wait until `dead` is replaced (`rebind`), at most RETRY_SECONDS: a Budget that was
        only unreachable comes back."""
        if self._budget is not dead:
            return
        if self._rebound is None:
            self._rebound = asyncio.Event()
        self._rebound.clear()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._rebound.wait(), RETRY_SECONDS)

    async def _call(self, method: str, *args: Any) -> Any:
        return await getattr(self._budget, method).remote(*args)

    def _fire(self, method: str, *args: Any) -> None:
        getattr(self._budget, method).remote(*args)


def _actor_gone(exc: BaseException) -> bool:
    """Whether `exc` says the Budget actor is dead or unreachable (not a bug of ours)."""
    try:
        from ray.exceptions import RayActorError
    except ImportError:  # pragma: no cover - Ray is a dependency; tests may use fakes
        return False
    return isinstance(exc, RayActorError)
