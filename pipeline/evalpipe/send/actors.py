"""The Ray actors that send the requests: one asyncio loop, one HTTP client, many in flight.

Each Worker receives chunks of planned jobs from the driver and streams back a JobResult (plain
data) per job as soon as it is done: `process` is a Ray streaming generator that yields the
results finished within `YIELD_SECONDS` of each other, so a finished row reaches the driver's
journal within about 0.1 s of its answer, not when its whole chunk is done (a kill then re-pays
only what was in flight). `stop` makes a worker send nothing more: requests not yet sent end as
`abandoned` results (their rows stay unwritten, for the next run), requests in flight finish.

A request the service refuses as over its context limit (by its own token count, which the job
cannot see) is sent again as two requests of about half its questions each
(`evalpipe.planning.split_refused`, the rule the plan splits by), down to one question per
request; only a lone question refused for length ends its row (`context_limit`).

A chunk may hold packs of jobs (`evalpipe.send.packs.Pack`: several rows in one request, when
the job packs); a pack's results come back one per job, as if each had been sent alone.

A Worker never sees the API key as an argument: it reads the variable the config names from
its own environment (a local Ray inherits the driver's; on a cluster the variable must be set
on the nodes). Pacing is the Budget's; retries are the client's; this module only fans the
requests of a chunk out under a cap on requests in flight and folds the answers of a split row
back together.
"""

from __future__ import annotations

import asyncio
import os
import threading
import time
from asyncio import FIRST_COMPLETED
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, replace
from typing import Any

from evalpipe.config import DEFAULT_KIND, RetryPolicy, TransportKind, api_key_in
from evalpipe.contract import validate_questions
from evalpipe.errors import AuthError, ContextLengthError, MissingKeyError
from evalpipe.limits import LeasePacer
from evalpipe.planning import Request, split_refused
from evalpipe.send.client import MAX_RESPONSE_BYTES, CallResult, EvalClient, Pacer
from evalpipe.send.packs import Pack, send_pack
from evalpipe.send.transport import new_transport
from evalpipe.send.work import JobResult, StateJob, request_body


class Abandoned(Exception):
    """Raised in a worker for a request that was not sent because the job is stopping."""


class StoppablePacer:
    """The Budget's pacer, refusing to let a request out once the worker is told to stop: a
    request waiting for its turn (or for a retry) is abandoned, one in flight finishes.

    `stop` abandons the requests waiting for their turn at once, not as their turns come: at
    a low rate limit, dozens wait in line, and a stop (a signal, the deadline) must not wait
    for the line to drain at the rate."""

    def __init__(self, pacer: Pacer) -> None:
        self._pacer = pacer
        self.stopped = False
        self._waiting: set[asyncio.Task[Any]] = set()  # tasks waiting for their turn

    def stop(self) -> None:
        self.stopped = True
        for task in self._waiting:
            task.cancel()

    async def acquire(self, tokens: int) -> None:
        if self.stopped:
            raise Abandoned
        task = asyncio.current_task()
        if task is not None:
            self._waiting.add(task)
        try:
            await self._pacer.acquire(tokens)
        except asyncio.CancelledError:
            if not self.stopped or task is None:
                raise
            task.uncancel()  # cancelled by `stop`: abandoned, not cancelled
            raise Abandoned from None
        finally:
            if task is not None:
                self._waiting.discard(task)
        if self.stopped:
            raise Abandoned

    def on_success(self, estimated_tokens: int, input_tokens: int) -> None:
        self._pacer.on_success(estimated_tokens, input_tokens)

    def on_rate_limited(self) -> None:
        self._pacer.on_rate_limited()


@dataclass(frozen=True)
class WorkerSettings:
    """Everything a worker needs, none of it secret: the key is read from `api_key_env`."""

    base_url: str
    api_key_env: str
    model: str
    questions: Mapping[str, Mapping[str, Any]]
    question_tokens: Mapping[str, int]  # the planner's count of each question
    policy: RetryPolicy
    max_in_flight: int
    transport: TransportKind = DEFAULT_KIND
    max_response_bytes: int = MAX_RESPONSE_BYTES  # service.max_response_mb


def fold(calls: list[tuple[Request, CallResult | None]], index: int, refused: int) -> JobResult:
    """One JobResult from the requests of a job and their calls; any failed call fails the
    row (no half answers). `refused` requests were refused for length and replaced by smaller
    ones: they count as requests and attempts (the rate budget paid for them), not as retries
    or failures."""
    results = [result for _, result in calls]
    if any(result is None for result in results):  # abandoned: a stopping job's unsent part
        return _abandoned(index)
    answers: dict[str, dict[str, Any]] = {}
    models = []
    tokens = attempts = rate_limited = 0
    error = None
    for result in results:
        assert result is not None
        attempts += result.attempts
        rate_limited += result.rate_limited
        if result.error is not None:
            error = error or result.error
            continue
        response = result.response
        assert response is not None  # a call without an error has its checked response
        tokens += response.usage.input_tokens
        models.append(response.model)
        answers.update({k: a.model_dump() for k, a in response.answers.items()})
    retries = attempts - len(results)
    model = "+".join(sorted(set(models))) or None
    counts = (len(results) + refused, attempts + refused, retries, rate_limited)
    estimated = sum(r.tokens for r, result in calls if result is not None and result.error is None)
    failed = sum(result.error is not None for result in results if result is not None)
    if error is not None:
        return JobResult(
            index, None, model, tokens, error.error_type, error.message, *counts,
            refused_for_length=refused, estimated_tokens=estimated, failed_requests=failed,
            error_cause=getattr(error, "cause", None),
        )  # fmt: skip
    return JobResult(
        index, answers, model, tokens, None, None, *counts,
        refused_for_length=refused, estimated_tokens=estimated,
    )  # fmt: skip


def _abandoned(index: int) -> JobResult:
    return JobResult(index, None, None, 0, None, None, 0, 0, 0, 0, abandoned=True)


def _outcome(task: asyncio.Task[list[JobResult]], unit: StateJob | Pack) -> list[JobResult]:
    """A finished job's (or pack's) results; a cancelled one (`Worker.cancel`) was abandoned."""
    if task.cancelled():
        jobs = unit.jobs if isinstance(unit, Pack) else (unit,)
        return [_abandoned(job.index) for job in jobs]
    return task.result()


PARENT_CHECK_SECONDS = 0.1
YIELD_SECONDS = 0.05  # results finished this close together go back to the driver together


def exit_with_parent(interval: float = PARENT_CHECK_SECONDS) -> None:
    """End this process soon after its parent (Ray's raylet) dies.

    A worker runs in a process group of its own, so `kill -9` of the job's group spares it,
    and Ray notices its raylet is gone only after a while. Until then it would keep sending
    requests whose answers nobody records, paid again on the rerun.
    """
    parent = os.getppid()

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(interval)
        os._exit(1)

    threading.Thread(target=watch, name="evalpipe-parent-watch", daemon=True).start()


class Worker:
    """Sends jobs. Wrap with `ray.remote`; its methods run on the actor's event loop.

    A worker serves one job at a time (`configure`); when that job finished, the driver may
    keep it for its next job (`evalpipe.send.fleet`), which configures it again."""

    def __init__(self, settings: WorkerSettings, budget: Any, job: str) -> None:
        exit_with_parent()
        self._client: EvalClient | None = None
        self.configure(settings, budget, job)

    def configure(self, settings: WorkerSettings, budget: Any, job: str) -> None:
        """Serve `job` from now on: its settings, its account's Budget, a fresh client."""
        # A missing key is reported by `process`, where the driver sees the error's type;
        # an exception here would only show as a dead actor.
        self._key = api_key_in(settings.api_key_env)
        self._settings = settings
        self._budget = budget
        self._serving: str | None = job
        self._questions = validate_questions(dict(settings.questions))
        self._client = None  # the last job's was closed by `close`
        self._slots: asyncio.Semaphore | None = None
        self._lease = LeasePacer(budget)
        self._pacer = StoppablePacer(self._lease)
        self._refused: str | None = None
        self._running: dict[asyncio.Task[list[JobResult]], StateJob | Pack] = {}  # jobs in hand

    def serving(self) -> str | None:
        """The job this worker serves (its fleet's name), None once that job closed it."""
        return self._serving

    def _ready(self) -> tuple[EvalClient, asyncio.Semaphore]:
        # Made on first use: the client and the semaphore belong to the actor's running loop.
        if self._client is None or self._slots is None:
            s = self._settings
            self._client = EvalClient(
                s.base_url,
                self._key,
                policy=s.policy,
                pacer=self._pacer,
                transport=new_transport(s.base_url, s.transport, s.max_in_flight),
                max_response_bytes=s.max_response_bytes,
            )
            self._slots = asyncio.Semaphore(s.max_in_flight)
        return self._client, self._slots

    async def warm(self) -> None:
        """Make the client now, before the first chunk: a process's first one costs its TLS
        context (0.3 s on a loaded machine), which the run's first requests would wait for."""
        self._ready()

    async def process(self, units: list[StateJob | Pack]) -> AsyncIterator[list[JobResult]]:
        """Evaluate a chunk of jobs (and packs of jobs: `evalpipe.send.packs`) concurrently,
        yielding results as they finish (a Ray streaming generator); raises AuthError if the
        key is refused."""
        if not self._key:
            raise MissingKeyError(
                f"service.api_key_env: the variable {self._settings.api_key_env} is not set "
                "where the Ray workers run; export it there (a local Ray inherits it)"
            )
        jobs = [job for unit in units for job in (unit.jobs if isinstance(unit, Pack) else (unit,))]
        if self._pacer.stopped:  # cancelled before this chunk came: nothing is sent
            yield [_abandoned(job.index) for job in jobs]
            return
        tasks = {asyncio.ensure_future(self._unit(unit)): unit for unit in units}
        self._running.update(tasks)
        running = set(tasks)
        try:
            while running:
                done, running = await asyncio.wait(running, return_when=FIRST_COMPLETED)
                if running:  # gather what finishes soon after, so a yield carries several
                    more, running = await asyncio.wait(running, timeout=YIELD_SECONDS)
                    done |= more
                yield [result for task in done for result in _outcome(task, tasks[task])]
        finally:
            for task in tasks:
                task.cancel()
                self._running.pop(task, None)

    def rebind(self, budget: Any) -> None:
        """Lease from `budget` from now on: the driver's replacement of a Budget that died
        (requests waiting for a lease go on with it)."""
        self._budget = budget
        self._lease.rebind(budget)

    def stop(self) -> None:
        """Send nothing more: what waits for its turn is abandoned, what is in flight ends."""
        self._pacer.stop()

    async def cancel(self) -> int:
        """Send nothing more and cancel the requests in flight (the Python API's interrupt):
        their connections close before an answer, so the service does not bill them; their jobs
        end `abandoned`. Returns how many jobs were cancelled."""
        self._pacer.stop()
        cancelled = [task for task in self._running if not task.done()]
        for task in cancelled:
            task.cancel()
        return len(cancelled)

    async def _unit(self, unit: StateJob | Pack) -> list[JobResult]:
        if isinstance(unit, StateJob):
            return [await self._job(unit)]
        s = self._settings
        results, refused, answered = await send_pack(
            unit, s.model, s.questions, self._questions, self._send, self._job
        )
        return [
            _abandoned(job.index)
            if result is None
            else replace(result, questions_refused=refused, questions_answered=answered)
            for job, result in zip(unit.jobs, results, strict=True)
        ]

    async def _job(self, job: StateJob) -> JobResult:
        asked = [self._ask(job.state, request) for request in job.requests]
        outcomes = await asyncio.gather(*asked)
        calls = [call for made, _ in outcomes for call in made]
        return fold(calls, job.index, sum(refused for _, refused in outcomes))

    async def _ask(
        self, state: Any, request: Request
    ) -> tuple[list[tuple[Request, CallResult | None]], int]:
        """A request, and if the service refuses it as too long, its questions again in smaller
        groups (`evalpipe.planning.split_refused`), down to one question per request (a lone
        question refused for length ends the row as `context_limit`). Returns the final requests
        with their calls, and the refusals."""
        result = await self._call(state, request)
        refused = result is not None and isinstance(result.error, ContextLengthError)
        if not refused or len(request.keys) == 1:
            return [(request, result)], 0
        parts = split_refused(request, self._settings.question_tokens)
        halves = await asyncio.gather(*(self._ask(state, r) for r in parts))
        return [call for calls, _ in halves for call in calls], 1 + sum(n for _, n in halves)

    async def _call(self, state: Any, request: Request) -> CallResult | None:
        """One request of a job; None when it was abandoned (the worker is stopping)."""
        payload = request_body(state, self._settings.model, self._settings.questions, request.keys)
        parsed = {k: self._questions[k] for k in request.keys}
        return await self._send(payload, parsed, request.tokens)

    async def _send(
        self, payload: dict[str, Any], parsed: dict[str, Any], tokens: int
    ) -> CallResult | None:
        """One request; None when it was abandoned (the worker is stopping)."""
        client, slots = self._ready()
        async with slots:
            if self._refused:
                raise AuthError(self._refused)
            try:
                return await client.evaluate(payload, parsed, tokens)
            except Abandoned:
                return None
            except AuthError as exc:
                self._refused = exc.message
                self._budget.abort.remote(exc.message)
                raise

    async def close(self) -> None:
        """The job is over: close the client's connections (the worker may serve another)."""
        self._serving = None
        if self._client is not None:
            await self._client.aclose()
            self._client = None

    def pid(self) -> int:
        """The worker's process id (operators and the fault tests kill it by this)."""
        return os.getpid()
