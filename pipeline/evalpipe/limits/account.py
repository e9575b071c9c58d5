"""One Budget per account on a Ray cluster: jobs that use one key share its limits.

The limits (requests per minute, tokens per second) belong to the account, not to a job. Jobs
that each paced with a Budget of their own, on one key, measured their own share after a 429
and held it, so together they used only 84-94% of the limit on one cluster. Here the jobs
of one cluster lease from one Budget, whose FIFO leases give each job a share that follows its
demand: a job with little left to send asks for little.

That Budget is a named, detached Ray actor in the `evalpipe` namespace, made by the first job
and found by the others (`get_if_exists`). Its name is a hash of the base URL and the key, never
the key: actor names are listed to anyone on the cluster. It lives on the driver's node (a hard
node affinity), so it never dies with a worker node, and it ends itself once no job has called
it for `idle_seconds`. A running job calls it every few seconds whatever it sends
(`keepalive`): leases alone can be minutes apart, as one lease covers a while of the rate (all
of a job under very high limits), workers may wait out retries and a stretch of rows may all
come from the answer cache. Jobs register their configured limits; the lowest of the jobs that
still run holds, and the job is told so (a warning to print). A job killed with -9 never says it
is done: once its keepalive has been silent for `STALE_SECONDS` its limits no longer hold (a
rerun with higher limits is not held to the dead run's), and they hold again if it calls again
(a driver that was only stopped). The key itself never reaches the actor.

Jobs on one machine that each run a Ray of their own meet in the account's schedule file
instead (evalpipe.limits.hostpace): the Budget, on the driver's node, reserves every grant on it.
With a shared tier (`shared.url`), every host's Budget reserves on the account's schedule in the
tier instead (evalpipe.tier.TierPace), the file standing in while the tier is away.

A Budget can die under running jobs (an operator cleaning up actors, its process killed). Each
job's driver notices it by its keepalive and calls `account_budget` again: the first makes the
replacement, the others find and join it. A job that cannot have one within a bounded wait
paces on a Budget of its own (`job_budget`), with a warning: it no longer counts the others.
"""

from __future__ import annotations

import asyncio
import hashlib
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from evalpipe.limits.budget import Budget
from evalpipe.limits.hostpace import HostPace, host_file
from evalpipe.limits.lease import Grant, Report
from evalpipe.limits.pacing import Schedule
from evalpipe.limits.placement import driver_node, on_node
from evalpipe.tier import TierAddress

NAMESPACE = "evalpipe"
IDLE_SECONDS = 300.0  # an account Budget no job has called this long ends itself
STALE_SECONDS = 15.0  # a job whose keepalive is silent this long no longer holds its limits
FIND_ATTEMPTS = 5  # a Budget found dead is looked up (or made) again this many times
_Limits = tuple[float, float, float]  # requests per minute, tokens per second, headroom


def account_name(base_url: str, key: str) -> str:
    """The account Budget's actor name: a digest of base URL and key, never the key."""
    material = f"evalpipe-account\0{base_url.rstrip('/')}\0{key}".encode()
    return f"evalpipe-budget-{hashlib.sha256(material).hexdigest()[:32]}"


class AccountBudget(Budget):
    """A Budget that several jobs share: registration, the lowest limits, an idle end."""

    def __init__(
        self,
        rpm: float,
        tps: float,
        headroom: float,
        idle_seconds: float = IDLE_SECONDS,
        clock: Callable[[], float] = time.monotonic,
        schedule: str | None = None,
        tier: TierAddress | None = None,
    ) -> None:
        file = HostPace.open(Path(schedule)) if schedule else None
        super().__init__(rpm, tps, headroom, clock, host=shared_schedule(tier, file))
        self._file, self._on_tier = file, tier is not None
        self._unshared = schedule if schedule and file is None and tier is None else None
        self._jobs: dict[str, _Limits] = {}
        self._seen: dict[str, float] = {}  # each job's last keepalive (or registration)
        self._held: _Limits = (rpm, tps, headroom)
        self._idle_seconds = idle_seconds
        self._used = clock()
        self._watchdog: asyncio.Task[None] | None = None

    async def register(
        self, job: str, rpm: float, tps: float, headroom: float, tier: TierAddress | None = None
    ) -> list[str]:
        """Add a job with its configured limits; warnings for it when they differ from the
        limits held (the lowest of the registered jobs' holds). A job with a shared `tier`
        that this Budget does not reserve on yet moves it there (the Budget was made by a job
        without one, on this cluster)."""
        self._touch()
        if tier is not None and not self._on_tier:
            self._on_tier = True
            self.reserve_on(shared_schedule(tier, self._file))
        unreached = await self._tier_unreached(tier) if tier is not None else []
        if self._watchdog is None:  # here, on the actor's event loop
            self._watchdog = asyncio.get_running_loop().create_task(self._end_when_idle())
        alone = not self._running()  # no other job runs: no limits of theirs to warn of
        self._jobs[job] = (rpm, tps, headroom)
        self._seen[job] = self._clock()
        before = (rpm, tps, headroom) if alone else self._held
        self._hold_lowest()
        self._aborted = None  # a job registers after its start-up probe took the key
        warnings = _warnings((rpm, tps, headroom), before, self._held) + unreached
        if self._unshared:
            warnings.append(
                f"cannot open {self._unshared}: jobs on other Ray clusters on this machine "
                "will not share this account's pace with this one"
            )
        return warnings

    def unregister(self, job: str, end_if_last: bool = False) -> bool:
        """A job is done: the lowest limits of the jobs still registered hold. With
        `end_if_last` (an interrupted call leaves nothing behind) a Budget no other job uses
        ends now instead of idling; returns whether it ends."""
        self._seen.pop(job, None)
        if self._jobs.pop(job, None) is not None and self._jobs:
            self._hold_lowest()
        if end_if_last and not self._jobs:
            self._end()
            return True
        return False

    async def lease(self, requests: int, tokens: int, report: Report | None = None) -> Grant:
        self._touch()
        return await super().lease(requests, tokens, report)

    def report(self, report: Report) -> None:
        self._touch()
        super().report(report)

    def keepalive(self, job: str | None = None) -> None:
        """A running job's call every few seconds: the Budget stays while it runs (a job
        killed with -9 stops calling, so it still ends), and so do `job`'s limits."""
        self._touch()
        if job in self._jobs:
            self._seen[job] = self._clock()
        self._hold_lowest()

    def stats(self) -> dict[str, Any]:
        import ray

        return {
            **super().stats(),
            "jobs": len(self._jobs),
            "limits": self._held,
            "idle_for": self._clock() - self._used,  # seconds since a job last called
            "node": ray.get_runtime_context().get_node_id(),
        }

    async def _tier_unreached(self, tier: TierAddress) -> list[str]:
        """A warning when this actor cannot reserve on the shared tier (it is on the driver's
        node, in the environment Ray runs in there, which may lack the password)."""
        from evalpipe.tier import TierPace

        host = self._host
        if not isinstance(host, TierPace) or (lost := await host.unreachable()) is None:
            return []
        return [
            f"shared.url: the account's budget actor cannot reach the tier ({lost}): this "
            f"job's pace is not shared with other hosts; set ${tier.password_env} in the "
            "environment Ray runs in on the driver's node"
        ]

    def _running(self) -> list[_Limits]:
        """The limits of the registered jobs heard of within `STALE_SECONDS`."""
        now = self._clock()
        return [limits for job, limits in self._jobs.items()
                if now - self._seen[job] <= STALE_SECONDS]  # fmt: skip

    def _hold_lowest(self) -> None:
        """The lowest limits of the jobs still running (of them all when none is heard of)."""
        if not self._jobs:
            return
        running = self._running() or list(self._jobs.values())
        held = tuple(min(limits[i] for limits in running) for i in range(3))
        if held != self._held:
            self._held = (held[0], held[1], held[2])
            self.set_limits(*self._held)

    def _touch(self) -> None:
        self._used = self._clock()

    async def _end_when_idle(self) -> None:
        while (idle := self._clock() - self._used) < self._idle_seconds:
            await asyncio.sleep(self._idle_seconds - idle)
        self._end()

    def _end(self) -> None:
        import ray

        # Queued behind the calls already taken: they finish; later ones find no actor.
        ray.get_runtime_context().current_actor.__ray_terminate__.remote()


def shared_schedule(tier: TierAddress | None, file: HostPace | None) -> Schedule | None:
    """The account's schedule in the tier (the host's `file` standing in while it is away), or
    the host's file alone when there is no tier."""
    if tier is None:
        return file
    from evalpipe.tier import TierPace

    return TierPace(tier, fallback=file)


def _warnings(asked: _Limits, before: _Limits, held: _Limits) -> list[str]:
    names = ("limits.requests_per_minute", "limits.tokens_per_second", "limits.headroom")
    out = []
    for name, mine, was, now in zip(names, asked, before, held, strict=True):
        if mine > now:
            out.append(
                f"{name}: another job on this account set {now:g}; the lowest holds, so this "
                f"job shares {now:g}, not {mine:g}"
            )
        elif now < was:
            out.append(
                f"{name}: {mine:g} is lower than the {was:g} other jobs on this account set; "
                f"it now holds for all of them"
            )
    return out


def account_budget(
    base_url: str,
    key: str,
    job: str,
    limits: _Limits,
    idle_seconds: float = IDLE_SECONDS,
    wait: float | None = None,
    tier: TierAddress | None = None,
) -> tuple[Any, list[str]]:
    """The account's Budget actor on this Ray cluster (made if none runs), with `job`
    registered with its `limits` (requests per minute, tokens per second, headroom):
    (handle, warnings for the job to show). Call from the driver, after `ray.init`; it waits
    for the actor's answer (its start, when this call makes it), at most `wait` seconds
    (then ray's GetTimeoutError). `tier`: the shared tier the Budget reserves on (the
    address only: the actor reads the password from its own environment)."""
    import ray
    from ray.exceptions import RayActorError

    name = account_name(base_url, key)
    schedule = str(host_file(name))  # on this node, where the Budget runs
    attempt = 0
    while True:
        attempt += 1
        handle = _find_or_make(name, limits, idle_seconds, schedule, tier)
        try:
            # Its answer, not `get_if_exists`, says it lives: a handle found by name may be
            # of an actor that ended (idle, killed) and whose name is not yet released.
            registered = handle.register.remote(job, *limits, tier=tier)
            warnings: list[str] = ray.get(registered, timeout=wait)
        except RayActorError:
            if attempt == FIND_ATTEMPTS:
                raise
            time.sleep(0.2 * attempt)  # the dead actor's name is released meanwhile
            continue
        return handle, warnings


def job_budget(job: str, limits: _Limits, tier: TierAddress | None = None) -> Any:
    """A Budget of this job's own (unnamed, ending with the driver), with `job` registered:
    the fallback when the account's cannot be had. Other jobs on the key are not counted,
    unless through the shared `tier`."""
    import ray

    actor: Any = ray.remote(AccountBudget)
    handle = actor.options(num_cpus=0).remote(*limits, tier=tier)
    handle.register.remote(job, *limits)
    return handle


def _find_or_make(
    name: str,
    limits: _Limits,
    idle_seconds: float,
    schedule: str,
    tier: TierAddress | None = None,
) -> Any:
    import ray

    # On the driver's node: a worker node may go away, and with it every job's Budget.
    here = on_node(driver_node())
    actor: Any = ray.remote(AccountBudget)
    return actor.options(
        name=name,
        namespace=NAMESPACE,
        lifetime="detached",
        get_if_exists=True,
        num_cpus=0,
        scheduling_strategy=here,
    ).remote(*limits, idle_seconds, schedule=schedule, tier=tier)
