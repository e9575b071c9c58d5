"""How patient one call is: the retry policy a job's `retries` section sets.

A value, not behaviour: the client (`evalpipe.send`) turns it into sleeps between attempts. It
lives with the config so that the config's defaults are the policy's, stated once.
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class RetryPolicy:
    """How patient one call is. The defaults suit an unattended night run.

    With the defaults the backoff sleeps of one call add up to at most `worst_case_backoff`
    (303.5 s, about 5 min; half that on average with full jitter), and to at most
    `worst_case_wait` (11 min) if the service sends the largest honoured retry-after every time.
    Each attempt may additionally take up to `attempt_timeout`.
    """

    max_attempts: int = 12
    base_delay: float = 0.5
    max_delay: float = 60.0
    attempt_timeout: float = 60.0

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise ValueError(f"max_attempts must be at least 1 (got {self.max_attempts})")
        if self.base_delay < 0 or self.max_delay < 0 or self.attempt_timeout <= 0:
            raise ValueError("delays must be >= 0 and attempt_timeout > 0")

    def backoff_cap(self, retry: int) -> float:
        """The largest backoff before retry `retry` (0-based): min(max_delay, base * 2**retry)."""
        # The exponent is clamped so a huge retry count cannot overflow a float.
        return min(self.max_delay, self.base_delay * 2.0 ** min(retry, 64))

    @property
    def worst_case_backoff(self) -> float:
        """Total sleep of one call whose every attempt fails without a retry-after header."""
        return math.fsum(self.backoff_cap(n) for n in range(self.max_attempts - 1))

    @property
    def worst_case_wait(self) -> float:
        """Total sleep of one call if every failure carries a retry-after >= max_delay."""
        return (self.max_attempts - 1) * self.max_delay
