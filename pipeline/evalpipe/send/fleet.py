"""The job's Ray actors: its Workers and the account's Budget, placed so a lost node loses nothing.

The Budget (the account's pacing, shared by the jobs of one key on one cluster:
`evalpipe.limits.account`) runs on the driver's node, so it lives as long as the driver; each Worker
runs on a live node chosen to spread them over the cluster, and a replacement for a worker that died
never goes to a node the cluster reports dead (`evalpipe.limits.placement`). How big a chunk of jobs
is and how many requests a worker keeps in flight follow from the job's share of the rate (`sizes`).

A worker costs about a second to start (a process, its imports). When a job finished and Ray
stays up after it (a notebook's next `ep.score`, a test session, a cluster), its workers stay
idle for the driver's next job, which configures them again (`Idle`): that job's first request
then leaves without waiting for new processes. A stopped or failed job's workers end. An
interrupted one (the Python API's interrupt: `interrupted`) leaves no actor of this driver
behind: its workers, the idle ones and the account's Budget (unless another job uses it) end,
and `close` returns once Ray reports them gone, so the next call starts on a clean slate.

A Budget found by name is trusted only once it answers (`evalpipe.limits.account`); one that
does not within `REPLACE_SECONDS` gives way to a Budget of the job's own, with a warning.

The Budget is the one actor every worker leases from, so its death would stall or end the job.
The driver's keepalive notices it (within `KEEPALIVE_SECONDS`): the fleet gets the account's
replacement (`account_budget` again; another job may have made it already), or, failing that
within `REPLACE_SECONDS`, a Budget of the job's own, and hands it to every worker (`rebind`),
whose requests waited meanwhile (`evalpipe.limits.lease`). One warning says which.
"""

from __future__ import annotations

import contextlib
import math
import secrets
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from evalpipe.config import JobConfig, api_key_in
from evalpipe.errors import first_line
from evalpipe.limits import (
    Report,
    account_budget,
    alive_nodes,
    choose_node,
    driver_node,
    job_budget,
    on_node,
)
from evalpipe.planning import Answered
from evalpipe.send.actors import Worker, WorkerSettings
from evalpipe.tier import TierAddress

IDLE_WORKERS = 8  # at most this many finished jobs' workers wait for the driver's next job
KEEPALIVE_SECONDS = 1.0  # how often a running job tells the account's Budget it still runs
GONE_SECONDS = 3.0  # an interrupted call waits this long for Ray to report its actors gone
REPLACE_SECONDS = 30.0  # the longest the driver waits for a replacement of a dead Budget
_Limits = tuple[float, float, float]
CHUNK_SECONDS = 0.25  # a chunk holds about this much of a worker's share of the rate
LATENCY_COVER = 4.0  # in-flight requests cover this many seconds of service latency


def _account_budget(
    url: str, key: str, job: str, limits: _Limits, tier: TierAddress | None = None
) -> tuple[Any, list[str]]:
    """The account's Budget, or, when none answers within REPLACE_SECONDS (one found by name
    may be dead or hung), a Budget of the job's own, with a warning. `tier`: the shared tier
    the Budget reserves on."""
    from ray.exceptions import GetTimeoutError, RayActorError

    try:
        return account_budget(url, key, job, limits, wait=REPLACE_SECONDS, tier=tier)
    except (RayActorError, GetTimeoutError) as exc:
        warning = (
            f"the account's budget actor does not answer ({first_line(exc)}); this job paces on "
            "a budget of its own, which does not count other jobs on this key"
        )
        return job_budget(job, limits, tier), [warning]


def sizes(config: JobConfig) -> tuple[int, int, int]:
    """(jobs per chunk, requests in flight per actor, chunks outstanding per actor)."""
    actors = config.concurrency.actors
    share = config.limits.requests_per_minute / 60 / actors
    chunk = max(1, min(256, int(share * CHUNK_SECONDS)))
    in_flight = config.concurrency.max_in_flight or max(
        32, min(512, math.ceil(share * LATENCY_COVER))
    )
    return chunk, in_flight, math.ceil(in_flight / chunk) + 2


class Idle:
    """Workers that finished jobs left running, for the next job of this driver on this Ray
    (a Ray started again, or another driver, has workers of its own: those are forgotten)."""

    def __init__(self) -> None:
        self._ray: tuple[str, str] = ("", "")
        self._workers: list[tuple[Any, str]] = []  # (handle, node)

    def take(self, n: int, alive: set[str], configure: Any) -> list[tuple[Any, str]]:
        """Up to `n` idle workers on live nodes, each configured for its new job by
        `configure(handle)` (an ObjectRef); one that does not answer is ended."""
        self._forget_if_another_ray()
        taken: list[tuple[Any, str]] = []
        while self._workers and len(taken) < n:
            worker, node = self._workers.pop()
            if node in alive and _answers(configure(worker)):
                taken.append((worker, node))
            else:
                _end(worker)
        return taken

    def end_all(self) -> list[Any]:
        """End every idle worker (an interrupt leaves nothing behind); returns their handles."""
        self._forget_if_another_ray()
        ended = [worker for worker, _ in self._workers]
        self._workers = []
        for worker in ended:
            _end(worker)
        return ended

    def keep(self, worker: Any, node: str | None) -> bool:
        """Keep `worker` for the next job; False (end it) when enough wait already."""
        self._forget_if_another_ray()
        if node is None or len(self._workers) >= IDLE_WORKERS:
            return False
        self._workers.append((worker, node))
        return True

    def _forget_if_another_ray(self) -> None:
        import ray

        context = ray.get_runtime_context()
        here = (context.get_job_id(), context.get_node_id())
        if here != self._ray:
            self._ray, self._workers = here, []


IDLE = Idle()  # the driver's: one per process


def _answers(call: Any, timeout: float = 5.0) -> bool:
    import ray
    from ray.exceptions import RayError

    try:
        ray.get(call, timeout=timeout)
    except RayError:  # dead, failed, or not done in time
        return False
    return True


def _end(worker: Any) -> None:
    import ray

    with contextlib.suppress(Exception):  # gone already
        ray.kill(worker)


def _gone(actors: list[Any], timeout: float) -> None:
    """Wait (at most `timeout`) until Ray reports each actor ended: a call to it fails once
    the cluster knows, so a caller listing actors afterwards no longer finds them alive."""
    import ray

    deadline = time.monotonic() + timeout
    while actors and time.monotonic() < deadline:
        calls = [actor.__ray_ready__.remote() for actor in actors]
        ray.wait(calls, num_returns=len(calls), timeout=max(0.0, deadline - time.monotonic()))
        actors = [actor for actor, call in zip(actors, calls, strict=True) if _answers(call, 0)]
        if actors:  # it answered: the end has not reached it yet
            time.sleep(0.05)


@dataclass
class Fleet:
    """The job's Ray actors: `actors` Workers and the account's Budget, started as soon as Ray is
    up so their imports overlap the driver's own start-up (the service probe, the sink, the
    scans). The Budget runs on the driver's node (the account's first job makes it); each
    Worker on a live node chosen to spread them, and a replacement never on a node the cluster
    reports dead (`evalpipe.limits.placement`)."""

    settings: WorkerSettings
    budget: Any
    workers: list[Any]
    name: str
    spawned: int = 0
    driver: str = ""  # the driver's node
    placed: list[tuple[Any, str]] = field(default_factory=list)  # every worker, and its node
    warnings: list[str] = field(default_factory=list)  # the account's Budget's, for the log
    reusable: bool = False  # the job finished: its workers may serve the driver's next job
    interrupted: bool = False  # the Python API's interrupt: no actor of this driver stays
    limits: _Limits = (0.0, 0.0, 0.0)  # what the job registers with the Budget
    warn: Callable[[str], None] = field(default=lambda message: None)  # a Budget replaced ...
    tier: TierAddress | None = None  # the shared tier the Budget reserves on (evalpipe.tier)
    _keepalive_due: float = 0.0
    _alive: Any = None  # the last keepalive, not yet answered

    @classmethod
    def start(
        cls,
        config: JobConfig,
        url: str,
        questions: dict[str, Any],
        question_tokens: Mapping[str, int],
        warn: Callable[[str], None] = lambda message: None,
        *,
        tier: TierAddress | None = None,
    ) -> Fleet:
        """The job's workers and its account's Budget, which reserves on the shared `tier`
        when the job has one (as the session resolved it: `evalpipe.planning.PreparedJob.tier`)."""
        limits = config.limits
        name = f"evalpipe-{secrets.token_hex(4)}"  # named, so operators can find its actors
        # The account's Budget, shared by every job on this cluster that uses its key
        # (`evalpipe.limits.account`): it runs on the driver's node.
        registered = (limits.requests_per_minute, limits.tokens_per_second, limits.headroom)
        key = api_key_in(config.service.api_key_env)
        budget, warnings = _account_budget(url, key, name, registered, tier)
        _, in_flight, _ = sizes(config)
        settings = WorkerSettings(
            base_url=url,
            api_key_env=config.service.api_key_env,
            model=config.model,
            questions=questions,
            question_tokens=question_tokens,
            policy=config.retries.policy(),
            max_in_flight=in_flight,
            transport=config.service.transport,
            max_response_bytes=config.service.max_response_bytes,
        )
        fleet = cls(
            settings, budget, [], name, driver=driver_node(), warnings=warnings,
            limits=registered, warn=warn, tier=tier,
        )  # fmt: skip
        wanted = config.concurrency.actors
        reused = IDLE.take(wanted, set(alive_nodes()), fleet._configure)
        fleet.placed.extend(reused)
        fleet.workers.extend(worker for worker, _ in reused)
        while len(fleet.workers) < wanted:
            fleet.workers.append(fleet._place())
        for worker in fleet.workers:  # while the driver's start-up goes on (a measurement)
            worker.warm.remote()
        return fleet

    def _configure(self, worker: Any) -> Any:
        return worker.configure.remote(self.settings, self.budget, self.name)

    def spawn(self) -> Any:
        """A replacement for a worker that died, on a live node."""
        return self._place()

    def _place(self) -> Any:
        import ray

        homes = [self._home(worker) for worker in self.workers]
        node = choose_node(alive_nodes(), homes, self.driver)
        self.spawned += 1
        worker = (
            ray.remote(num_cpus=0)(Worker)
            .options(
                max_concurrency=10_000,
                name=f"{self.name}-worker-{self.spawned}",
                scheduling_strategy=on_node(node),
            )
            .remote(self.settings, self.budget, self.name)
        )
        self.placed.append((worker, node))
        return worker

    def _home(self, worker: Any) -> str | None:
        return next((node for handle, node in self.placed if handle is worker), None)

    def keepalive(self) -> None:
        """Tell the account's Budget this job still runs, at most every KEEPALIVE_SECONDS:
        its leases alone can be minutes apart, and it ends when no job has called it for a
        while (`evalpipe.limits.account`). The answer is looked at on a later call (this
        never waits): a Budget that died is replaced."""
        import ray
        from ray.exceptions import RayActorError

        if self._alive is not None and ray.wait([self._alive], timeout=0)[0]:
            answer, self._alive = self._alive, None
            try:
                ray.get(answer)
            except RayActorError as exc:
                self.replace_budget(exc)
        now = time.monotonic()
        if self._alive is None and now >= self._keepalive_due:
            self._alive = self.budget.keepalive.remote(self.name)
            self._keepalive_due = now + KEEPALIVE_SECONDS

    def replace_budget(self, cause: BaseException) -> None:
        """The Budget died: the account's replacement (or, failing it, one of the job's own)
        to every worker, and one warning."""
        from ray.exceptions import GetTimeoutError, RayActorError

        lost = f"the account's budget actor died ({type(cause).__name__})"
        key = api_key_in(self.settings.api_key_env)
        try:
            self.budget, warnings = account_budget(
                self.settings.base_url, key, self.name, self.limits, wait=REPLACE_SECONDS,
                tier=self.tier,
            )  # fmt: skip
            self.warn(f"{lost}; a new one paces this job and the account's others from here")
        except (RayActorError, GetTimeoutError) as exc:
            self.budget, warnings = job_budget(self.name, self.limits, self.tier), []
            self.warn(
                f"{lost} and cannot be replaced ({first_line(exc)}); this job paces on a "
                "budget of its own, which does not count other jobs on this key"
            )
        for worker in self.workers:
            worker.rebind.remote(self.budget)
        for warning in warnings:
            self.warn(warning)

    def paced_from(self, usage: Answered) -> None:
        """Requests the account's service answered before this fleet sent any (the packing
        measurement's, like the run's): the Budget calibrates its token pace with them, as
        with its workers' reports."""
        self.budget.report.remote(Report(usage.requests, 0, usage.estimated, usage.billed))

    def placement(self) -> tuple[int, int]:
        """(workers started, replacements included; nodes they ran on)."""
        return len(self.placed), len({node for _, node in self.placed})

    def close(self, wait: float = 2.0) -> None:
        """Close the workers' connection pools (briefly waited for), then keep the workers
        for the driver's next job (`reusable`: the job finished) or end them. Interrupted,
        every worker of this driver ends at once, and the Budget too if no other job uses it."""
        import ray

        if self.interrupted:
            self._end_everything(wait)
            return
        closing = [worker.close.remote() for worker in self.workers]
        ray.wait(closing, num_returns=len(closing), timeout=wait)
        for worker, call in zip(self.workers, closing, strict=True):
            kept = self.reusable and _answers(call, 0) and IDLE.keep(worker, self._home(worker))
            if not kept:
                _end(worker)
        self.budget.unregister.remote(self.name)  # the account's: other jobs may share it

    def _end_everything(self, wait: float) -> None:
        import ray
        from ray.exceptions import RayError

        ended = [worker for worker, _ in self.placed] + IDLE.end_all()
        for worker in ended:
            _end(worker)
        try:  # the account's Budget ends too, unless another job still uses it
            if ray.get(self.budget.unregister.remote(self.name, True), timeout=wait):
                _end(self.budget)  # at once: its own end waits for the leases it holds
                ended.append(self.budget)
        except RayError:  # dead already, or not answering: nothing of ours to wait for
            pass
        _gone(ended, GONE_SECONDS)
