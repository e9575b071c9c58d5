"""The account's rate limits, held once however many actors (and jobs, on one cluster) send.

Requests per minute and tokens per second are account-wide, so one `Budget` (a Ray actor)
owns the pacing and every worker leases slices of it through a local `LeasePacer`
(evalpipe.limits.lease):

    worker coroutines ──acquire(tokens)──► LeasePacer ──lease(n, tokens)──► Budget (per account)
                                               ▲                              │ two paced buckets
                                               └──── granted slice ◄──────────┘ 429 → estimate

Pacing: each limit is paced by an `aiolimiter.AsyncLimiter` holding half a second's capacity
(evalpipe.limits.pacing), at `headroom` (99.5%) of the configured limit, because the service
enforces each limit as a bucket of one second's capacity. A lease covers about 20 ms of the
rate, so a worker asks at most about 50 times a second.

Limits that change without notice: a 429 opens a measurement (from one 429 to another at least
a second and ten requests later, what was granted minus what was refused is the service's rate
now); the Budget then paces at 98% of it after a quarter-second pause, never cutting more than
half at once. The first 429 after 10 quiet seconds halves the pacing for a second meanwhile (a
flinch). After 10 quiet seconds it probes upward by 1% of the configured limits every 2 s (up
to 4% once well past the last estimate); a probe that hits the limit steps back and waits
longer. Senders on one key that cannot coordinate converge to equal shares: additive increase
by the same steps, multiplicative decrease, 429s falling on each in proportion to what it
sends. Jobs on one Ray cluster share one Budget (evalpipe.limits.account); jobs on one machine
reserve their grants on one schedule (`host`, evalpipe.limits.hostpace), and hosts that share
a tier on one schedule in it (evalpipe.tier.TierPace). The whole argument,
with the figures that chose each constant: docs/explanation/limits.md.

Token estimates are calibrated from `usage`: a fading ratio of billed to estimated tokens.
Time comes from `clock` (the event loop's clock in tests, which run on a virtual one).
"""

from __future__ import annotations

import math
import random
import time
from collections import deque
from collections.abc import Callable
from typing import Any

from evalpipe.limits.lease import Grant, Report
from evalpipe.limits.pacing import Pacing, Schedule, spaced

LEASE_SECONDS = 0.02  # one lease covers this much of the current rate
MIN_SHARE = 0.05  # never pace below this share of the configured limits
# -- after a 429 --
MEASURE_REQUESTS = 10  # a measurement spans about this many grants ...
MEASURE_MIN_SECONDS = 1.0  # ... and at least this long, from one 429 to another
STALE_SECONDS = 30.0  # a 429 with no other this long after it was jitter: forget it
MARGIN = 0.98  # pace at this share of the estimated service rate
CUT_FLOOR = 0.5  # one cut at most halves the pace ...
EARLY_REFUSALS = 5  # ... and this many 429s, half or more of the grants, halve it at once
PAUSE_SECONDS = 0.25  # no grant for this long after a cut: the service's bucket refills
EPISODE_SECONDS = 1.5  # after a cut, an episode: no unmeasured halving, no pace under half
FLINCH_QUIET = 10.0  # the first 429 after this many quiet seconds ...
FLINCH_SECONDS = 1.0  # ... halves the pacing for this long (FLINCH_SHARE), or until a cut
FLINCH_SHARE = 0.5
# -- probing back up --
PROBE_FIRST_WAIT = 10.0  # quiet seconds before the first probe above an estimate
PROBE_MAX_WAIT = 120.0  # the wait doubles, up to this, while probes hit the same ceiling
PROBE_STEP = 0.01  # the first probe step, a share of the configured limits ...
PROBE_MAX_STEP = 0.04  # ... doubling up to this: larger ones overshoot into other senders
PROBE_STEP_SECONDS = 2.0  # a step that stayed quiet this long doubles and is taken again
SAME_CEILING = 0.1  # estimates this close (relative) are taken to be the same limit
HISTORY_SECONDS = 35.0  # grants and refusals kept for measurements


class Budget:
    """The pacing authority of every worker that leases from it: a job's, or the jobs' of one
    account on one Ray cluster (evalpipe.limits.account). Runs as a Ray actor."""

    def __init__(
        self,
        rpm: float,
        tps: float,
        headroom: float = 0.995,
        clock: Callable[[], float] = time.monotonic,
        rng: random.Random | None = None,
        host: Schedule | None = None,
    ) -> None:
        self._clock = clock
        # The schedule jobs on this machine share (evalpipe.limits.hostpace), or the hosts of the
        # account through the shared tier (evalpipe.tier.TierPace)
        self._host = host
        now = clock()
        self._rps_limit = rpm / 60 * headroom
        self._tps_limit = tps * headroom
        self._rps = self._rps_limit  # the pace of requests; the bucket runs at spaced(it)
        self._tps = self._tps_limit
        self._pacing = Pacing(spaced(self._rps), self._tps, clock, rng or random.Random())
        if host is not None:
            host.set_limits(spaced(self._rps_limit), self._tps_limit)
        # Grants (time, requests, tokens) and refusals (time, count), for measurements.
        self._granted: deque[tuple[float, int, int]] = deque()
        self._refused: deque[tuple[float, int]] = deque()
        self._measuring: float | None = None  # when the current measurement began
        self._last_refusal = -math.inf
        self._flinch_until = -math.inf  # paced at FLINCH_SHARE of the pace until then
        self._quiet_until = -math.inf  # 429s before this belong to the rate before a cut
        self._halved = -math.inf  # the last halving without a measurement
        self._episode = (-math.inf, self._rps, self._tps)  # first cut of the last episode: pace
        self._ceiling: float | None = None  # the last estimate, as a share of the limits
        self._probe_wait = PROBE_FIRST_WAIT
        self._step = PROBE_STEP
        self._probing = False  # stepping up (after the first quiet while since a cut)
        self._before_step = (self._rps, self._tps)  # the pace before the last step up
        self._changed = now  # the last change of pace (cut or probe)
        self._estimated = 0.0  # fading sums of estimated and billed tokens, and of answers
        self._actual = 0.0
        self._answered = 0.0
        self._aborted: str | None = None
        counters = ("leases", "cuts", "probes", "flinches", "rate_limited", "accepted")
        self._stats = dict.fromkeys(counters, 0)

    # -- pacing ------------------------------------------------------------------------------

    async def lease(self, requests: int, tokens: int, report: Report | None = None) -> Grant:
        """Wait until `requests` and `tokens` fit the limits, then grant them."""
        if report is not None:
            self._absorb(report)
        # At most one bucket's worth at once; a larger request gathers its tokens over leases.
        request_capacity, token_capacity = self._pacing.capacities()
        requests = max(0, min(requests, max(1, int(request_capacity))))
        tokens = max(0, min(tokens, max(1, int(token_capacity))))
        if self._aborted:
            return self._grant(0, 0)
        self._control(self._clock())
        go = await self._take(requests, tokens)
        if self._aborted:
            return self._grant(0, 0)
        self._granted.append((go, requests, tokens))
        self._stats["leases"] += 1
        return self._grant(requests, tokens)

    async def _take(self, requests: int, tokens: int) -> float:
        """The pacing's grant, then its slot on the machine's schedule (`host`), where other
        jobs may have taken the next ones: the time it goes. A cut while it waited there
        takes it again (the cut's pause and new pace hold for it too)."""
        while True:
            go = await self._pacing.take_on(self._host, requests, tokens)
            if go is not None:
                return go
            if self._aborted:
                return self._clock()

    def _token_capacity(self) -> int:
        # The service refuses outright a request larger than its whole token bucket.
        return max(1, int(self._tps_limit))

    def token_factor(self) -> float:
        """Billed tokens per estimated token, measured from `usage` (1.0 until then)."""
        return max(0.1, self._actual / self._estimated if self._estimated > 0 else 1.0)

    def _grant(self, requests: int, tokens: int) -> Grant:
        # A lease covers LEASE_SECONDS of whichever limit binds at the tokens requests carry.
        per_request = self._actual / self._answered if self._answered > 0 else 0.0
        rate = spaced(self._rps)
        if per_request > 0:
            rate = min(rate, self._tps / per_request)
        lease = max(1, int(rate * LEASE_SECONDS))
        capacity = self._token_capacity()
        return Grant(requests, tokens, self.token_factor(), lease, capacity, self._aborted)

    # -- feedback ----------------------------------------------------------------------------

    def report(self, report: Report) -> None:
        """Feedback outside a lease (a 429 reaches the Budget at once)."""
        self._absorb(report)

    def _absorb(self, report: Report) -> None:
        now = self._clock()
        self._stats["accepted"] += report.accepted
        self._stats["rate_limited"] += report.rate_limited
        # Calibration: an exponentially fading ratio of billed to estimated tokens.
        self._estimated = self._estimated * 0.98 + report.estimated_tokens
        self._actual = self._actual * 0.98 + report.actual_tokens
        self._answered = self._answered * 0.98 + report.accepted
        if report.rate_limited:
            if now - self._last_refusal >= FLINCH_QUIET:
                self._flinch_until = now + FLINCH_SECONDS
                self._pace_pacing(now)
                self._stats["flinches"] += 1
            self._last_refusal = now
            if self._probing:  # the last step was one too many: take it back, wait longer
                self._probing = False
                self._set(*self._before_step, now)
                self._probe_wait = min(PROBE_MAX_WAIT, self._probe_wait * 2)
            self._refused.append((now, report.rate_limited))
            if self._measuring is not None:
                self._measure(now)
            elif now >= self._quiet_until:
                self._measuring = now
        self._control(now)

    def _control(self, now: float) -> None:
        if self._flinch_until != -math.inf and now >= self._flinch_until:
            self._flinch_until = -math.inf
            self._pace_pacing(now)
        while self._granted and self._granted[0][0] < now - HISTORY_SECONDS:
            self._granted.popleft()
        while self._refused and self._refused[0][0] < now - HISTORY_SECONDS:
            self._refused.popleft()
        if self._measuring is not None and now - self._measuring > STALE_SECONDS:
            self._measuring = None  # one lone 429 long ago: jitter, not a lower limit
        # A 429 seen alone a while ago may still wait for its second; probing need not.
        if self._measuring is None or now - self._measuring > PROBE_FIRST_WAIT:
            self._probe(now)

    def _measure(self, now: float) -> None:
        """At a 429 during a measurement: once it spans enough, cut to what was accepted.

        The window runs from one refusal to another, moments when the service's bucket was
        empty, so what it accepted in between is its rate times the span, give or take one
        request. Grants count from the first refusal on, refusals after it: both ends of the
        window leave out what was sent just before them, so the two ends' offsets cancel.
        """
        start = self._measuring
        assert start is not None
        granted = sum(n for t, n, _ in self._granted if t >= start)
        tokens = sum(k for t, _, k in self._granted if t >= start)
        refused = sum(n for t, n in self._refused if t > start)
        share = max(0.0, granted - refused) / granted if granted else 0.0
        # Half or more refused: the cut is a halving (CUT_FLOOR) whatever a longer window
        # would measure, so it need not wait for one.
        heavy = (
            refused + 1 >= EARLY_REFUSALS
            and share <= CUT_FLOOR
            and now - self._halved > EPISODE_SECONDS  # the first may still be taking effect
        )
        probing = self._ceiling is not None and self._share() >= self._ceiling
        # A probe's excess needs no precise measure: the cut goes back to the last estimate.
        wanted = MEASURE_MIN_SECONDS if probing else MEASURE_REQUESTS / self.rps
        span = now - start
        if not heavy and span < max(MEASURE_MIN_SECONDS, wanted):
            return
        self._measuring = None
        factor = CUT_FLOOR if heavy else share * MARGIN
        if heavy:
            self._halved = now
        self._cut(now, granted / span, tokens / span, factor, probing)

    def _cut(
        self, now: float, seen_rps: float, seen_tps: float, factor: float, probing: bool
    ) -> None:
        """Pace at `factor` of what was sent in the window, never less than half the pace."""
        self._flinch_until = -math.inf  # the measured cut replaces the provisional one
        rps, tps = self.rps, self.tps
        # Cut the limit we were using most of (both when near each other): by shares, not by
        # a threshold, as a flinch in the window halved what was sent of both.
        used_rps, used_tps = seen_rps / rps, seen_tps / tps
        cut_rps = used_rps >= 0.8 * used_tps
        cut_tps = used_tps >= 0.8 * used_rps
        new_rps = min(rps, seen_rps * factor) if cut_rps else rps
        new_tps = min(tps, seen_tps * factor) if cut_tps else tps
        ceiling = self._ceiling
        if probing and ceiling is not None:
            # A probe above the last estimate ran into the limit: back to that estimate. A
            # small excess measures poorly (the service's bucket hides it, retries muddle it);
            # if the limit did drop further, the next 429 measures again from there.
            new_rps = max(new_rps, min(rps, ceiling * MARGIN * self._rps_limit))
            new_tps = max(new_tps, min(tps, ceiling * MARGIN * self._tps_limit))
        # One window's share can be far below what we get from then on when others send on
        # the key (a newcomer's first second): within an episode never below half the pace
        # it began with; a limit that fell further is cut again in the next episode.
        if now - self._episode[0] > EPISODE_SECONDS:
            self._episode = (now, rps, tps)
        _, base_rps, base_tps = self._episode
        self._set(max(new_rps, CUT_FLOOR * base_rps), max(new_tps, CUT_FLOOR * base_tps), now)
        estimate = self._share() / MARGIN
        # Only a lower limit is worth looking for soon; the same one (or a higher share of it,
        # with others on the key) is probed ever more rarely.
        lower = ceiling is None or estimate < ceiling * (1 - SAME_CEILING)
        self._probe_wait = PROBE_FIRST_WAIT if lower else min(PROBE_MAX_WAIT, self._probe_wait * 2)
        self._ceiling = estimate
        self._step = PROBE_STEP
        self._probing = False
        # We emptied the service's bucket: let it refill before sending again.
        self._pacing.hold(now + PAUSE_SECONDS)
        self._quiet_until = now + PAUSE_SECONDS
        self._stats["cuts"] += 1

    def _probe(self, now: float) -> None:
        """Step up after a quiet while, by a share of the configured limits (the same for
        every sender on the key, whatever its pace: what makes senders that cannot coordinate
        converge to equal shares). Near the last estimate, in small steps: the service's
        bucket hides a small excess for a while, so a quiet step proves little. Well past it
        the limit must have risen: the steps double."""
        if self.rps >= self._rps_limit and self.tps >= self._tps_limit:
            return
        wait = PROBE_STEP_SECONDS if self._probing else self._probe_wait
        if now - self._changed < wait:
            return
        near = self._ceiling is not None and self._share() < self._ceiling * (1 + SAME_CEILING)
        step = PROBE_STEP if near else self._step
        self._before_step = (self.rps, self.tps)
        self._set(self.rps + step * self._rps_limit, self.tps + step * self._tps_limit, now)
        self._probing = True
        if not near:
            self._step = min(PROBE_MAX_STEP, self._step * 2)
        self._stats["probes"] += 1

    def _set(self, rps: float, tps: float, now: float) -> None:
        self._rps = min(self._rps_limit, max(self._rps_limit * MIN_SHARE, rps))
        self._tps = min(self._tps_limit, max(self._tps_limit * MIN_SHARE, tps))
        self._pace_pacing(now)
        self._changed = now

    def _pace_pacing(self, now: float) -> None:
        """The pacing's rates: the pace, or a share of it while flinching."""
        share = FLINCH_SHARE if now < self._flinch_until else 1.0
        self._pacing.set_rates(spaced(self._rps * share), self._tps * share)

    def _share(self) -> float:
        """The pace as a share of the configured limits (of the one cut deeper)."""
        return min(self.rps / self._rps_limit, self.tps / self._tps_limit)

    @property
    def rps(self) -> float:
        return self._rps

    @property
    def tps(self) -> float:
        return self._tps

    # -- control -----------------------------------------------------------------------------

    def abort(self, reason: str) -> None:
        """Stop granting: every worker's next acquire fails (a refused key ends the job)."""
        self._aborted = reason

    def reserve_on(self, host: Schedule | None) -> None:
        """Reserve every grant on `host` from now on (a job brought a shared tier)."""
        self._host = host
        if host is not None:
            host.set_limits(spaced(self._rps_limit), self._tps_limit)

    def set_limits(self, rpm: float, tps: float, headroom: float) -> None:
        """New configured limits (jobs that share an account: the lowest holds). A pace above
        them comes down at once; a pace at the old limits, never cut, follows them; otherwise
        probing climbs toward them."""
        rps_limit, tps_limit = rpm / 60 * headroom, tps * headroom
        if self._host is not None:
            self._host.set_limits(spaced(rps_limit), tps_limit)
        if self._ceiling is not None:  # a share of the limits: keep the rate it stands for
            self._ceiling *= self._rps_limit / rps_limit
        at_limits = self._ceiling is None and self._share() >= 1
        self._rps_limit, self._tps_limit = rps_limit, tps_limit
        if at_limits:
            self._set(rps_limit, tps_limit, self._clock())
        else:
            self._set(self.rps, self.tps, self._clock())

    def stats(self) -> dict[str, Any]:
        return {
            **self._stats,
            "rps": self.rps,
            "tps": self.tps,
            "paced_rps": self._pacing.rates()[0],  # the pace, or less while flinching
            "ceiling": self._ceiling,
            "measuring": self._measuring is not None,
            "token_factor": self.token_factor(),
        }
