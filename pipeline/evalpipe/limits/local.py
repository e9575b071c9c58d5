"""The account's pace for requests sent before a run's Budget exists, in the sending process.

Why a module of its own: `packing.rows: auto` asks a sample of the corpus before the run's Ray
workers and their Budget send anything (evalpipe.job), and those requests count against the
account's limits as much as the run's. A `LocalPacer` paces them with the Budget's own pacing
primitive (evalpipe.limits.pacing), at the account's configured limits, and reserves every grant
on the account's schedule on this machine (evalpipe.limits.hostpace), or in the shared tier
(evalpipe.tier), the schedule the account's Budget reserves every one of its grants on. The
run's Budget, starting after, takes its first slots where these reservations end: it neither
waits for the service's buckets to refill nor meets them empty.

    async with LocalPacer.for_job(config, url, key, tier) as pacer:  # or for_account(url, key...)
        async with EvalClient(url, key, pacer=pacer) as client:
            ...

It is the client's `Pacer` (evalpipe.send.client), with none of the Budget's adaptation to a
429 (its requests are few and brief, a 429 is the client's to retry, and the run's Budget
measures the service from its own first requests on), but with its calibration: tokens are
paced by the service's count, our estimate times the ratio measured from `usage` (`CountRatio`),
as the Budget paces them, so a service that counts more than we do (JSON's punctuation in a
pack) is not sent more than its limit. Made, used and closed on one event loop.
"""

from __future__ import annotations

import math
import random
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from evalpipe.contract import CountRatio
from evalpipe.limits.account import account_name, shared_schedule
from evalpipe.limits.hostpace import HostPace, host_file
from evalpipe.limits.pacing import Pacing, Schedule, spaced
from evalpipe.tier import TierAddress

if TYPE_CHECKING:
    from evalpipe.config import JobConfig


class LocalPacer:
    """Requests paced at `rpm` and `tps` (times `headroom`, as the Budget paces), each
    reserved on `host`, the account's schedule on this machine (None: paced alone)."""

    def __init__(
        self,
        rpm: float,
        tps: float,
        headroom: float,
        host: Schedule | None = None,
        clock: Callable[[], float] = time.monotonic,
        rng: random.Random | None = None,
    ) -> None:
        rps, self._tps = spaced(rpm / 60 * headroom), tps * headroom
        self._pacing = Pacing(rps, self._tps, clock, rng or random.Random())
        self.count = CountRatio()  # the service's tokens per token of ours, from `usage`
        self._host = host
        if host is not None:
            host.set_limits(rps, self._tps)

    @classmethod
    def for_account(
        cls,
        base_url: str,
        key: str,
        rpm: float,
        tps: float,
        headroom: float,
        tier: TierAddress | None = None,
    ) -> LocalPacer:
        """Paced on the schedule of the account of `key` at `base_url` (as its Budget is):
        this machine's, or the shared `tier`'s."""
        file = HostPace.open(host_file(account_name(base_url, key)))
        return cls(rpm, tps, headroom, shared_schedule(tier, file))

    @classmethod
    def for_job(
        cls, config: JobConfig, base_url: str, key: str, tier: TierAddress | None
    ) -> LocalPacer:
        """`for_account` at the job's configured limits, on its shared `tier` if it has one (as
        the session resolved it: `evalpipe.planning.PreparedJob.tier`)."""
        limits = config.limits
        rates = (limits.requests_per_minute, limits.tokens_per_second, limits.headroom)
        return cls.for_account(base_url, key, *rates, tier)

    async def acquire(self, tokens: int) -> None:
        # At most a second's worth of tokens, as the Budget grants one request: the service
        # refuses outright a request larger than its whole bucket.
        billed = math.ceil(tokens * self.count.ratio)
        await self._pacing.take_on(self._host, 1, min(billed, max(1, int(self._tps))))

    def on_success(self, estimated_tokens: int, input_tokens: int) -> None:
        if estimated_tokens > 0 and input_tokens > 0:
            self.count.add(estimated_tokens, input_tokens)

    def on_rate_limited(self) -> None:
        return None

    async def __aenter__(self) -> LocalPacer:
        return self

    async def __aexit__(self, *exc: Any) -> None:
        if self._host is not None:
            self._host.close()
            self._host = None
