"""The shared budget: pacing that a one-second token bucket never refuses, following limits that
change without notice (measure on 429, probe back up), token calibration and abort.

Time is a virtual clock (the event loop jumps to its next timer), never real sleeps. `simulate`
runs a whole job against the service's own RateLimiter on that clock: jittered arrivals, a Ray-
like hop on every Budget call, latency, 429s with the service's retry-after, retries through the
pacer, limit changes. The Ray handle is stood in for by an object whose methods return
awaitables, the one part here that is not the real thing (the job tests run the real actor)."""

from __future__ import annotations

import asyncio
import heapq
import itertools
import math
import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import pytest

from evalpipe.errors import AuthError
from evalpipe.limits import budget as budget_module
from evalpipe.limits.budget import Budget
from evalpipe.limits.lease import LeasePacer, Report
from evalpipe.service.ratelimit import RateLimiter


class VirtualClockLoop(asyncio.SelectorEventLoop):
    """An event loop whose clock jumps to the next timer whenever nothing is ready.

    Unlike tests/virtual_clock.py it lands a microsecond past the timer: aiolimiter computes
    its wake-up time from its level, and woken exactly on time (no real clock ever is) it can
    find the level a float's hair short and set the same timer again, forever."""

    def __init__(self) -> None:
        super().__init__()
        self._now = 0.0

    def time(self) -> float:
        return self._now

    def _run_once(self) -> None:
        scheduled = self._scheduled
        while scheduled and scheduled[0]._cancelled:  # as asyncio's own _run_once drops them
            self._timer_cancelled_count -= 1
            heapq.heappop(scheduled)._scheduled = False
        if not self._ready and scheduled:
            # A microsecond past the timer, as a real clock would be: a limiter that wakes
            # exactly on time can find its level a hair short and sleep zero seconds forever.
            self._now = max(self._now, scheduled[0]._when + 1e-6)
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


class DelayedHandle:
    """A Budget handle with a Ray-like hop each way (`hop` seconds) on every call."""

    def __init__(self, budget: Budget, hop: float) -> None:
        self.lease = Method(self._later(budget.lease, hop))
        self.report = Method(self._later(budget.report, hop))
        self.abort = Method(budget.abort)

    @staticmethod
    def _later(func: Callable[..., Any], hop: float) -> Callable[..., Any]:
        async def call(*args: Any) -> Any:
            await asyncio.sleep(hop)
            result = func(*args)
            if asyncio.iscoroutine(result):
                result = await result
            await asyncio.sleep(hop)
            return result

        return call


@dataclass
class Run:
    """What the simulated service saw: accepted and refused request times, tokens."""

    accepted: list[float] = field(default_factory=list)
    refused: list[float] = field(default_factory=list)
    tokens: list[int] = field(default_factory=list)
    budget: dict[str, Any] = field(default_factory=dict)

    def rate(self, start: float, end: float) -> float:
        return sum(start <= t < end for t in self.accepted) / (end - start)

    def token_rate(self, start: float, end: float) -> float:
        pairs = zip(self.accepted, self.tokens, strict=True)
        return sum(k for t, k in pairs if start <= t < end) / (end - start)

    def refused_share(self) -> float:
        return len(self.refused) / max(1, len(self.accepted) + len(self.refused))


def simulate(
    rpm: float, tps: float, seconds: float, **options: Any
) -> Run:  # one job alone on the key
    return simulate_jobs(rpm, tps, seconds, **options)[0][0]


def simulate_jobs(
    rpm: float,
    tps: float,
    seconds: float,
    *,
    jobs: tuple[tuple[float, float], ...] = ((0.0, math.inf),),
    third: float = 0.0,
    tokens: int = 50,
    changes: tuple[tuple[float, float | None, float | None], ...] = (),
    actors: int = 2,
    per_actor: int = 40,
    latency: float = 1.0,
    jitter: float = 0.02,
    hop: float = 0.001,
    seed: int = 1,
    billed: float = 1.0,
    told: Report | None = None,
    drained: bool = False,
) -> tuple[list[Run], Run]:
    """Jobs on one key against the service's own RateLimiter on a virtual clock.

    Each job (start, stop) has a Budget of its own, as jobs on separate Rays do. Each request
    passes its actor's LeasePacer, travels 0-`jitter` s to the service (the delays between a
    grant and the request's arrival), is refused (429 with the service's retry-after, then
    retried through the pacer) or accepted and answered after a lognormal `latency`. A third
    program sends `third` requests/s at fixed times, unpaced. `changes` are (time, rpm, tps)
    steps of the service's limits, without notice. The service counts `billed` tokens per
    token of the job's estimate; `told` is reported to each Budget before its first lease
    (what requests like these cost before it: the packing measurement's); `drained`: the
    service's token bucket starts empty (that measurement just spent it). Returns the jobs'
    runs and the third's.
    """
    rng = random.Random(seed)
    runs, other = [Run() for _ in jobs], Run()

    async def scenario(loop: asyncio.AbstractEventLoop) -> None:
        limiter = RateLimiter(rpm, tps, clock=loop.time)
        if drained:
            limiter.consume(math.floor(tps))
        for at, new_rpm, new_tps in changes:
            loop.call_at(at, limiter.set_limits, new_rpm, new_tps)

        async def job(run: Run, start: float, stop: float) -> None:
            await asyncio.sleep(start)
            budget = Budget(rpm=rpm, tps=tps, clock=loop.time, rng=random.Random(rng.random()))
            if told is not None:
                budget.report(told)
            handle = DelayedHandle(budget, hop)
            end = min(stop, seconds)
            counted = math.ceil(tokens * billed)

            async def sender(pacer: LeasePacer) -> None:
                while loop.time() < end:
                    while True:
                        await pacer.acquire(tokens)
                        await asyncio.sleep(rng.uniform(0, jitter))
                        denial = limiter.check(counted)
                        if denial is None:
                            break
                        run.refused.append(loop.time())
                        pacer.on_rate_limited()
                        await asyncio.sleep(denial.retry_after)
                    limiter.consume(counted)
                    run.accepted.append(loop.time())
                    run.tokens.append(counted)
                    await asyncio.sleep(latency * math.exp(0.25 * rng.gauss(0, 1)))
                    pacer.on_success(tokens, counted)

            pacers = [LeasePacer(handle) for _ in range(actors)]
            await asyncio.gather(*(sender(p) for p in pacers for _ in range(per_actor)))
            run.budget = budget.stats()

        async def fixed() -> None:
            for i in range(int(seconds * third)):
                await asyncio.sleep(max(0.0, i / third - loop.time()))
                if limiter.check(tokens) is None:
                    limiter.consume(tokens)
                    other.accepted.append(loop.time())
                else:
                    other.refused.append(loop.time())

        senders = [job(run, start, stop) for run, (start, stop) in zip(runs, jobs, strict=True)]
        await asyncio.gather(*senders, *([fixed()] if third else []))

    run_virtual(scenario)
    return runs, other


@pytest.mark.parametrize("actors", [1, 3])
def test_request_pacing_never_overdraws_a_one_second_bucket(actors: int) -> None:
    service = ServiceBucket(1200 / 60)

    async def scenario(loop: asyncio.AbstractEventLoop) -> int:
        budget = Budget(rpm=1200, tps=1e9, clock=loop.time)
        return await drive(loop, budget, actors, 40, 10, 60.0, service.take)

    granted = run_virtual(scenario)
    assert service.refused == 0
    rate = granted / 60.0
    assert 0.99 * 20 <= rate <= 20 * 0.995  # headroom, and no opening burst


def test_token_pacing_never_overdraws_and_binds_before_requests() -> None:
    service = ServiceBucket(10_000)

    async def scenario(loop: asyncio.AbstractEventLoop) -> int:
        budget = Budget(rpm=1200, tps=10_000, clock=loop.time)
        return await drive(loop, budget, 2, 20, 2_000, 60.0, lambda now: service.take(now, 2_000))

    granted = run_virtual(scenario)
    assert service.refused == 0
    assert granted * 2_000 / 60.0 >= 0.97 * 10_000


def test_a_steady_limit_costs_no_429_despite_jittered_arrivals() -> None:
    run = simulate(1200, 1e9, 60.0, jitter=0.05)
    assert run.refused == []
    assert run.rate(5, 55) >= 0.99 * 20


def test_a_token_limit_binds_before_the_request_limit_without_429s() -> None:
    run = simulate(1200, 20_000, 60.0, tokens=2_030)
    assert run.refused == []
    assert run.token_rate(5, 55) >= 0.97 * 20_000


def test_a_budget_told_what_requests_cost_starts_at_the_token_limit() -> None:
    """Packs the service bills 8% above the job's estimate (a tokenizer that reads JSON's
    punctuation), tokens binding, the service's bucket just emptied by the packing measurement.
    Told what the measurement's packs were billed, the run's Budget paces by the service's
    count from its first grant: no 429, the token limit from its first seconds. Not told, it
    learns it from its first answers, too late: a 429, and a second at half the pace."""
    told = Report(accepted=15, estimated_tokens=15 * 2_000, actual_tokens=15 * 2_160)
    run = simulate(600, 20_000, 10.0, tokens=2_000, billed=1.08, told=told, drained=True)
    assert run.refused == []
    assert run.token_rate(1, 9) >= 0.97 * 20_000
    assert run.token_rate(0, 3) >= 0.9 * 20_000
    blind = simulate(600, 20_000, 10.0, tokens=2_000, billed=1.08, drained=True)
    assert blind.refused
    assert blind.token_rate(0, 3) < 0.85 * 20_000


def test_leases_follow_the_binding_limit() -> None:
    """A high request limit with large requests: a lease of 20 ms of *requests* would carry
    seconds of tokens at once; leases are sized by the limit that binds."""
    run = simulate(60_000, 20_000, 60.0, tokens=2_000)
    assert run.refused == []
    assert run.token_rate(5, 55) >= 0.97 * 20_000


def test_a_halved_limit_is_measured_and_followed_within_seconds() -> None:
    """The service halves its limit at 30 s without notice. One measurement (about a second
    of 429s) tells the Budget the new rate; from 5 s after the drop the job sends at least
    95% of the new limit, with no long dips; probing the new ceiling costs a few 429s, each
    probe later than the one before."""
    run = simulate(1200, 1e9, 120.0, changes=((30.0, 600, None),))
    assert run.rate(35, 118) >= 0.95 * 10
    assert all(run.rate(t, t + 5) >= 0.85 * 10 for t in range(35, 113))
    assert run.refused_share() <= 0.02
    first = [t for t in run.refused if t < 35]
    assert 1 <= len(first) <= 10  # the flinch at the first, then the measurement
    assert len(run.refused) - len(first) <= 10  # the probes of the new ceiling, all of them
    assert run.budget["ceiling"] == pytest.approx(0.5, rel=0.05)


@pytest.mark.parametrize("new_rpm", [1080, 120])
def test_other_drops_are_followed_too(new_rpm: float) -> None:
    run = simulate(1200, 1e9, 90.0, changes=((30.0, new_rpm, None),))
    new = new_rpm / 60
    assert 0.93 * new <= run.rate(40, 88) <= 1.01 * new
    assert run.refused_share() <= 0.04


def test_a_restored_limit_is_found_again() -> None:
    run = simulate(1200, 1e9, 150.0, changes=((20.0, 600, None), (60.0, 1200, None)))
    assert run.rate(30, 60) >= 0.95 * 10
    assert run.rate(60 + budget_module.PROBE_FIRST_WAIT * 4 + 20, 148) >= 0.97 * 20


def test_a_request_larger_than_the_bucket_is_acquired_in_pieces() -> None:
    """At 30 RPM our request bucket holds a quarter of a request (half a second of the rate):
    a request is acquired in pieces and goes once the bucket has drained, every 2 s (and the
    50 ms a rate that low keeps), and the service's one-request bucket never refuses one."""

    async def scenario(loop: asyncio.AbstractEventLoop) -> list[float]:
        service = RateLimiter(30, 1e9, clock=loop.time)
        budget = Budget(rpm=30, tps=1e9, headroom=1.0, clock=loop.time)
        granted: list[float] = []

        def take(now: float) -> None:
            assert service.check(10) is None
            service.consume(10)
            granted.append(now)

        await drive(loop, budget, 2, 4, 10, 60.0, take)
        return granted

    granted = run_virtual(scenario)
    gaps = [b - a for a, b in itertools.pairwise(granted)]
    assert min(gaps) >= 2.0 and len(granted) >= 60 / 2.05 - 1


def test_two_jobs_that_cannot_coordinate_share_the_key_fully_and_fairly() -> None:
    """Two jobs on one key, each with a Budget of its own (separate Rays), the second started
    5 s after the first, in four runs of different jitter: while both run they use nearly all of
    the limit together, neither starves, and few of their requests are refused. Averaged over
    the runs: the smaller share at least 45% of the limit, at most 1.2% of the requests
    refused. (The issue's targets, run by run, are measured on the real service:
    bench/job_shared.py, case `machines`.)"""
    smaller, refusals = [], []
    for seed in range(1, 5):
        (a, b), _ = simulate_jobs(
            1200, 1e9, 80.0, jobs=((0.0, 75.0), (5.0, 80.0)), latency=0.5, seed=seed
        )
        each = (a.rate(15, 70) / 20, b.rate(15, 70) / 20)
        refused = len(a.refused) + len(b.refused)
        share_429 = refused / (refused + len(a.accepted) + len(b.accepted))
        assert sum(each) >= 0.95 and min(each) >= 0.35 and share_429 <= 0.02
        smaller.append(min(each))
        refusals.append(share_429)
    assert sum(smaller) / len(smaller) >= 0.45
    assert sum(refusals) / len(refusals) <= 0.012


def test_a_job_beside_a_fixed_sender_takes_what_it_leaves() -> None:
    """A program sends 5 requests/s on the key, unpaced: the job takes at least 90% of the
    15 requests/s left, with at most 2% of its requests refused."""
    (job,), _ = simulate_jobs(1200, 1e9, 90.0, third=5.0, latency=0.5)
    assert job.rate(15, 88) >= 0.9 * 15
    assert job.refused_share() <= 0.02


def test_a_lone_429_is_jitter_not_a_lower_limit() -> None:
    async def scenario(loop: asyncio.AbstractEventLoop) -> dict[str, Any]:
        budget = Budget(rpm=1200, tps=1e9, clock=loop.time)
        loop.call_at(10.0, budget.report, Report(rate_limited=1))
        await drive(loop, budget, 2, 40, 10, 60.0, lambda now: None)
        return budget.stats()

    stats = run_virtual(scenario)
    assert stats["cuts"] == 0 and stats["rps"] == pytest.approx(20 * 0.995)


def test_the_first_429_after_a_quiet_while_halves_the_pacing_for_a_second() -> None:
    """A flinch: the pacing halves at once, the pace (what measurements and probes start from)
    does not; it ends after a second. A 429 less than 10 s after the last does not flinch
    again; one after 10 quiet seconds does."""
    now = [0.0]
    budget = Budget(rpm=1200, tps=1e6, clock=lambda: now[0])
    pace = 20 * 0.995

    def at(t: float, refused: int = 0) -> dict[str, Any]:
        now[0] = t
        budget.report(Report(rate_limited=refused))
        return budget.stats()

    assert at(20.0, 1)["paced_rps"] == pytest.approx(pace / 2)
    assert at(20.5, 1)["paced_rps"] == pytest.approx(pace / 2)  # not a flinch of its own ...
    assert at(20.9)["rps"] == pytest.approx(pace) and at(20.9)["paced_rps"] < pace
    assert at(21.0)["paced_rps"] == pytest.approx(pace)  # ... so it ends a second after the first
    at(51.0)  # a report without 429s: the lone ones of 20 s are stale, no measurement
    assert at(60.0, 1)["paced_rps"] == pytest.approx(pace / 2)
    assert budget.stats()["flinches"] == 2 and budget.stats()["cuts"] == 0


def test_half_refused_halves_at_once_but_only_once_unmeasured() -> None:
    """Five 429s with half or more of the grants refused halve the pace at once. A burst of
    429s right after it (retries; another sender not cut yet) does not halve it again: within
    1.5 s of a cut the pace stays at no less than half what it was; a measurement after that
    may halve it again."""
    now = [0.0]
    budget = Budget(rpm=1200, tps=1e6, clock=lambda: now[0])

    def refused(at: float) -> None:
        for i in range(5):  # 10 ms apart
            now[0] = at + i / 100
            budget.report(Report(rate_limited=1))

    refused(0.0)
    assert budget.stats()["rps"] == pytest.approx(20 * 0.995 / 2)
    refused(0.3)
    assert budget.stats()["rps"] == pytest.approx(20 * 0.995 / 2)
    now[0] = 1.4  # a measurement of more than a second, within the episode
    budget.report(Report(rate_limited=1))
    assert budget.stats()["rps"] == pytest.approx(20 * 0.995 / 2)
    refused(1.7)  # a new episode
    assert budget.stats()["rps"] == pytest.approx(20 * 0.995 / 4)


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
        pacer.on_rate_limited()
        await asyncio.sleep(0)
        return budget.stats()

    stats = run_virtual(scenario)
    assert stats["rate_limited"] == 1 and stats["measuring"]


def shares(jobs: dict[str, float]) -> dict[str, float]:
    """Requests/s each job got from one Budget over 10-50 s; `jobs` maps a job's name to the
    pause of its senders after each request (0: it wants all it can get)."""

    async def scenario(loop: asyncio.AbstractEventLoop) -> dict[str, float]:
        handle = Handle(Budget(rpm=1200, tps=1e9, clock=loop.time))
        counts = dict.fromkeys(jobs, 0)

        async def sender(pacer: LeasePacer, name: str, offset: float) -> None:
            await asyncio.sleep(offset)  # a demand spread evenly in time
            while loop.time() < 60:
                await pacer.acquire(10)
                counts[name] += 10 <= loop.time() < 50
                await asyncio.sleep(jobs[name])

        async def job(name: str) -> None:
            pacers = [LeasePacer(handle) for _ in range(2)]  # two actors, 40 senders each
            offsets = [jobs[name] * i / 80 for i in range(80)]
            await asyncio.gather(*(sender(pacers[i % 2], name, t) for i, t in enumerate(offsets)))

        await asyncio.gather(*(job(name) for name in jobs))
        return {name: n / 40 for name, n in counts.items()}

    return run_virtual(scenario)


def test_jobs_sharing_one_budget_get_what_they_ask_for() -> None:
    """One account's Budget serves the leases of all its jobs in the order asked: a job that
    wants about 5 requests/s gets them and another that wants all it can get takes the rest;
    two jobs that both want more than half get about half each."""
    got = shares({"small": 16.0, "big": 0.0})  # 80 senders, a request every 16 s: 5/s
    assert got["small"] == pytest.approx(5, rel=0.05)
    assert got["small"] + got["big"] == pytest.approx(20 * 0.995, rel=0.01)
    got = shares({"a": 0.0, "b": 0.0})
    assert got["a"] == pytest.approx(got["b"], rel=0.05)
    assert got["a"] + got["b"] == pytest.approx(20 * 0.995, rel=0.01)
