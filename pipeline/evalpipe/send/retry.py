"""How patient one call is: the retry policy, the backoff between attempts and `retry-after`.

Kept apart from the client because these are pure rules about time, decided once here and
tested without any HTTP: the client only asks "how long before retry n?".

Backoff is exponential with full jitter: before retry n (0-based) the client sleeps
uniform(0, min(max_delay, base_delay * 2**n)). A `retry-after-ms` / `retry-after` header on
a 429 or 529 replaces that draw, capped at `max_delay` so one header cannot park a row for hours.
"""

from __future__ import annotations

import datetime
import email.utils
import math
import random
import time
from collections.abc import Mapping

from evalpipe.config import RetryPolicy


def backoff_delay(retry: int, policy: RetryPolicy, rng: random.Random | None = None) -> float:
    """Full jitter: uniform(0, cap). Spreads retries of many rows that failed together."""
    return (rng or random).uniform(0.0, policy.backoff_cap(retry))


def retry_delay(
    retry: int, policy: RetryPolicy, header_delay: float | None, rng: random.Random | None = None
) -> float:
    """The sleep before retry `retry`: the service's delay (capped) if it gave one, else backoff."""
    if header_delay is not None:
        return min(policy.max_delay, header_delay)
    return backoff_delay(retry, policy, rng)


def retry_after(headers: Mapping[str, str], now: float | None = None) -> float | None:
    """Seconds the service asks us to wait, or None if it does not say (or says nonsense).

    `retry-after-ms` (milliseconds) takes precedence over `retry-after`, which is either
    seconds or an HTTP date (compared with `now`, a Unix time, default the current time).
    """
    lowered = {key.lower(): value for key, value in headers.items()}
    if "retry-after-ms" in lowered:
        millis = _seconds(lowered["retry-after-ms"])
        if millis is not None:
            return millis / 1000.0
    text = lowered.get("retry-after")
    if text is None:
        return None
    seconds = _seconds(text)
    if seconds is not None:
        return seconds
    return _until_http_date(text, time.time() if now is None else now)


def _seconds(text: str) -> float | None:
    try:
        value = float(text.strip())
    except ValueError:
        return None
    return value if math.isfinite(value) and value >= 0 else None


def _until_http_date(text: str, now: float) -> float | None:
    try:
        when = email.utils.parsedate_to_datetime(text.strip())
        if when.tzinfo is None:  # an HTTP date is GMT even when its zone reads "-0000"
            when = when.replace(tzinfo=datetime.UTC)
        return max(0.0, when.timestamp() - now)
    except (TypeError, ValueError, IndexError, OverflowError, OSError):
        return None  # not a date either: as if there were no header
