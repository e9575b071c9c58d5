"""The pacing primitive: aiolimiter buckets (requests, tokens) that grant in order.

Why a module of its own: the Budget decides *what rate* to pace at (it measures the service
after a 429 and probes back up), and a `LocalPacer` paces requests sent before the run's Budget
exists (evalpipe.limits.local); this module only makes grants keep to a rate, and then to the
account's schedule on this machine (`take_on`, evalpipe.limits.hostpace). The service
enforces each limit as a token bucket of one second's capacity; ours hold half a second
(`BURST_SECONDS`), so the service's bucket stays nearly full and absorbs the jitter between a
grant and the request's arrival.

Each limit is an `aiolimiter.AsyncLimiter` (the limiter the design card names), used through its
public API only:

- AsyncLimiter wakes the smallest waiting amount first, so leases of different sizes would
  overtake each other: a FIFO lock lets one lease at a time wait in the limiters.
- A limiter's rate cannot change, so a new rate is a new limiter, made by the next lease (in the
  event loop it belongs to) and started full: the old one was full too whenever demand exceeds
  the pace, and after a cut a burst is the last thing the service wants. The first limiters
  start full too: alone, the opening half second's burst would gain nothing worth having, and
  on a key that others already use to its limit it would be refused whole.
- An amount above a limiter's capacity (a request at under two requests a second, whose
  bucket holds less than one) is acquired in capacity-sized pieces.
- A cut (`hold`) takes back the grant still waiting: it waits out the pause and acquires again
  from the new limiter.
"""

from __future__ import annotations

import asyncio
import inspect
import math
import random
from collections.abc import Awaitable, Callable
from typing import Protocol

from aiolimiter import AsyncLimiter

BURST_SECONDS = 0.5  # our buckets' capacity, in seconds of rate
SPREAD_SECONDS = 0.05  # a grant goes at a random moment of its slot, at most this long
LOW_RATE = 1.5  # requests/s (90 RPM) below which the service's bucket holds about one request
LOW_RATE_GAP = 0.05  # ... so requests keep this many seconds more apart than the rate says


class Schedule(Protocol):
    """The account's schedule that grants are reserved on after the pacing's: the host's file
    (evalpipe.limits.hostpace, a plain call) or the shared tier's (evalpipe.tier, awaited)."""

    def set_limits(self, rps: float, tps: float) -> None: ...

    def reserve(self, requests: int, tokens: int) -> float | Awaitable[float]: ...

    def close(self) -> None: ...


def spaced(rps: float) -> float:
    """The rate of the request bucket: below `LOW_RATE` requests keep `LOW_RATE_GAP` more
    apart than `rps` says, because there the service's bucket holds about one request, so a
    request that arrives a few milliseconds early is refused, and a request's journey (Ray,
    an event loop, the network) varies by more than that."""
    return rps if rps >= LOW_RATE else 1 / (1 / rps + LOW_RATE_GAP)


class Pacing:
    """Requests and tokens paced at `rps` and `tps`; grants in the order asked."""

    def __init__(
        self, rps: float, tps: float, clock: Callable[[], float], rng: random.Random
    ) -> None:
        self._clock = clock
        self._rng = rng
        self._rates = (rps, tps)
        self._limiters: tuple[AsyncLimiter, AsyncLimiter] | None = None
        self._lock = asyncio.Lock()  # one lease in the limiters at a time, the others queue
        self._hold_until = -math.inf
        self._epoch = 0  # bumped by every cut: a grant waiting through one is taken again

    def capacities(self) -> tuple[float, float]:
        """What each bucket holds: requests, tokens."""
        return self._rates[0] * BURST_SECONDS, self._rates[1] * BURST_SECONDS

    async def take(self, requests: float, tokens: float) -> float:
        """Wait until `requests` and `tokens` fit, take them; the time of the grant. It is
        handed out at a random moment of its own slot (the time it stands for at the pace, at
        most SPREAD_SECONDS): paced sends arrive at the service's bucket just as regularly as
        it refills, and when another sender empties it, whichever sends in step with the
        refill would win every token and the other would see every 429."""
        async with self._lock:
            granted = await self._take(requests, tokens)
        await asyncio.sleep(self.spread(requests))
        return granted

    async def take_on(self, host: Schedule | None, requests: int, tokens: int) -> float | None:
        """`take`, then a slot on the account's schedule (`host`: this machine's, or the shared
        tier's), where other senders on the account may have taken the next ones: the time the
        grant goes; None when a cut (`hold`) came while it waited for its slot (the caller
        takes it again, at the cut's pause and pace)."""
        go = await self.take(requests, tokens)
        if host is None:
            return go
        epoch = self._epoch
        reserved = host.reserve(requests, tokens)
        delay = await reserved if inspect.isawaitable(reserved) else reserved
        if delay <= 0:
            return go
        # At a random moment of its slot, as the pacing's own grants go.
        await asyncio.sleep(delay + self.spread(requests))
        return self._clock() if self._epoch == epoch else None

    def spread(self, requests: float) -> float:
        """A random moment of the slot `requests` stand for at the pace (at most
        SPREAD_SECONDS): the seconds to wait before they go."""
        slot = min(SPREAD_SECONDS, requests / self._rates[0]) if requests else 0.0
        return self._rng.uniform(0.0, slot)

    async def _take(self, requests: float, tokens: float) -> float:
        while True:
            epoch = self._epoch
            wait = self._hold_until - self._clock()
            if wait > 0:
                await asyncio.sleep(wait)
                continue
            request_limiter, token_limiter = await self._current()
            await _acquire(request_limiter, requests)
            await _acquire(token_limiter, tokens)
            if epoch == self._epoch:  # no cut while we waited: the grant stands
                return self._clock()

    async def _current(self) -> tuple[AsyncLimiter, AsyncLimiter]:
        if self._limiters is None:
            made = tuple(AsyncLimiter(r * BURST_SECONDS, BURST_SECONDS) for r in self._rates)
            for limiter in made:
                await limiter.acquire(limiter.max_rate)  # full: no burst
            self._limiters = (made[0], made[1])
        return self._limiters

    def rates(self) -> tuple[float, float]:
        """The rates grants keep to now: requests/s, tokens/s."""
        return self._rates

    def set_rates(self, rps: float, tps: float) -> None:
        """Pace at these rates from the next grant on."""
        if (rps, tps) != self._rates:
            self._rates = (rps, tps)
            self._limiters = None

    def hold(self, until: float) -> None:
        """A cut: no grant before `until`, none in a burst after it, and the grant waiting now
        is taken again at the new rates."""
        self._hold_until = until
        self._limiters = None
        self._epoch += 1


async def _acquire(limiter: AsyncLimiter, amount: float) -> None:
    while amount > 1e-9:  # in pieces the limiter can hold
        piece = min(amount, limiter.max_rate)
        await limiter.acquire(piece)
        amount -= piece
