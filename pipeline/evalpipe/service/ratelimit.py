"""The service side of the rate limits: two token buckets, enforced like the real service.

The real service holds each limit as a token bucket of one second's capacity, refilled
continuously and starting full, so the embedded service does the same; a client that paces
itself by the minute (a burst of RPM requests at once) is answered with 429s here exactly as it
would be there.

    limiter = RateLimiter(rpm=1200, tps=250_000)
    denial = limiter.check(tokens)      # None, or why not and how long to wait; consumes nothing
    if denial is None:
        limiter.consume(tokens)         # take one request and `tokens` tokens
    limiter.set_limits(rpm=600)         # at run time: the limits change without notice

- The request bucket holds `rpm / 60` requests (never less than one request, or a limit under
  60 RPM could never be met) and refills at `rpm / 60` per second.
- The token bucket holds `tps` tokens and refills at `tps` per second. A request needing more
  tokens than the whole bucket can never be accepted at this limit: its denial says so.
- A denial carries `retry_after`, the exact seconds until the request would fit.
- Lowering a limit trims what a bucket holds to its new capacity; raising it lets it refill.

Time comes from `clock` (default `time.monotonic`) so tests drive it with a fake clock.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from evalpipe.errors import ConfigError

Clock = Callable[[], float]

# A request denied for being larger than the token bucket is told to come back after this long:
# only a raised limit can let it in, and limits change on the scale of minutes.
NEVER_FITS_RETRY_SECONDS = 60.0
_EPSILON = 1e-9  # float slack, so a client that waits exactly `retry_after` is let in


class TokenBucket:
    """A bucket of `capacity` units refilled continuously at `rate` units per second."""

    def __init__(self, rate: float, capacity: float, now: float) -> None:
        self.rate = rate
        self.capacity = capacity
        self.level = capacity  # starts full
        self._updated = now

    def refill(self, now: float) -> None:
        elapsed = max(0.0, now - self._updated)
        self.level = min(self.capacity, self.level + elapsed * self.rate)
        self._updated = now

    def wait_for(self, amount: float) -> float:
        """Seconds until `amount` fits (0 when it fits now); call `refill` first."""
        missing = amount - self.level
        return 0.0 if missing <= _EPSILON else missing / self.rate

    def take(self, amount: float) -> None:
        self.level -= amount

    def reconfigure(self, rate: float, capacity: float, now: float) -> None:
        self.refill(now)
        self.rate = rate
        self.capacity = capacity
        self.level = min(self.level, capacity)


@dataclass(frozen=True)
class Denial:
    """Why a request was refused (429) and how long until it would fit."""

    reason: Literal["requests", "tokens", "too_large"]
    retry_after: float  # seconds
    message: str

    @property
    def retry_after_ms(self) -> int:
        return max(1, math.ceil(self.retry_after * 1000))

    @property
    def retry_after_seconds(self) -> int:
        return max(1, math.ceil(self.retry_after))


def check_limits(rpm: float | None, tps: float | None) -> None:
    """Raise ConfigError unless every given limit is a positive finite number."""
    for name, value in (("rpm", rpm), ("tps", tps)):
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(f"{name}: must be a number (got {type(value).__name__})")
        if not (math.isfinite(value) and value > 0):
            raise ConfigError(f"{name}: must be greater than 0 (got {value})")


class RateLimiter:
    """Requests per minute and tokens per second, as two one-second token buckets."""

    def __init__(self, rpm: float, tps: float, clock: Clock = time.monotonic) -> None:
        check_limits(rpm, tps)
        self._clock = clock
        now = clock()
        self.rpm = float(rpm)
        self.tps = float(tps)
        self._requests = TokenBucket(self.rpm / 60, _request_capacity(self.rpm), now)
        self._tokens = TokenBucket(self.tps, self.tps, now)

    def check(self, tokens: int) -> Denial | None:
        """None if one request of `tokens` fits now, else the denial; consumes nothing."""
        if tokens > self._tokens.capacity:
            return Denial(
                "too_large",
                NEVER_FITS_RETRY_SECONDS,
                f"rate limit: this request needs {tokens} tokens, more than the whole "
                f"tokens-per-second limit ({self.tps:g}); it cannot be accepted at this limit, "
                "split the state or the questions",
            )
        now = self._clock()
        self._requests.refill(now)
        self._tokens.refill(now)
        request_wait = self._requests.wait_for(1)
        token_wait = self._tokens.wait_for(tokens)
        if request_wait == 0.0 and token_wait == 0.0:
            return None
        if request_wait >= token_wait:
            return Denial(
                "requests",
                request_wait,
                f"rate limit: requests per minute exceeded (limit {self.rpm:g}); "
                f"retry after {request_wait:.3f} s",
            )
        return Denial(
            "tokens",
            token_wait,
            f"rate limit: tokens per second exceeded (limit {self.tps:g}, this request "
            f"{tokens}); retry after {token_wait:.3f} s",
        )

    def consume(self, tokens: int) -> None:
        """Take one request and `tokens` tokens; call right after `check` returned None."""
        self._requests.take(1)
        self._tokens.take(tokens)

    def set_limits(self, rpm: float | None = None, tps: float | None = None) -> None:
        """Change either limit now; the buckets keep what they hold, up to the new capacity."""
        check_limits(rpm, tps)
        now = self._clock()
        if rpm is not None:
            self.rpm = float(rpm)
            self._requests.reconfigure(self.rpm / 60, _request_capacity(self.rpm), now)
        if tps is not None:
            self.tps = float(tps)
            self._tokens.reconfigure(self.tps, self.tps, now)

    def limits(self) -> dict[str, float]:
        """The current limits, whole numbers as ints (they are shown in stats and messages)."""
        return {"rpm": _plain(self.rpm), "tps": _plain(self.tps)}


def _request_capacity(rpm: float) -> float:
    # One second's worth, but at least one whole request: below 60 RPM a bucket smaller than
    # one request would refuse everything.
    return max(1.0, rpm / 60)


def _plain(value: float) -> float:
    return int(value) if value.is_integer() else value
