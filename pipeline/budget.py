"""The account's rate limits, held once for the whole job however many actors send.

Requests per minute and tokens per second are account-wide, so one `Budget` (a Ray actor)
owns the pacing and every worker leases slices of it through a local `LeasePacer`:

    worker coroutines ──acquire(tokens)──► LeasePacer ──lease(n, tokens)──► Budget (one per job)
                                               ▲                              │ aiolimiter buckets
                                               └──── granted slice ◄──────────┘ AIMD on 429

Pacing is at sub-second granularity on purpose. The service enforces its limits as token
buckets holding one second's capacity, so `AsyncLimiter(1200, 60)` (a minute's burst) earns a
storm of 429s; `AsyncLimiter(rpm / 60, 1)` matches the service. We go one step further and keep
our own bucket at half a second's capacity and the rate at `headroom` (99.5%) of the limit:
the service's bucket then always holds slack for the jitter between our send and its arrival.

On a 429 the whole job slows down: the Budget cuts the rate toward what the service has been
accepting, then probes back up to the configured limit a little every second, because the
service's limits change without notice. Token estimates are calibrated from `usage`.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from aiolimiter import AsyncLimiter

from pipeline.errors import AuthError

BURST_SECONDS = 0.5  # our bucket's capacity, in seconds of rate
LEASE_SECONDS = 0.02  # one lease covers this much of the current rate
DECREASE_COOLDOWN = 1.0  # at most one cut per this many seconds: one overshoot, one cut
INCREASE_PER_SECOND = 0.02  # share of the limit regained per quiet second
WINDOW_SECONDS = 2.0  # accepted-request window that tells what the service takes now
MIN_SHARE = 0.05  # never pace below this share of the limit


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


@dataclass
class _Rates:
    rps_limit: float
    tps_limit: float
    rps: float
    tps: float
    accepted: deque[tuple[float, int]] = field(default_factory=deque)
    last_cut: float = -math.inf
    last_tick: float = 0.0


class Budget:
    """The job's one pacing authority. Wrap with `ray.remote(num_cpus=0)` to share it."""

    def __init__(
        self,
        rpm: float,
        tps: float,
        headroom: float = 0.995,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        rps, tps = rpm / 60 * headroom, tps * headroom
        self._clock = clock
        self._rates = _Rates(rps, tps, rps, tps, last_tick=clock())
        self._limiters: tuple[AsyncLimiter, AsyncLimiter] | None = None
        self._rebuilt = False
        self._estimated = 0.0
        self._actual = 0.0
        self._aborted: str | None = None
        self._stats = {"leases": 0, "cuts": 0, "rate_limited": 0, "accepted": 0}

    # -- pacing ------------------------------------------------------------------------------

    async def _buckets(self) -> tuple[AsyncLimiter, AsyncLimiter]:
        # Made lazily: aiolimiter objects belong to the event loop that uses them.
        if self._limiters is None:
            r = self._rates
            req = max(1.0, r.rps * BURST_SECONDS)
            tok = max(1.0, r.tps * BURST_SECONDS)
            self._limiters = (AsyncLimiter(req, req / r.rps), AsyncLimiter(tok, tok / r.tps))
            if self._rebuilt:
                # A new limiter starts full; after a rate change that burst is the last thing
                # the service wants, so start it empty.
                for bucket in self._limiters:
                    await bucket.acquire(bucket.max_rate)
            self._rebuilt = True
        return self._limiters

    async def lease(self, requests: int, tokens: int, report: Report | None = None) -> Grant:
        """Wait until `requests` and `tokens` fit the limits, then grant them."""
        if report is not None:
            self._absorb(report)
        if self._aborted:
            return self._grant(0, 0)
        self._tick()
        req_bucket, tok_bucket = await self._buckets()
        requests = max(0, min(requests, int(req_bucket.max_rate)))
        tokens = max(0, min(tokens, int(tok_bucket.max_rate)))
        if requests:
            await req_bucket.acquire(requests)
        if tokens:
            await tok_bucket.acquire(tokens)
        self._stats["leases"] += 1
        return self._grant(requests, tokens)

    def _grant(self, requests: int, tokens: int) -> Grant:
        factor = self._actual / self._estimated if self._estimated > 0 else 1.0
        lease = max(1, int(self._rates.rps * LEASE_SECONDS))
        capacity = max(1, int(self._rates.tps * BURST_SECONDS))
        return Grant(requests, tokens, max(0.1, factor), lease, capacity, self._aborted)

    # -- feedback ----------------------------------------------------------------------------

    def report(self, report: Report) -> None:
        """Feedback outside a lease (a 429 should slow everyone down at once)."""
        self._absorb(report)

    def _absorb(self, report: Report) -> None:
        now = self._clock()
        self._stats["accepted"] += report.accepted
        self._stats["rate_limited"] += report.rate_limited
        if report.accepted:
            self._rates.accepted.append((now, report.accepted))
        # Calibration: an exponentially fading ratio of billed to estimated tokens.
        self._estimated = self._estimated * 0.98 + report.estimated_tokens
        self._actual = self._actual * 0.98 + report.actual_tokens
        if report.rate_limited:
            self._cut(now)

    def _accepted_rate(self, now: float) -> float:
        window = self._rates.accepted
        while window and window[0][0] < now - WINDOW_SECONDS:
            window.popleft()
        return sum(n for _, n in window) / WINDOW_SECONDS

    def _cut(self, now: float) -> None:
        r = self._rates
        if now - r.last_cut < DECREASE_COOLDOWN:
            return
        measured = self._accepted_rate(now)
        # Toward what the service has been taking, never more than a halving at once.
        target = measured * 0.97 if measured > 0 else r.rps * 0.7
        share = max(0.5, min(0.9, target / r.rps)) if r.rps else 0.5
        self._set(r.rps * share, r.tps * share)
        r.last_cut = now
        self._stats["cuts"] += 1

    def _tick(self) -> None:
        """Additive increase: after a quiet second, regain a little, up to the limits."""
        r = self._rates
        now = self._clock()
        elapsed = now - r.last_tick
        if elapsed < 1.0:
            return
        r.last_tick = now
        if now - r.last_cut < 1.0 or (r.rps >= r.rps_limit and r.tps >= r.tps_limit):
            return
        grow = INCREASE_PER_SECOND * elapsed
        self._set(r.rps + r.rps_limit * grow, r.tps + r.tps_limit * grow)

    def _set(self, rps: float, tps: float) -> None:
        r = self._rates
        r.rps = min(r.rps_limit, max(r.rps_limit * MIN_SHARE, rps))
        r.tps = min(r.tps_limit, max(r.tps_limit * MIN_SHARE, tps))
        self._limiters = None  # rebuilt at the new rate on the next lease

    # -- control -----------------------------------------------------------------------------

    def abort(self, reason: str) -> None:
        """Stop granting: every worker's next acquire fails (a refused key ends the job)."""
        self._aborted = reason

    def stats(self) -> dict[str, Any]:
        r = self._rates
        return {
            **self._stats,
            "rps": r.rps,
            "tps": r.tps,
            "token_factor": self._grant(0, 0).token_factor,
        }


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

    def on_rate_limited(self, delay: float | None) -> None:
        self._report.rate_limited += 1
        report = self._report.take()
        self._fire("report", report)

    async def _call(self, method: str, *args: Any) -> Any:
        return await getattr(self._budget, method).remote(*args)

    def _fire(self, method: str, *args: Any) -> None:
        getattr(self._budget, method).remote(*args)
