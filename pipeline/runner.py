"""The driver of a job: source → plan → dispatch to Ray actors → fold → sink, one way.

`prepare` does everything that can fail on bad input before a single request is sent (config,
columns, duplicate ids, the key variable). `run_job` then starts (or joins) Ray, the Budget and
the Workers, streams the corpus through them in bounded batches with back-pressure, fans each
answer out to every row with the same state, and commits part files as results complete. A row
that fails is data (an error column); a refused key ends the job at once.
"""

from __future__ import annotations

import asyncio
import math
import os
import secrets
import time
from collections import deque
from collections.abc import Callable, Iterator
from concurrent import futures
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from pipeline.actors import Job, JobResult, Worker, WorkerSettings
from pipeline.budget import Budget
from pipeline.client import EvalClient, RetryPolicy
from pipeline.config import EMBEDDED, JobConfig, LimitsConfig, ServiceConfig
from pipeline.contract import ModelEntry, question_dicts, question_warnings
from pipeline.errors import INVALID_STATE, EvalpipeError, MissingKeyError
from pipeline.plan import Planner
from pipeline.progress import Counters, Progress, summary
from pipeline.sink import RowResult, Sink, output_schema
from pipeline.source import Row, Source, SourceSpec, state_key

CHUNK_SECONDS = 0.25  # a chunk holds about this much of a worker's share of the rate
LATENCY_COVER = 4.0  # in-flight requests cover this many seconds of service latency
MAX_ACTOR_RESTARTS = 20  # a worker that keeps dying is a fault to report, not to hide
EARLY_PROBE_SECONDS = 0.5  # Ray waits this long at most for an external service's first answer


@dataclass
class Prepared:
    """A validated job, ready to run or to plan."""

    config: JobConfig
    source: Source
    questions: dict[str, dict[str, Any]]
    planner: Planner
    warnings: list[str]
    schema: pa.Schema


def prepare(config: JobConfig) -> Prepared:
    """Every check that needs no service: raises UsageError subclasses (exit 2)."""
    warnings = question_warnings(config.parsed_questions)
    if config.model_is_alias:
        warnings.append(
            f"model: {config.model!r} is an alias; answers can change when it moves. "
            "Pin a versioned ID (e.g. model-1.13.0) for scheduled jobs."
        )
    spec = SourceSpec(
        path=config.input.path,
        id_column=config.input.id_column,
        state=config.input.state,
        batch_rows=config.input.batch_rows,
    )
    source = Source(spec)
    source.check_unique_ids()
    # Built here so a column-name collision is found by `plan` as well as by `run`.
    schema = output_schema(config.input.id_column, source.id_type, config.parsed_questions)
    questions = question_dicts(config.parsed_questions)
    return Prepared(config, source, questions, Planner(questions), warnings, schema)


# --------------------------------------------------------------------------- the service


def _api_key(service: ServiceConfig) -> str:
    env = service.api_key_env
    key = os.environ.get(env)
    if key:
        return key
    if service.base_url == EMBEDDED:
        # A one-off key for this run, exported so that local Ray workers inherit it.
        os.environ[env] = secrets.token_urlsafe(24)
        return os.environ[env]
    raise MissingKeyError(
        f"service.api_key_env: the variable {env} is not set; export the API key in it"
    )


@contextmanager
def service_url(service: ServiceConfig, limits: LimitsConfig, key: str) -> Iterator[str]:
    """The base URL to call; starts the embedded reference service for `embedded`."""
    if service.base_url != EMBEDDED:
        yield service.base_url
        return
    from pipeline.service import EmbeddedService, ServiceSettings

    settings = ServiceSettings(
        api_key=key,
        rpm=limits.requests_per_minute,
        tps=limits.tokens_per_second,
        latency=service.latency,
    )
    with EmbeddedService(settings, port=0, mode="process") as embedded:
        yield embedded.base_url


def _service_ready(services: ExitStack, config: JobConfig, key: str) -> str:
    """The service's URL once it answers and takes the key (the embedded one started first)."""
    url = services.enter_context(service_url(config.service, config.limits, key))
    asyncio.run(_check_service(url, key, config.service.connect_wait))
    return url


async def _check_service(url: str, key: str, wait: float) -> None:
    """One GET /v1/models: an unreachable service or a refused key stops the job here."""
    async with EvalClient(url, key) as client:
        await client.probe(wait=wait)


async def _models(url: str, key: str, wait: float) -> list[ModelEntry]:
    # An interactive command: a few quick retries, not a night's patience.
    policy = RetryPolicy(max_attempts=3, base_delay=0.5, max_delay=2.0, attempt_timeout=10.0)
    async with EvalClient(url, key, policy=policy) as client:
        await client.probe(wait=wait)
        return (await client.list_models()).models


def list_models(service: ServiceConfig) -> list[ModelEntry]:
    """The service's model list (`evalpipe models`)."""
    key = _api_key(service)
    with service_url(service, LimitsConfig(), key) as url:
        return asyncio.run(_models(url, key, service.connect_wait))


# --------------------------------------------------------------------------- Ray


def _ray_up(address: str | None) -> bool:
    """Start a local Ray (or join `address`); True when this call started it."""
    import ray

    if ray.is_initialized():
        return False
    ray.init(
        address=address,
        include_dashboard=False,
        logging_level="ERROR",
        log_to_driver=False,
        configure_logging=True,
    )
    return True


def _ray_down() -> None:
    import ray

    ray.shutdown()


def _sizes(config: JobConfig) -> tuple[int, int, int]:
    """(jobs per chunk, requests in flight per actor, chunks outstanding per actor)."""
    actors = config.concurrency.actors
    share = config.limits.requests_per_minute / 60 / actors
    chunk = max(1, min(256, int(share * CHUNK_SECONDS)))
    in_flight = config.concurrency.max_in_flight or max(
        32, min(512, math.ceil(share * LATENCY_COVER))
    )
    return chunk, in_flight, math.ceil(in_flight / chunk) + 2


# --------------------------------------------------------------------------- dispatch


@dataclass
class _Pending:
    """A job sent (or queued): the rows waiting for its answer."""

    job: Job
    ids: list[Any]
    key: bytes | None


@dataclass
class Fleet:
    """The job's Ray actors: one Budget and `actors` Workers, started as soon as Ray is up so
    their imports overlap the driver's own start-up (the service probe, the sink, the scans)."""

    settings: WorkerSettings
    budget: Any
    workers: list[Any]
    name: str
    spawned: int = 0

    @classmethod
    def start(cls, config: JobConfig, url: str, questions: dict[str, Any]) -> Fleet:
        import ray

        limits, r = config.limits, config.retries
        budget = ray.remote(num_cpus=0)(Budget).remote(
            limits.requests_per_minute, limits.tokens_per_second, limits.headroom
        )
        _, in_flight, _ = _sizes(config)
        settings = WorkerSettings(
            base_url=url,
            api_key_env=config.service.api_key_env,
            model=config.model,
            questions=questions,
            policy=RetryPolicy(r.max_attempts, r.base_delay, r.max_delay, r.attempt_timeout),
            max_in_flight=in_flight,
            transport=config.service.transport,
        )
        # Named, so operators can find them.
        fleet = cls(settings, budget, [], f"evalpipe-{secrets.token_hex(4)}")
        fleet.workers = [fleet.spawn() for _ in range(config.concurrency.actors)]
        return fleet

    def spawn(self) -> Any:
        import ray

        self.spawned += 1
        return (
            ray.remote(num_cpus=0)(Worker)
            .options(max_concurrency=10_000, name=f"{self.name}-worker-{self.spawned}")
            .remote(self.settings, self.budget)
        )

    def close(self) -> None:
        import ray

        for worker in self.workers:
            ray.kill(worker)
        ray.kill(self.budget)


@dataclass
class Dispatcher:
    """Keeps every worker busy, folds results back to rows, and replaces dead workers."""

    config: JobConfig
    fleet: Fleet
    counters: Counters
    emit: Callable[[list[RowResult]], None]
    queue: deque[_Pending] = field(default_factory=deque)
    jobs: dict[int, _Pending] = field(default_factory=dict)
    refs: dict[Any, tuple[int, list[_Pending]]] = field(default_factory=dict)
    reuse_pending: dict[bytes, _Pending] = field(default_factory=dict)
    reuse_done: dict[bytes, JobResult] = field(default_factory=dict)
    next_index: int = 0

    def __post_init__(self) -> None:
        self.chunk, _, self.per_worker = _sizes(self.config)
        self.workers = self.fleet.workers

    # -- intake ------------------------------------------------------------------------------

    def outstanding(self) -> int:
        return len(self.jobs)

    def capacity(self) -> int:
        return self.chunk * self.per_worker * len(self.workers) * 2

    def add(self, row: Row, planner: Planner, repeated: set[bytes]) -> None:
        """Plan a row: an error now, an answer reused, a wait on an identical state, or a job."""
        if row.state is None:
            self._fail(row.id, INVALID_STATE, row.invalid or "state is empty")
            return
        key = state_key(row.state) if repeated else None
        if key is not None and key not in repeated:
            key = None
        if key is not None and key in self.reuse_done:
            self._reuse(row.id, self.reuse_done[key])
            return
        if key is not None and key in self.reuse_pending:
            self.reuse_pending[key].ids.append(row.id)
            return
        plan = planner.plan(row.state)
        if plan.error_type:
            self._fail(row.id, plan.error_type, plan.error or "")
            return
        pending = _Pending(Job(self.next_index, row.state, plan.requests), [row.id], key)
        self.next_index += 1
        self.jobs[pending.job.index] = pending
        self.queue.append(pending)
        if key is not None:
            self.reuse_pending[key] = pending

    def _fail(self, row_id: Any, error_type: str, message: str) -> None:
        self.counters.errors[error_type] += 1
        self.counters.rows_done += 1
        self.emit([RowResult(row_id, None, None, 0, error_type, message)])

    def _reuse(self, row_id: Any, result: JobResult) -> None:
        self.counters.reused += 1
        self._count_rows(result, 1)
        self.emit([_row(row_id, result, tokens=0)])

    # -- sending -----------------------------------------------------------------------------

    def submit(self) -> None:
        busy = [0] * len(self.workers)
        for worker, _ in self.refs.values():
            busy[worker] += 1
        for w, worker in enumerate(self.workers):
            while busy[w] < self.per_worker and self.queue:
                chunk = [self.queue.popleft() for _ in range(min(self.chunk, len(self.queue)))]
                ref = worker.process.remote([p.job for p in chunk])
                self.refs[ref] = (w, chunk)
                busy[w] += 1
                if self.counters.first_request is None:
                    self.counters.first_request = time.monotonic()

    def idle(self) -> bool:
        return not self.refs and not self.queue

    def collect(self, timeout: float) -> None:
        """Wait up to `timeout` for finished chunks and fold them into rows."""
        import ray

        if not self.refs:
            return
        ready, rest = ray.wait(list(self.refs), num_returns=1, timeout=timeout)
        if ready and rest:
            ready += ray.wait(rest, num_returns=len(rest), timeout=0)[0]
        dead: dict[int, list[list[_Pending]]] = {}
        for ref in ready:
            w, chunk = self.refs.pop(ref)
            results = self._results(ref)
            if results is None:
                dead.setdefault(w, []).append(chunk)
                continue
            for result in results:
                self._finish(result)
        # After every finished chunk is folded: a dead worker may have finished some first.
        for w, chunks in dead.items():
            self._replace(w, chunks)

    def _results(self, ref: Any) -> list[JobResult] | None:
        """A chunk's results; None if its worker died. Errors raised inside a worker are
        re-raised as the evalpipe error they carry (a refused key, a missing variable)."""
        import ray
        from ray.exceptions import RayActorError, RayTaskError

        try:
            return ray.get(ref)
        except RayActorError:
            return None
        except RayTaskError as exc:
            if isinstance(exc.cause, EvalpipeError):
                raise exc.cause from None
            raise

    def _replace(self, w: int, chunks: list[list[_Pending]]) -> None:
        """A worker died: its unfinished chunks go back to the queue, a new worker takes over."""
        lost = chunks + [c for x, c in self.refs.values() if x == w]
        for ref in [r for r, (x, _) in self.refs.items() if x == w]:
            del self.refs[ref]
        for pendings in lost:
            self.queue.extendleft(reversed(pendings))
        self.counters.actor_restarts += 1
        if self.counters.actor_restarts > MAX_ACTOR_RESTARTS:
            raise EvalpipeError(
                f"workers died {self.counters.actor_restarts} times; see the Ray logs "
                "(out of memory? killed?) and run the same command again to resume"
            )
        self.workers[w] = self.fleet.spawn()

    def _finish(self, result: JobResult) -> None:
        pending = self.jobs.pop(result.index)
        c = self.counters
        c.requests += result.requests
        c.attempts += result.attempts
        c.retries += result.retries
        c.rate_limited += result.rate_limited
        c.input_tokens += result.input_tokens
        if pending.key is not None:
            self.reuse_pending.pop(pending.key, None)
            if result.error_type is None:
                self.reuse_done[pending.key] = result
        self._count_rows(result, len(pending.ids))
        c.reused += len(pending.ids) - 1
        rows = [_row(pending.ids[0], result, result.input_tokens)]
        rows += [_row(i, result, tokens=0) for i in pending.ids[1:]]
        self.emit(rows)

    def _count_rows(self, result: JobResult, n: int) -> None:
        c = self.counters
        c.rows_done += n
        if result.error_type is None:
            c.answered += n
            c.models[result.model or "?"] += n
        else:
            c.errors[result.error_type] += n


def _row(row_id: Any, result: JobResult, tokens: int) -> RowResult:
    return RowResult(row_id, result.answers, result.model, tokens, result.error_type, result.error)


# --------------------------------------------------------------------------- the job


def run_job(
    prepared: Prepared,
    *,
    restart: bool = False,
    ray_address: str | None = None,
    progress_interval: float = 10.0,
    started: float | None = None,
) -> dict[str, Any]:
    """Run (or resume) a prepared job to the end; returns the summary.

    `started` (time.monotonic) is when the command began, for the start-up figure.
    """
    started = time.monotonic() if started is None else started
    config, source = prepared.config, prepared.source
    key = _api_key(config.service)
    schema = prepared.schema
    with ExitStack() as services, ThreadPoolExecutor(1) as pool, ExitStack() as stack:
        # Start-up in parallel: the service starts and is probed in a thread while Ray starts
        # here (Ray's processes die with the thread that started them, so Ray keeps the main
        # thread). A live external service answers the probe in a moment: a refused key or a
        # wrong URL that fails at once is reported before Ray's seconds of start-up.
        ready = pool.submit(_service_ready, services, config, key)
        if config.service.base_url != EMBEDDED:
            futures.wait([ready], timeout=EARLY_PROBE_SECONDS)
            if ready.done():
                ready.result()  # raises AuthError or ServiceUnreachable
        if _ray_up(ray_address):
            stack.callback(_ray_down)
        url = ready.result()
        fleet = Fleet.start(config, url, prepared.questions)
        stack.callback(fleet.close)
        sink = Sink(
            config.output.path,
            schema,
            config.fingerprint(),
            restart=restart,
            part_rows=config.output.part_rows,
            sync_seconds=config.output.flush_seconds,
        )
        done, _ = sink.committed()
        counters = Counters(rows_total=source.num_rows, rows_skipped=len(done), started=started)
        dispatcher = Dispatcher(config, fleet, counters, sink.append)
        repeated = source.duplicate_state_keys()
        return _dispatch(prepared, dispatcher, sink, done, repeated, progress_interval)


def _dispatch(
    prepared: Prepared,
    dispatcher: Dispatcher,
    sink: Sink,
    done: set[Any],
    repeated: set[bytes],
    progress_interval: float,
) -> dict[str, Any]:
    counters = dispatcher.counters
    limits = prepared.config.limits
    progress = Progress(counters, interval=progress_interval)
    skip = (lambda i: i in done) if done else None
    batches = prepared.source.batches(skip=skip)
    try:
        exhausted = False
        while True:
            while not exhausted and dispatcher.outstanding() < dispatcher.capacity():
                batch = next(batches, None)
                if batch is None:
                    exhausted = True
                    break
                for row in batch:
                    dispatcher.add(row, prepared.planner, repeated)
            dispatcher.submit()
            if exhausted and dispatcher.idle():
                break
            dispatcher.collect(timeout=0.2)
            sink.tick()
            progress.update()
    finally:
        sink.close()  # on an error too: rows already finished stay journaled for the resume
        progress.close()
    result = summary(counters, limits.requests_per_minute, limits.tokens_per_second)
    sink.finish(result)
    return result
