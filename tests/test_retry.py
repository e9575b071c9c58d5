"""The retry rules as pure functions: the policy's bounds, full-jitter backoff, `retry-after`."""

from __future__ import annotations

import email.utils
import random
from typing import Any

import pytest

from evalpipe.config import RetryPolicy
from evalpipe.send.retry import backoff_delay, retry_after, retry_delay


def test_default_policy_is_patient_for_minutes_and_bounded() -> None:
    policy = RetryPolicy()
    caps = [policy.backoff_cap(n) for n in range(policy.max_attempts - 1)]
    assert caps == [0.5, 1, 2, 4, 8, 16, 32, 60, 60, 60, 60]
    assert policy.worst_case_backoff == pytest.approx(303.5)  # ~5 min, ~2.5 min on average
    assert policy.worst_case_wait == pytest.approx(660.0)  # retry-after capped at max_delay
    assert 5 * 60 <= policy.worst_case_backoff <= 10 * 60
    assert RetryPolicy(max_attempts=1).worst_case_backoff == 0.0
    assert RetryPolicy().backoff_cap(10_000) == 60.0  # no float overflow


@pytest.mark.parametrize("bad", [{"max_attempts": 0}, {"base_delay": -1}, {"attempt_timeout": 0}])
def test_policy_refuses_nonsense(bad: dict[str, Any]) -> None:
    with pytest.raises(ValueError):
        RetryPolicy(**bad)


def test_backoff_is_full_jitter_under_the_cap() -> None:
    policy = RetryPolicy(base_delay=0.5, max_delay=60.0)
    rng = random.Random(1)
    for retry in range(12):
        draws = [backoff_delay(retry, policy, rng) for _ in range(300)]
        cap = policy.backoff_cap(retry)
        assert all(0.0 <= d <= cap for d in draws)
        # Full jitter spreads over the whole range, not just near the cap.
        assert min(draws) < 0.1 * cap and max(draws) > 0.9 * cap


def test_retry_after_ms_takes_precedence() -> None:
    assert retry_after({"retry-after-ms": "1500", "retry-after": "30"}) == 1.5
    assert retry_after({"Retry-After-Ms": "20"}) == 0.02
    # A broken ms header falls back to retry-after.
    assert retry_after({"retry-after-ms": "soon", "retry-after": "3"}) == 3.0


def test_retry_after_seconds_and_http_date() -> None:
    assert retry_after({"retry-after": "7"}) == 7.0
    assert retry_after({"Retry-After": " 2.5 "}) == 2.5
    now = 1_700_000_000.0
    date = email.utils.formatdate(now + 42, usegmt=True)
    assert retry_after({"retry-after": date}, now=now) == pytest.approx(42.0)
    assert retry_after({"retry-after": email.utils.formatdate(now - 60)}, now=now) == 0.0


@pytest.mark.parametrize(
    "headers",
    [
        {},
        {"retry-after": "soon"},
        {"retry-after": "-3"},
        {"retry-after": "nan"},
        {"retry-after": "inf"},
        {"retry-after": "Fri, 31 Dec 99999 23:59:59 GMT"},
        {"retry-after-ms": "-5"},
    ],
)
def test_retry_after_absent_or_nonsense_is_none(headers: dict[str, str]) -> None:
    assert retry_after(headers) is None


def test_retry_delay_honours_the_header_up_to_max_delay() -> None:
    policy = RetryPolicy(base_delay=1.0, max_delay=10.0)
    assert retry_delay(0, policy, 3.0) == 3.0
    assert retry_delay(0, policy, 3600.0) == 10.0  # one header cannot park a row for an hour
    assert 0.0 <= retry_delay(3, policy, None, random.Random(0)) <= 8.0
