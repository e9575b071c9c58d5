"""The run's guard rails: a cost cap and a time limit, for runs nobody watches.

A budget owner asks two things of a nightly job: it never spends more than a set amount, and
it is over when its window closes, so the day's jobs can start. Both stop the run the way
SIGTERM does (`evalpipe.engine.stopping`): no more rows are taken, the requests in flight end and
are kept, the journal is folded, and the same command resumes.

    CostCap    the admission arithmetic, in the service's tokens: a job (a row's requests) is
               handed to a worker only if what the service billed so far, plus the estimate of
               what is in flight, plus its own estimate stays within the cap. Estimates are
               evalpipe's count times the service's count per token of ours (the kept ratio,
               then the one this run measures), priced by the config. The driver alone sees
               both the spend and what is in flight, so it admits (`Dispatcher._take`). A job
               that does not fit waits while others are in flight (their bills replace their
               estimates); when none is and it still does not fit, the cap is reached, and the
               run stops within a job's cost of it, whatever the cap's size. While others are in
               flight, at most half of what is left of the cap is (a quarter until the
               service's count is measured or kept from before): the jobs in flight, estimated
               anew as answers come in, can then never be estimated past the cap unless the
               count doubles, and the spend closes in on the cap, halving what is left with
               each wave, instead of stopping far below it when the count moves a few percent
               with the whole cap in flight. Should what was admitted still come to be
               estimated past the cap by more than `OVER_TOLERANCE`, the workers send none of
               it that is not in flight yet, and the run stops.
    TimeLimit  when the run must stop: `limits.max_duration` after the command started, or
               `limits.deadline`, whichever comes first; checked every turn of the driver.

Each ends the run with its own error and exit code (`CostCapReached` 6, `DeadlineReached` 7),
in one line that says what was spent and what the rest would cost, or when the time ran out.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime

from evalpipe.config import JobConfig, deadline_at, describe_duration
from evalpipe.engine.progress import Counters
from evalpipe.errors import CostCapReached, DeadlineReached, EvalpipeError
from evalpipe.planning import Request, price_of

COST_CAP = "cost_cap"
DEADLINE = "deadline"
IN_FLIGHT_SHARE = 0.5  # of what is left of the cap, in flight at most while others are
UNMEASURED_SHARE = 0.25  # the same, until the service's count is measured
MEASURED_AFTER = 10  # answers that measure the service's count well enough to trust
# What was admitted may come to be estimated past the cap by this much (the measured count
# moves a little from answer to answer) before the workers are told to send none of it.
OVER_TOLERANCE = 0.02


@dataclass
class CostCap:
    """What the run may still send, in tokens the service bills (see the module docstring).
    `CostCap()` is no cap: it admits every job and keeps no account.

    `ratio` is the service's count per token of ours; `billed` what it billed this run;
    `in_flight` evalpipe's count of the jobs admitted and not yet back (`jobs`, by index)."""

    usd: float = math.inf
    per_million: float = 1.0
    ratio: float = 1.0
    measured: bool = False  # `ratio` is measured (or kept), not yet assumed
    billed: int = 0
    in_flight: int = 0
    next_tokens: int = 0  # evalpipe's count of the last job refused (for the message)
    refused: bool = False  # a job does not fit with nothing in flight: the cap is reached
    jobs: dict[int, int] = field(default_factory=dict)  # admitted, not back: index -> tokens

    @property
    def tokens(self) -> float:
        """The cap in the service's tokens."""
        return self.usd * 1_000_000 / self.per_million

    def committed(self, more: int = 0) -> float:
        """The service's tokens billed, plus the estimate of those in flight and `more`."""
        return self.billed + (self.in_flight + more) * self.ratio

    def admit(self, index: int, requests: Sequence[Request]) -> bool:
        """Send job `index` (its `requests`) if it fits under the cap with what is spent and
        in flight; False if not: it waits for those in flight, or, with none, is `refused`."""
        if self.usd == math.inf:
            return True
        tokens = sum(request.tokens for request in requests)
        left = self.tokens - self.billed
        if self.jobs:  # others in flight: a share of what is left (module docstring)
            share = IN_FLIGHT_SHARE if self.measured else UNMEASURED_SHARE
            fits = (self.in_flight + tokens) * self.ratio <= left * share
        else:
            fits = tokens * self.ratio <= left
        if not fits:
            self.next_tokens, self.refused = tokens, not self.jobs
            return False
        self.in_flight += tokens
        self.jobs[index] = tokens
        return True

    def measure(self, ratio: float, samples: int) -> None:
        """The service's count per token of ours, as measured from `samples` answers."""
        self.ratio = ratio
        self.measured = self.measured or samples >= MEASURED_AFTER

    def settle(self, index: int, billed: int) -> None:
        """Job `index` came back (or went back to the queue): the service billed `billed`."""
        self.in_flight -= self.jobs.pop(index, 0)
        self.billed += billed

    def over(self) -> bool:
        """What was admitted is now estimated well past the cap (the service's count, once
        measured, is far above the one it was admitted by): the workers must send nothing
        more of it, and the run stops."""
        return self.committed() > self.tokens * (1 + OVER_TOLERANCE)

    def usd_of(self, tokens: float) -> float:
        return tokens * self.per_million / 1_000_000

    @property
    def spent(self) -> float:
        return self.usd_of(self.billed)


def cost_cap(config: JobConfig, ratio: float | None) -> CostCap | None:
    """The config's cost cap (`limits.max_cost_usd`), None without one; `ratio` the kept one."""
    usd = config.limits.max_cost_usd
    if usd is None:
        return None
    price = price_of(config).per_million
    assert price is not None, "a cap without a price is refused with the config"
    return CostCap(usd, price, ratio if ratio is not None else 1.0, measured=ratio is not None)


@dataclass(frozen=True)
class TimeLimit:
    """When the run must stop (`time.monotonic()`), and what set it, for the message."""

    at: float
    what: str

    def came(self) -> bool:
        return time.monotonic() >= self.at


def time_limit(config: JobConfig, started: float, now: datetime | None = None) -> TimeLimit | None:
    """The earlier of `limits.max_duration` after `started` (the command's start, monotonic)
    and `limits.deadline` from `now`; None when neither is set."""
    limits, found = config.limits, []
    if limits.max_duration is not None:
        duration = describe_duration(limits.max_duration)
        found.append(TimeLimit(started + limits.max_duration, f"--max-duration {duration}"))
    if limits.deadline is not None:
        at = deadline_at(limits.deadline, now)
        left = (at - (now or datetime.now().astimezone())).total_seconds()
        found.append(TimeLimit(time.monotonic() + left, f"--deadline {at:%Y-%m-%d %H:%M %Z}"))
    return min(found, key=lambda limit: limit.at) if found else None


def seconds_available(config: JobConfig, now: datetime | None = None) -> float | None:
    """The time a run started now would have (`plan`'s question); None without a limit."""
    limit = time_limit(config, time.monotonic(), now)
    return None if limit is None else max(0.0, limit.at - time.monotonic())


def cap_reached(cap: CostCap, counters: Counters, committed: int) -> CostCapReached:
    """The one line of a run stopped at its cap: what was spent, what the rest would cost."""
    left = counters.rows_total - counters.rows_skipped - counters.rows_done
    if counters.rows_by_request:  # the average row this run paid for: those the cache or a
        rest = cap.spent / counters.rows_by_request * left  # repeat answered cost nothing
    else:
        rest = cap.usd_of(cap.next_tokens * cap.ratio) * left
    return CostCapReached(
        f"spent ${cap.spent:.6f} of the ${cap.usd:g} cap (limits.max_cost_usd; "
        f"{cap.billed:,} tokens billed by the service); the {left:,} rows left would cost "
        f"about ${rest:.6f} more; {committed:,} rows are committed: run the same command with "
        "a higher --max-cost, or none, to finish"
    )


def time_ran_out(limit: TimeLimit, counters: Counters, committed: int) -> DeadlineReached:
    left = counters.rows_total - counters.rows_skipped - counters.rows_done
    return DeadlineReached(
        f"the run's time ran out ({limit.what}); {committed:,} rows are committed and "
        f"{left:,} are left: run the same command to resume"
    )


@dataclass
class Guards:
    """The run's cost cap and time limit (either may be None), and how they ended it."""

    cap: CostCap | None = None
    clock: TimeLimit | None = None

    def check(self) -> str | None:
        """The guard rail that asks for a stop now, if any."""
        if self.cap is not None and (self.cap.refused or self.cap.over()):
            return COST_CAP
        if self.clock is not None and self.clock.came():
            return DEADLINE
        return None

    def error(self, reason: str | None, counters: Counters, committed: int) -> EvalpipeError:
        if reason == COST_CAP and self.cap is not None:
            return cap_reached(self.cap, counters, committed)
        assert self.clock is not None
        return time_ran_out(self.clock, counters, committed)
