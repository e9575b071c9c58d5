"""The service's token buckets, on a fake clock: no real sleeps."""

from __future__ import annotations

import pytest

from evalpipe.errors import ConfigError
from evalpipe.service.ratelimit import NEVER_FITS_RETRY_SECONDS, Denial, RateLimiter


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


def take(limiter: RateLimiter, tokens: int = 1) -> Denial | None:
    """Check, and consume when allowed: what the service does per request."""
    denial = limiter.check(tokens)
    if denial is None:
        limiter.consume(tokens)
    return denial


def test_request_bucket_holds_one_second_and_starts_full() -> None:
    clock = FakeClock()
    limiter = RateLimiter(rpm=1200, tps=10**9, clock=clock)
    assert all(take(limiter) is None for _ in range(20))  # 1200/60 = 20 at once
    denial = take(limiter)
    assert denial is not None and denial.reason == "requests"
    assert denial.retry_after == pytest.approx(1 / 20)
    assert denial.retry_after_ms == 50 and denial.retry_after_seconds == 1
    assert "requests per minute" in denial.message


def test_a_minute_burst_is_refused_like_the_real_service() -> None:
    clock = FakeClock()
    limiter = RateLimiter(rpm=1200, tps=10**9, clock=clock)
    results = [take(limiter) for _ in range(1200)]
    assert sum(r is None for r in results) == 20


def test_refill_is_continuous() -> None:
    clock = FakeClock()
    limiter = RateLimiter(rpm=60, tps=10**9, clock=clock)
    assert take(limiter) is None
    clock.advance(0.5)
    denial = take(limiter)
    assert denial is not None and denial.retry_after == pytest.approx(0.5)
    clock.advance(0.5)
    assert take(limiter) is None


def test_waiting_exactly_retry_after_is_enough() -> None:
    clock = FakeClock()
    limiter = RateLimiter(rpm=7 * 60, tps=10**9, clock=clock)
    for _ in range(7):
        take(limiter)
    denial = take(limiter)
    assert denial is not None
    clock.advance(denial.retry_after)
    assert take(limiter) is None


def test_refill_never_exceeds_capacity() -> None:
    clock = FakeClock()
    limiter = RateLimiter(rpm=120, tps=10**9, clock=clock)
    clock.advance(3600)
    assert [take(limiter) is None for _ in range(3)] == [True, True, False]


def test_token_bucket_denies_and_consumes_nothing() -> None:
    clock = FakeClock()
    limiter = RateLimiter(rpm=10**6, tps=1000, clock=clock)
    assert take(limiter, 800) is None
    denial = take(limiter, 300)
    assert denial is not None and denial.reason == "tokens"
    assert denial.retry_after == pytest.approx(0.1)
    assert "tokens per second" in denial.message
    assert take(limiter, 200) is None  # the refused 300 took nothing


def test_a_request_larger_than_the_token_bucket_never_fits() -> None:
    clock = FakeClock()
    limiter = RateLimiter(rpm=10**6, tps=1000, clock=clock)
    denial = take(limiter, 1001)
    assert denial is not None and denial.reason == "too_large"
    assert denial.retry_after == NEVER_FITS_RETRY_SECONDS
    assert "more than the whole tokens-per-second limit" in denial.message
    assert take(limiter, 1000) is None  # nothing consumed, the bucket is still full


def test_the_longer_wait_is_reported() -> None:
    clock = FakeClock()
    limiter = RateLimiter(rpm=60, tps=100, clock=clock)
    assert take(limiter, 100) is None
    denial = take(limiter, 100)  # requests: 1 s; tokens: 1 s
    assert denial is not None and denial.retry_after == pytest.approx(1.0)
    clock.advance(0.9)
    denial = take(limiter, 50)  # requests: 0.1 s; tokens: 0 s
    assert denial is not None and denial.reason == "requests"


def test_below_60_rpm_a_bucket_still_holds_one_request() -> None:
    clock = FakeClock()
    limiter = RateLimiter(rpm=30, tps=10**9, clock=clock)
    assert take(limiter) is None
    denial = take(limiter)
    assert denial is not None and denial.retry_after == pytest.approx(2.0)


def test_lowering_a_limit_trims_the_bucket_at_once() -> None:
    clock = FakeClock()
    limiter = RateLimiter(rpm=1200, tps=10**9, clock=clock)
    limiter.set_limits(rpm=600)
    assert sum(take(limiter) is None for _ in range(20)) == 10
    assert limiter.limits() == {"rpm": 600, "tps": 10**9}


def test_raising_a_limit_refills_at_the_new_rate() -> None:
    clock = FakeClock()
    limiter = RateLimiter(rpm=60, tps=100, clock=clock)
    take(limiter, 100)
    limiter.set_limits(rpm=600, tps=1000)
    clock.advance(0.1)  # 1 request and 100 tokens at the new rates
    assert take(limiter, 100) is None
    assert take(limiter, 1) is not None


@pytest.mark.parametrize("bad", [0, -1, float("nan"), float("inf"), "10", True])
def test_limits_must_be_positive_numbers(bad: object) -> None:
    with pytest.raises(ConfigError):
        RateLimiter(rpm=bad, tps=100)  # type: ignore[arg-type]
    limiter = RateLimiter(rpm=60, tps=100)
    with pytest.raises(ConfigError):
        limiter.set_limits(tps=bad)  # type: ignore[arg-type]
