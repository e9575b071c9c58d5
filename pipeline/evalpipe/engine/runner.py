"""The job's orchestration: source → plan → dispatch to Ray actors → fold → sink, one way.

`run_job` takes a prepared job (`evalpipe.planning.PreparedJob`), the base URL of a service that
answered (`evalpipe.send.Connection`) and how many rows go in a request (`PackingChoice`), starts
(or joins) Ray, the Budget and the Workers, streams the corpus through them in bounded batches with
back-pressure, and journals every finished row as it comes back. A row that fails is data (an error
column); a refused key ends the job at once. Before sending, committed rows whose state changed
since they were scored are cut out of the output (`plan.survey`, `Sink.resume`), so they are scored
again; the answer cache (`evalpipe.cache.answers`) answers what it can, and takes the fresh answers
once per driver turn.

A stop (`evalpipe.engine.stopping`: SIGTERM or SIGINT) ends the intake; the requests in flight,
which are paid for, may finish for `grace_seconds`; then every finished row is folded into parts and
the run ends as `stopped`. A second signal (`StopNow`) leaves at once with the rows journaled.
A cancelling stop (the Python API's: `StopSignals(cancel=True)`) cancels the requests in flight
instead, waits at most `CANCEL_SECONDS` for the answers already received, and ends the fleet
and the account's Budget it alone used (`Fleet.interrupted`): nothing of the call stays alive.

The guard rails (`evalpipe.engine.guards`) stop the run the same way, without a signal: the cost
cap when the dispatcher refuses a job that would pass it (the workers still send the jobs they
hold, admitted under the cap), the time limit when it comes (as SIGTERM). The outcome then
carries the error to exit with (`Outcome.halted`: `CostCapReached`, `DeadlineReached`).
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import secrets
import time
from collections.abc import Callable, Mapping
from concurrent.futures import Future
from contextlib import ExitStack
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from evalpipe.cache import JobCache, open_job_cache
from evalpipe.cluster import SHUTDOWN_SECONDS, JoinedRay, LocalRay, bounded, ray_here
from evalpipe.engine.dispatch import Caches, Dispatcher
from evalpipe.engine.events import EventLog
from evalpipe.engine.guards import CostCap, Guards, cost_cap, time_limit
from evalpipe.engine.intake import gc_paused, sends_soon
from evalpipe.engine.observed import canary_checked, observed, sample
from evalpipe.engine.progress import Counters, Display, Progress
from evalpipe.engine.sending import Sender
from evalpipe.engine.stopping import CANCEL_SECONDS, GRACE_SECONDS, StopSignals, through_ray
from evalpipe.engine.summary import summary
from evalpipe.errors import EvalpipeError, OutputError
from evalpipe.output import Ending, Sink, answer_types, open_sink
from evalpipe.planning import (
    Answered,
    Learned,
    PackingChoice,
    PreparedJob,
    RowClassifier,
    price_of,
    survey,
)
from evalpipe.send import Fleet

COLLECT_SECONDS = 0.1  # the longest the driver waits for results before it journals again


@dataclass(frozen=True)
class Outcome:
    """How a run ended: its summary, `finished` or `stopped`, and the rows in the table."""

    summary: dict[str, Any]
    ended_how: Ending
    rows_committed: int
    halted: EvalpipeError | None = None  # a guard rail stopped it: the error to exit with


def new_run_id() -> str:
    """A run's id: when it started (UTC, so ids sort by time) and a random suffix."""
    return f"{datetime.now(UTC):%Y%m%dT%H%M%SZ}-{secrets.token_hex(3)}"


def _close_fleet(fleet: Fleet, ray_here: LocalRay | JoinedRay) -> None:
    if not ray_here.gone():  # with Ray gone, its actors are gone too
        bounded(fleet.close, SHUTDOWN_SECONDS)


def run_job(
    prepared: PreparedJob,
    url: Future[str],
    packing: Callable[[], PackingChoice],
    *,
    run_id: str | None = None,
    restart: bool = False,
    ray_address: str | None = None,
    progress_interval: float = 10.0,
    display: Display | None = None,
    started: float | None = None,
    log: EventLog | None = None,
    stop: StopSignals | None = None,
    grace_seconds: float = GRACE_SECONDS,
    keep_ray: bool = False,
    name: str | None = None,
    lineage: bool = True,
    canary: Callable[[str], Mapping[str, Any] | None] | None = None,
) -> Outcome:
    """Run (or resume) a prepared job until it is done or stopped.

    `keep_ray`: a Ray this call starts stays up for the next job of the process (the Python
    API's second call then starts in about a second, reusing the account's Budget too).

    `display` shows progress (`evalpipe.engine.progress`): by default the CLI's, on `log`, a
    progress event every `progress_interval` seconds (a bar on a terminal); it is closed when
    the job ends, however it ends.

    `url` resolves to the service's base URL once it answered (it is being started and probed
    while Ray starts here). `packing` gives the rows per request, once the output is open (for
    `auto`, a measurement may be made then: `evalpipe.preflight.choose_packing`). `started`
    (time.monotonic) is when the command began, for the start-up figure. `stop` is installed
    again once Ray is up (Ray sets its own handlers).
    Ray starts at once unless the answer cache answers the corpus's first batch whole; then
    when the first request is due (a run the cache answers whole never starts it).

    `canary` asks the canary (`evalpipe.preflight.check_canary`, given the run id) once the
    service answered, before the output is opened: its result is recorded (the metric, the
    log's `canary` event, the lineage facet, the summary) and a failed one ends the run with
    `CanaryFailed` before any corpus row is sent.

    `name` is the job's (else the config's `name`, else `evalpipe`): the Pushgateway's `job`
    group and OpenLineage's job name. The run's telemetry (`evalpipe.observe`: metrics, trace,
    lineage) starts here and ends with the run, each part only when asked for; `lineage=False`
    leaves OpenLineage's events to the caller (a scheduler whose own integration sends them,
    `evalpipe.airflow`), so that they are sent once.
    """
    started = time.monotonic() if started is None else started
    log = log or EventLog()
    stop = stop or StopSignals()
    config, source = prepared.config, prepared.source
    run_id = run_id or new_run_id()
    with through_ray(), ExitStack() as stack:  # a second signal's StopNow, not a SystemError
        watch = stack.enter_context(observed(prepared, run_id, name, log, lineage))
        watch.begin("plan")
        engine = _Engine(stack, ray_address, stop, prepared, url, log, keep_ray)
        cache = open_job_cache(
            config, prepared.questions, prepared.planner.question_tokens, tier=prepared.tier,
            warn=log.warning, answer_types=answer_types(prepared.schema),
        )  # fmt: skip
        stack.callback(cache.close)
        if sends_soon(source, cache):
            engine.fleet()  # now: Ray's start-up overlaps the scans below
        url.result()  # the service answered (else its error), before the output is touched
        checked = canary_checked(canary, run_id, watch, log)  # before the corpus and output
        sink = _open_sink(prepared, run_id, restart)
        # The table answers the corpus as it is now: a committed row whose state changed since
        # it was scored is cut out and scored again (through the cache).
        found = survey(source, sink.committed())
        done = set(sink.resume(found.stale).ids.to_pylist())
        sink.expect(source.num_rows - len(done))  # a full disk's message says what is left
        counters = Counters(rows_total=source.num_rows, rows_skipped=len(done), started=started)
        counters.price, counters.service = price_of(config), config.service.identity
        counters.cache = cache.note
        counters.canary, counters.calibration = checked, prepared.calibration_shown()
        watch.update(sample(counters))  # what the run has to do, at zero
        watch.begin("calibrate")
        learned = Learned.of(prepared)
        known = learned.ratio()
        if known is not None:  # as `plan` did: the same requests, not learned by refusal
            prepared.planner.calibrate(known.ratio)
            counters.token_ratio = known.describe()
        choice = packing()
        if choice.measured_from is not None:  # measured now: its requests count in the rates
            counters.first_request = choice.measured_from
        engine.paced_from(choice.usage)
        counters.packing = choice.shown()
        counters.input_tokens += choice.measurement_tokens()  # its packed requests were billed
        packed = _packed_cache(stack, prepared, log) if choice.rows > 1 else None
        caches = Caches(cache, packed)  # a packing run also takes answers given in packs
        classifier = RowClassifier(prepared.planner, found.repeated, caches.lookup)
        guards = Guards(cost_cap(config, known.ratio if known else None),
                        time_limit(config, started))  # fmt: skip
        packer = choice.packer(prepared) if choice.rows > 1 else None
        sender = Sender(config, engine.fleet, classifier, counters, guards.cap or CostCap(), packer)
        sender.pack_seen = choice.proven  # the service answered packs this size
        dispatcher = Dispatcher(
            sender, classifier, counters, sink.append, caches, known is not None, choice.sampled
        )
        progress = Progress(
            counters, log, progress_interval, display, lambda: watch.update(sample(counters))
        )
        grace = _Grace(stop, grace_seconds, engine.gone)
        watch.begin("send")
        ended = _drive(prepared, dispatcher, sink, done, progress, grace, guards)
        watch.begin("finish")
        engine.ended(ended)
        caches.commit()
        counters.cache = cache.note  # it may have failed on the way
        count = dispatcher.count
        learned.keep_ratio(count.ratio, f"run {sink.run_id}", samples=count.samples)
        if packer is not None and packer.max_questions is not None:
            learned.keep_cap(packer.max_questions, f"run {sink.run_id}")
            counters.packing["max_questions_per_request"] = packer.max_questions
        counters.workers, counters.nodes = engine.placement()
        limits = config.limits
        result = summary(counters, limits.requests_per_minute, limits.tokens_per_second)
        result = sink.finish(result, ended)  # with the rows each question kept, if it abstains
        committed = len(done) + counters.rows_done
        watch.close(ended, sample(counters), committed)  # now: Ray's shutdown may take a while
        halted = None
        if ended == "stopped" and stop.signal is None and stop.halted is not None:
            halted = guards.error(stop.halted, counters, committed)
        return Outcome(result, ended, committed, halted)


def _open_sink(prepared: PreparedJob, run_id: str, restart: bool) -> Sink:
    """The output, as `output` says (Parquet parts, or a Delta table's partition)."""
    config = prepared.config
    provenance = {"evalpipe_version": VERSION, "config_hash": config.config_hash()}
    return open_sink(
        config.output, prepared.schema, config.fingerprint(), run_id=run_id, restart=restart,
        provenance=provenance,
    )  # fmt: skip


def _version() -> str:
    try:
        return importlib.metadata.version("evalpipe")
    except importlib.metadata.PackageNotFoundError:  # run from a source tree
        return "unknown"


VERSION = _version()  # evalpipe's, as each run's manifest entry records it


def _packed_cache(stack: ExitStack, prepared: PreparedJob, log: EventLog) -> JobCache:
    """The cache of answers given in packs, apart from those given alone (`evalpipe.cache`)."""
    config = prepared.config
    packed = open_job_cache(
        config, prepared.questions, prepared.planner.question_tokens, tier=prepared.tier,
        warn=log.warning, answer_types=answer_types(prepared.schema), packed=True,
    )  # fmt: skip
    stack.callback(packed.close)
    return packed


class _Engine:
    """Ray and the job's fleet, started on demand (`fleet`); their shutdown joins the job's
    exit stack. `url` resolves to the service's base URL once it answered."""

    def __init__(
        self,
        stack: ExitStack,
        address: str | None,
        stop: StopSignals,
        prepared: PreparedJob,
        url: Future[str],
        log: EventLog,
        keep_ray: bool = False,
    ) -> None:
        self._keep_ray = keep_ray
        self._stack, self._address, self._stop = stack, address, stop
        self._prepared, self._url, self._log = prepared, url, log
        self._here: LocalRay | JoinedRay | None = None
        self._fleet: Fleet | None = None
        self._usage: Answered | None = None  # requests like the run's, answered before it

    def fleet(self) -> Fleet:
        if self._fleet is None:
            here = ray_here(self._address, self._log.warning)
            self._here = here
            if not self._keep_ray:
                self._stack.callback(here.shutdown)
            self._stack.enter_context(here.in_use())
            self._stop.install()  # again: Ray sets handlers of its own
            p = self._prepared
            url = self._url.result()
            tokens = p.planner.question_tokens
            warn = self._log.warning
            self._fleet = Fleet.start(p.config, url, p.questions, tokens, warn, tier=p.tier)
            self._stack.callback(self._close)
            if self._usage is not None:
                self._fleet.paced_from(self._usage)
            for warning in self._fleet.warnings:  # the account's Budget: another job's limits
                self._log.warning(warning)
        return self._fleet

    def paced_from(self, usage: Answered | None) -> None:
        """What requests like the run's cost before it (the packing measurement's): the
        account's Budget paces by their billed tokens per estimated one from its first grant,
        instead of learning it from the run's first answers (by a 429, when it bills more)."""
        self._usage = usage
        if usage is not None and self._fleet is not None:
            self._fleet.paced_from(usage)

    def gone(self) -> bool:
        return self._here is not None and self._here.gone()

    def _close(self) -> None:
        """At the job's end (or its error): an interrupted call's fleet leaves nothing."""
        assert self._fleet is not None and self._here is not None
        self._fleet.interrupted = self._stop.requested and self._stop.cancel
        _close_fleet(self._fleet, self._here)

    def ended(self, how: Ending) -> None:
        """A finished job's workers serve the driver's next job if Ray stays up after this
        one (`evalpipe.send.fleet`); a stopped job's end with it."""
        stays = self._keep_ray or isinstance(self._here, JoinedRay)
        if self._fleet is not None:
            self._fleet.reusable = how == "finished" and stays

    def placement(self) -> tuple[int, int]:
        """(workers, nodes) of the fleet; (0, 0) when Ray was never needed."""
        return (0, 0) if self._fleet is None else self._fleet.placement()


@dataclass(frozen=True)
class _Grace:
    """How long a stopping run still waits for what is in flight: until `seconds` after the
    first signal (`CANCEL_SECONDS` at most for a cancelling one), or not at all once Ray is
    gone (its workers died with it)."""

    stop: StopSignals
    seconds: float
    ray_gone: Callable[[], bool]

    def in_first_half(self) -> bool:
        """Before half the grace period: a drain still has time (then in flight, the rest)."""
        return self.stop.left(self.seconds) > self.seconds / 2

    def over(self) -> bool:
        seconds = self.seconds
        if self.stop.cancel and self.stop.requested:  # an interrupt, not a guard rail
            seconds = min(seconds, CANCEL_SECONDS)
        return self.stop.left(seconds) <= 0 or self.ray_gone()


def _drive(
    prepared: PreparedJob,
    dispatcher: Dispatcher,
    sink: Sink,
    done: set[Any],
    progress: Progress,
    grace: _Grace,
    guards: Guards | None = None,
) -> Ending:
    """Feed rows to the dispatcher and fold answers until the corpus is done or a stop's
    grace period ends; returns how the run ended. On an error (or a second signal) every
    finished row is kept, and the error goes on."""
    skip = (lambda i: i in done) if done else None
    batches = prepared.source.batches(skip=skip)
    guards = guards or Guards()
    stop = grace.stop
    try:
        exhausted = False
        while True:
            reason = guards.check()
            if reason is not None:
                stop.halt(reason)
            if sink.check() is not None:  # the lease lost, the output away: keep what is in flight
                dispatcher.stop()
            if stop.stopping:  # a signal cancels in the Python API; the cap's stop drains
                drain = stop.drains and not dispatcher.sender.cap.over() and grace.in_first_half()
                dispatcher.stop(cancel=stop.cancel and stop.requested, drain=drain)
            reading = time.monotonic() + COLLECT_SECONDS
            steady = sink.steady()  # a lease not confirmed lately: nothing new goes out
            while steady and not exhausted and not dispatcher.stopping and dispatcher.has_room():
                with gc_paused():  # a batch's objects, not the heap's, are what it makes
                    batch = next(batches, None)
                    exhausted = batch is None
                    dispatcher.add_batch(batch or ())
                if time.monotonic() > reading:  # rows the cache answers take no room: turn
                    break
            if steady:
                dispatcher.submit()
            if dispatcher.idle() and (exhausted or dispatcher.stopping):
                break
            if dispatcher.stopping and grace.over():
                dispatcher.abandon()
                break
            if not (dispatcher.stopping or stop.stopping):  # a signal taken this turn too
                dispatcher.sender.tend(gone=grace.ray_gone())
            dispatcher.collect(timeout=COLLECT_SECONDS)
            sink.tick()
            dispatcher.caches.commit()  # the answers of this turn, in one transaction
            progress.update()
        if sink.broken is not None:
            raise sink.broken
    except EvalpipeError as exc:
        _keep_what_is_done(sink, exc)
        raise
    finally:
        progress.close()
        sink.close()  # journals what was handed over; after `finish`, nothing to do
    return "stopped" if dispatcher.stopping else "finished"


def _keep_what_is_done(sink: Sink, exc: EvalpipeError) -> None:
    """After a failure, fold what finished into parts (the run ended as `failed`); when the
    output itself cannot be written, only journal it (the next run folds it). After a second
    signal (`StopNow`) nothing is folded: `sink.close` journals what finished."""
    if isinstance(exc, OutputError):
        return
    with contextlib.suppress(OutputError):  # then what finished stays journaled
        sink.finish({"error": str(exc)}, "failed")
