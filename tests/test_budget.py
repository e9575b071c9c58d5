"""The shared budget: pacing that a one-second token bucket never refuses, AIMD on 429, token
calibration and abort. Time is a virtual clock (the event loop jumps to its next timer), never
real sleeps; the Ray handle is stood in for by an object whose methods return awaitables, the
one part here that is not the real thing (the job tests run the real Budget actor)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from pipeline.budget import Budget, LeasePacer, Report
from pipeline.errors import AuthError


class VirtualClockLoop(asyncio.SelectorEventLoop):
    """An event loop whose clock jumps to the next timer whenever nothing is ready."""

    def __init__(self) -> None:
        super().__init__()
        self._now = 0.0

    def time(self) -> float:
        return self._now

    def _run_once(self) -> None:
        live = [h._when for h in self._scheduled if not h._cancelled]
        if not self._ready and live:
            # A microsecond past the timer, as a real clock would be: a limiter that wakes
            # exactly on time can find its level a hair short and sleep zero seconds forever.
            self._now = max(self._now, min(live) + 1e-6)
        super()._run_once()


def run_virtual(factory: Callable[[asyncio.AbstractEventLoop], Awaitable[Any]]) -> Any:
    loop = VirtualClockLoop()
    try:
        return loop.run_until_complete(factory(loop))
    finally:
        loop.close()


class Method:
    def __init__(self, func: Callable[..., Any]) -> None:
        self._func = func

    def remote(self, *args: Any) -> Any:
        result = self._func(*args)
        if asyncio.iscoroutine(result):
            return asyncio.ensure_future(result)
        future = asyncio.get_running_loop().create_future()
        future.set_result(result)
        return future


class Handle:
    """Stands in for a Ray actor handle of Budget: `handle.lease.remote(...)` is awaitable."""

    def __init__(self, budget: Budget) -> None:
        self.lease = Method(budget.lease)
        self.report = Method(budget.report)
        self.abort = Method(budget.abort)


class ServiceBucket:
    """The service's view: a token bucket of one second's capacity, refilled continuously."""

    def __init__(self, per_second: float) -> None:
        self.capacity = self.level = per_second
        self.rate = per_second
        self.last = 0.0
        self.refused = 0

    def take(self, now: float, amount: float = 1.0) -> None:
        self.level = min(self.capacity, self.level + (now - self.last) * self.rate)
        self.last = now
        if self.level + 1e-9 < amount:
            self.refused += 1
        else:
            self.level -= amount


async def drive(
    loop: asyncio.AbstractEventLoop,
    budget: Budget,
    actors: int,
    per_actor: int,
    tokens: int,
    seconds: float,
    on_grant: Callable[[float], None],
) -> int:
    handle = Handle(budget)
    granted = 0

    async def sender(pacer: LeasePacer) -> None:
        nonlocal granted
        while loop.time() < seconds:
            await pacer.acquire(tokens)
            if loop.time() < seconds:
                granted += 1
                on_grant(loop.time())

    pacers = [LeasePacer(handle) for _ in range(actors)]
    await asyncio.gather(*(sender(p) for p in pacers for _ in range(per_actor)))
    return granted


@pytest.mark.parametrize("actors", [1, 3])
def test_request_pacing_never_overdraws_a_one_second_bucket(actors: int) -> None:
    service = ServiceBucket(1200 / 60)

    async def scenario(loop: asyncio.AbstractEventLoop) -> int:
        budget = Budget(rpm=1200, tps=1e9, clock=loop.time)
        return await drive(loop, budget, actors, 40, 10, 60.0, service.take)

    granted = run_virtual(scenario)
    assert service.refused == 0
    rate = granted / 60.0
    assert 0.99 * 20 <= rate <= 20 * 0.995 + 10 / 60  # headroom, plus the opening burst


def test_token_pacing_never_overdraws_and_binds_before_requests() -> None:
    service = ServiceBucket(10_000)

    async def scenario(loop: asyncio.AbstractEventLoop) -> int:
        budget = Budget(rpm=1200, tps=10_000, clock=loop.time)
        return await drive(loop, budget, 2, 20, 2_000, 60.0, lambda now: service.take(now, 2_000))

    granted = run_virtual(scenario)
    assert service.refused == 0
    assert granted * 2_000 / 60.0 >= 0.97 * 10_000


def test_a_429_slows_the_job_then_it_probes_back_up_to_the_limit() -> None:
    now = [0.0]
    budget = Budget(rpm=1200, tps=1e6, headroom=1.0, clock=lambda: now[0])
    for second in range(10):  # the service took 10 requests/s for a while
        now[0] = second * 0.2
        budget.report(Report(accepted=2))
    now[0] = 2.0
    budget.report(Report(rate_limited=3))
    cut = budget.stats()["rps"]
    assert 10 <= cut <= 20 * 0.9
    budget.report(Report(rate_limited=5))  # the same overshoot: no second cut at once
    assert budget.stats()["rps"] == cut
    rates = []
    for second in range(3, 120):
        now[0] = float(second)
        budget._tick()
        rates.append(budget.stats()["rps"])
    assert rates == sorted(rates)
    assert rates[-1] == 20.0
    assert max(rates) <= 20.0


def test_cuts_never_go_below_the_floor() -> None:
    now = [0.0]
    budget = Budget(rpm=1200, tps=1e6, clock=lambda: now[0])
    for i in range(100):
        now[0] = i * 2.0
        budget.report(Report(rate_limited=1))
    assert budget.stats()["rps"] >= 20 * 0.995 * 0.05 - 1e-9


def test_token_estimates_are_calibrated_from_usage() -> None:
    async def scenario(loop: asyncio.AbstractEventLoop) -> dict[str, Any]:
        budget = Budget(rpm=1200, tps=100_000, clock=loop.time)
        pacer = LeasePacer(Handle(budget))
        for _ in range(20):
            await pacer.acquire(100)
            pacer.on_success(estimated_tokens=100, input_tokens=250)
        await pacer.acquire(100)
        return budget.stats()

    stats = run_virtual(scenario)
    assert stats["token_factor"] == pytest.approx(2.5)


def test_abort_stops_every_pacer() -> None:
    async def scenario(loop: asyncio.AbstractEventLoop) -> None:
        budget = Budget(rpm=1200, tps=100_000, clock=loop.time)
        handle = Handle(budget)
        pacer = LeasePacer(handle)
        await pacer.acquire(1)
        budget.abort("the service refused the API key (401)")
        with pytest.raises(AuthError, match="refused"):
            await pacer.acquire(1)

    run_virtual(scenario)


def test_a_rate_limited_report_reaches_the_budget_at_once() -> None:
    async def scenario(loop: asyncio.AbstractEventLoop) -> dict[str, Any]:
        budget = Budget(rpm=1200, tps=100_000, clock=loop.time)
        pacer = LeasePacer(Handle(budget))
        await pacer.acquire(1)
        pacer.on_rate_limited(1.0)
        await asyncio.sleep(0)
        return budget.stats()

    stats = run_virtual(scenario)
    assert stats["rate_limited"] == 1 and stats["cuts"] == 1
