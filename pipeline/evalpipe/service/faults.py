"""Injected misbehaviour for the embedded service: faults and latency, seeded and reproducible.

A batch pipeline has to survive what real services do under load: 529s, 500s, dropped
connections, bodies cut short, slow answers, a service that hangs and then drops the connection.
The embedded service can do each on purpose, off by default, so the client's retries and error
mapping are tested against real sockets.

    faults = FaultInjector(FaultRates(drop=0.1), seed=7)
    faults.draw()        # per accepted request: None, or which fault to inject
    Latency(0.05, seed=7).sample()   # seconds to wait before answering (lognormal)

The same seed and the same order of requests give the same faults. Faults are exclusive: one
uniform draw per request picks at most one, so the rates must add up to at most 1.
"""

from __future__ import annotations

import enum
import math
import random
from dataclasses import astuple, dataclass, fields

from evalpipe.errors import ConfigError

LATENCY_SIGMA = 0.25  # spread of the lognormal latency around its median


class Fault(enum.Enum):
    OVERLOADED = "529"
    SERVER_ERROR = "500"
    DROP = "drop"  # close the connection without a response
    TRUNCATE = "truncate"  # a 200 whose JSON body is cut short, then the connection closed
    SLOW = "slow"  # answer after `slow_seconds`
    HANG = "hang"  # say nothing for `slow_seconds`, then close the connection


@dataclass(frozen=True)
class FaultRates:
    """Probability of each fault per accepted request, in the order of `Fault`."""

    overloaded: float = 0.0
    server_error: float = 0.0
    drop: float = 0.0
    truncate: float = 0.0
    slow: float = 0.0
    hang: float = 0.0

    def __post_init__(self) -> None:
        for item in fields(self):
            value = getattr(self, item.name)
            if not (isinstance(value, (int, float)) and 0.0 <= value <= 1.0):
                raise ConfigError(f"fault rate {item.name}: must be in [0, 1] (got {value!r})")
        if math.fsum(astuple(self)) > 1.0 + 1e-12:
            raise ConfigError("fault rates: must add up to at most 1 (one fault per request)")


class FaultInjector:
    """Decides, per accepted request, which fault (if any) to inject."""

    def __init__(self, rates: FaultRates, seed: int = 0) -> None:
        self._rng = random.Random(seed)
        self._cumulative: list[tuple[float, Fault]] = []
        total = 0.0
        for fault, rate in zip(Fault, astuple(rates), strict=True):
            if rate > 0:
                total += rate
                self._cumulative.append((total, fault))

    def draw(self) -> Fault | None:
        if not self._cumulative:  # faults off: no draw, nothing to pay
            return None
        u = self._rng.random()
        for bound, fault in self._cumulative:
            if u < bound:
                return fault
        return None


class Latency:
    """Per-request service time: lognormal around `median` seconds (0 = answer at once)."""

    def __init__(self, median: float, seed: int = 0, sigma: float = LATENCY_SIGMA) -> None:
        if not (math.isfinite(median) and median >= 0):
            raise ConfigError(f"latency: must be 0 or more seconds (got {median!r})")
        self.median = median
        self._sigma = sigma
        # Its own stream, so turning latency on does not change which requests get faults.
        self._rng = random.Random(f"latency:{seed}")

    def sample(self) -> float:
        if self.median == 0:
            return 0.0
        return self.median * math.exp(self._sigma * self._rng.gauss(0.0, 1.0))
