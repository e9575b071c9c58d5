"""The sending side of a run: what each worker is given, and when, and what comes back.

`Sender` holds the jobs queued to send and the chunks in flight. It keeps every worker busy with a
bounded number of calls in flight, each a chunk of jobs taken from the queue as planned by the
token count as calibrated now (`Sender._take`: a row planned before the service's count was
measured is split again, or refused as over the context limit, rather than sent for the service
to refuse), and under the cost cap (`evalpipe.engine.guards.CostCap`: a job that does not fit
waits for those in flight, or stops the run).

With `packing.rows` above 1, the jobs taken for a worker are grouped into packs by the planner's
rule (`evalpipe.planning.Packer`; a job that needs several requests, or fits with no other, goes
alone) and each pack is one request (`evalpipe.send.Pack`); its results come back per job. The
first pack goes by itself, and what the service refuses or answers sets the most questions per
request (`Packer.learn`) before the others are sent.

Each chunk's results stream back as they finish (a Ray streaming generator per chunk): `collect`
returns them paired with the job they answer, for the dispatcher to fold. A worker that dies is
replaced and the unfinished jobs of its chunks go back to the queue, up to a bound: a worker that
keeps dying is a fault to report, not to hide.

A room apart from the dispatcher (`evalpipe.engine.dispatch`), which decides what becomes of each
row and folds answers back into rows: this side decides only how requests go out.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from evalpipe.config import JobConfig
from evalpipe.engine.guards import CostCap
from evalpipe.engine.progress import Counters
from evalpipe.errors import EvalpipeError
from evalpipe.input import Row
from evalpipe.planning import CacheHit, Packer, RowClassifier
from evalpipe.send import Fleet, JobResult, Pack, StateJob, sizes

MAX_ACTOR_RESTARTS = 20  # a worker that keeps dying is a fault to report, not to hide


@dataclass
class Pending:
    """A job sent (or queued): the rows waiting for its answer."""

    job: StateJob
    rows: list[Row]  # the input rows (id, position) that take its answer
    key: bytes | None  # the state key when the state is repeated in the corpus
    state_hash: bytes
    hit: CacheHit | None = None  # the answers the cache gave (the job asks the others)
    saved_tokens: int = 0
    scale: float = 1.0  # the planner's token scale its requests were planned with


@dataclass
class Chunk:
    """Jobs sent to one worker in one call; `pendings` are those not yet answered."""

    worker: int
    pendings: dict[int, Pending]


@dataclass
class Collected:
    """What one look at the streams brought: results with the jobs they answer, and jobs
    dropped (a dead worker's, while stopping)."""

    finished: list[tuple[Pending, JobResult]] = field(default_factory=list)
    dropped: list[Pending] = field(default_factory=list)


class Sender:
    """Sends queued jobs to the workers, alone or in packs, and streams results back (module
    docstring). `fleet` is the started fleet, or how to start it when the first request is due
    (a run the cache answers whole needs none)."""

    def __init__(
        self,
        config: JobConfig,
        fleet: Fleet | Callable[[], Fleet],
        classifier: RowClassifier,
        counters: Counters,
        cap: CostCap,
        packer: Packer | None,
    ) -> None:
        self.chunk, _, self.per_worker = sizes(config)
        self.fleet = fleet
        self.workers: list[Any] = fleet.workers if isinstance(fleet, Fleet) else []
        self._actors = config.concurrency.actors
        self.classifier, self.counters, self.cap, self.packer = classifier, counters, cap, packer
        self.queue: deque[Pending] = deque()
        self.streams: dict[Any, Chunk] = {}  # a chunk's results, streaming
        self.stopping = False
        self.workers_stopped = False  # told to send nothing more (a cost cap's stop lets them)
        self.dead: set[int] = set()  # workers that died, replaced on a later turn (`tend`)
        self.pack_seen = False  # a pack's answer came back: until then one pack at a time
        self.probe_sent = False  # the first pack is in flight: nothing more is sent meanwhile

    @property
    def rows_per_request(self) -> int:
        return self.packer.rows if self.packer is not None else 1

    def room(self) -> int:
        """Jobs in hand that keep every worker busy twice over."""
        workers = len(self.workers) or self._actors
        return self.chunk * self.per_worker * workers * 2 * self.rows_per_request

    def idle(self) -> bool:
        return not self.streams and not self.queue

    def tend(self, gone: bool = False) -> None:
        """Between two turns of a run that is not stopping: the account's Budget hears that
        this job still runs, and each worker that died (`_lost`) gets a successor. Not at once
        where it died: when a process group is stopped (a cgroup's kill, systemd's SIGTERM) the
        workers die a moment before the driver hears its own signal, and starting a worker asks
        the GCS, which is stopping too: a call Ray waits a minute on, then ends the driver with
        exit 1 instead of the signal's. On a Ray that is `gone` (its GCS or raylet died, no
        signal here) nothing can be started: a dead worker ends the run, which keeps its rows."""
        if gone:
            if self.dead:
                raise EvalpipeError(
                    "the run's Ray is gone (its GCS or raylet died) and its workers with it; "
                    "run the same command again to resume"
                )
            return
        if isinstance(self.fleet, Fleet):
            self.fleet.keepalive()
        for w in sorted(self.dead):
            self.workers[w] = self._started().spawn()
        self.dead.clear()

    def _started(self) -> Fleet:
        """The fleet, started now if it was not."""
        if not isinstance(self.fleet, Fleet):
            self.fleet = self.fleet()
            self.workers = self.fleet.workers
        return self.fleet

    # -- out ---------------------------------------------------------------------------------

    def submit(self) -> list[tuple[Pending, str]]:
        """Hand queued jobs to workers with room; returns the jobs refused on the way (no
        longer within the context limit by the count as calibrated now), with why."""
        refused: list[tuple[Pending, str]] = []
        if self.stopping or not self.queue:
            return refused
        self._started()
        busy = [0] * len(self.workers)
        for chunk in self.streams.values():
            busy[chunk.worker] += 1
        probing = self.packer is not None and not self.pack_seen
        if probing and self.probe_sent:
            return refused  # the first pack learns the service's cap before more are sent
        for w, worker in enumerate(self.workers):
            while w not in self.dead and busy[w] < self.per_worker and self.queue:
                taken = self._take(self.rows_per_request * (1 if probing else self.chunk), refused)
                if not taken:
                    break
                units = self._units(taken)
                stream = worker.process.remote(units)
                self.streams[stream] = Chunk(w, {p.job.index: p for p in taken})
                if self.counters.first_request is None:
                    self.counters.first_request = time.monotonic()
                if probing and any(isinstance(unit, Pack) for unit in units):
                    self.probe_sent = True
                    return refused
                busy[w] += 1
        return refused

    def _take(self, n: int, refused: list[tuple[Pending, str]]) -> list[Pending]:
        """Up to `n` queued jobs to send, each planned by the token count as calibrated now;
        a job that no longer fits at all goes to `refused`."""
        taken: list[Pending] = []
        while self.queue and len(taken) < n:
            pending = self.queue.popleft()
            if pending.scale != self.classifier.scale:
                error = self._replan(pending)
                if error is not None:
                    refused.append((pending, error))
                    continue
            if not self.cap.admit(pending.job.index, pending.job.requests):
                self.queue.appendleft(pending)  # waits under the cost cap, or stops the run
                break
            taken.append(pending)
        return taken

    def _replan(self, pending: Pending) -> str | None:
        """Plan a queued job again; the error when it no longer fits the context limit."""
        job = pending.job
        keys = [k for request in job.requests for k in request.keys]
        plan = self.classifier.replan(job.state, keys, pending.key)
        pending.scale = self.classifier.scale
        if plan.error_type is not None:
            return plan.error or ""
        pending.job = replace(job, requests=plan.requests)
        return None

    def _units(self, taken: list[Pending]) -> list[StateJob | Pack]:
        """What is sent for `taken`: each job alone, or, when packing, the jobs of one request
        each (`evalpipe.planning.packing`) in packs (a pack of one goes alone)."""
        if self.packer is None:
            return [p.job for p in taken]
        units: list[StateJob | Pack] = [p.job for p in taken if len(p.job.requests) != 1]
        single = [p.job for p in taken if len(p.job.requests) == 1]
        self.packer.scale = self.classifier.scale
        for plan in self.packer.groups([job.requests[0] for job in single]):
            if len(plan.members) == 1:
                units.append(single[plan.members[0]])
                continue
            jobs = tuple(single[i] for i in plan.members)
            fields = tuple(self.packer.field(i) for i in range(len(jobs)))
            units.append(Pack(jobs, fields, plan.tokens, plan.shares))
        return units

    # -- back --------------------------------------------------------------------------------

    def collect(self, timeout: float) -> Collected:
        """Wait up to `timeout` for results; what came back, and what a dead worker lost."""
        import ray

        found = Collected()
        if not self.streams:
            return found
        ready, _ = ray.wait(list(self.streams), num_returns=1, timeout=timeout)
        if ready:
            ready = ray.wait(list(self.streams), num_returns=len(self.streams), timeout=0)[0]
        dead: dict[int, list[Pending]] = {}
        for stream in ready:
            chunk = self.streams[stream]
            results = self._next(stream)
            if results is None:  # the stream ended, or its worker died
                del self.streams[stream]
                if chunk.pendings:
                    dead.setdefault(chunk.worker, []).extend(chunk.pendings.values())
                continue
            for result in results:
                pending = chunk.pendings.pop(result.index)
                self.cap.settle(result.index, result.input_tokens)
                if not result.abandoned:  # never sent: the job was stopping
                    self._learn(result)
                found.finished.append((pending, result))
        # After every finished result is taken: a dead worker may have finished some first.
        for w, lost in dead.items():
            found.dropped += self._lost(w, lost)
        return found

    def _next(self, stream: Any) -> list[JobResult] | None:
        """The stream's next results; None at its end or if its worker died. Errors raised
        inside a worker are re-raised as the evalpipe error they carry (a refused key)."""
        import ray
        from ray.exceptions import RayActorError, RayTaskError

        try:
            results: list[JobResult] = ray.get(next(stream))
        except (StopIteration, RayActorError):
            return None
        except RayTaskError as exc:
            if isinstance(exc.cause, EvalpipeError):
                raise exc.cause from None
            raise
        return results

    def _lost(self, w: int, lost: list[Pending]) -> list[Pending]:
        """Worker `w` died with jobs unanswered. Stopping, they are dropped (returned);
        otherwise they (and those of its other chunks) go back to the queue and a new worker
        takes over (`tend`, on the next turn)."""
        if self.stopping:
            return lost
        for stream in [s for s, c in self.streams.items() if c.worker == w]:
            lost += self.streams.pop(stream).pendings.values()
        for pending in lost:  # admitted again when sent again
            self.cap.settle(pending.job.index, 0)
        self.probe_sent = False  # the first pack may have been among them: send it again
        self.queue.extendleft(reversed(lost))
        self.counters.actor_restarts += 1
        if self.counters.actor_restarts > MAX_ACTOR_RESTARTS:
            raise EvalpipeError(
                f"workers died {self.counters.actor_restarts} times; see the Ray logs "
                "(out of memory? killed?) and run the same command again to resume"
            )
        self.dead.add(w)
        return []

    def _learn(self, result: JobResult) -> None:
        """A packed result: the first pack is back, and what the service refused or answered
        sets the most questions per request (`Packer.learn`)."""
        if self.packer is None:
            return
        if result.pack > 1 or result.questions_refused or result.questions_answered:
            self.pack_seen = True
            c = self.counters
            c.packs += result.requests if result.pack > 1 else 0
            c.rows_packed += 1 if result.pack > 1 else 0
            c.pack_refusals += 1 if result.questions_refused else 0
            if result.questions_refused or result.questions_answered:
                self.packer.learn(result.questions_refused, result.questions_answered)

    # -- the end -----------------------------------------------------------------------------

    def stop(self, cancel: bool = False, drain: bool = False) -> list[Pending]:
        """Send nothing more: returns the queue, dropped; tells the workers to send nothing
        more (with `cancel`, to cancel their requests in flight too: `Worker.cancel`), or with
        `drain` not yet: they send the jobs they hold (the cost cap's stop: admitted under it)."""
        dropped: list[Pending] = []
        if not self.stopping:
            self.stopping = True
            dropped = list(self.queue)
            self.queue.clear()
        if not (drain or self.workers_stopped):
            self.workers_stopped = True
            for worker in self.workers:
                (worker.cancel if cancel else worker.stop).remote()
        return dropped

    def abandon(self) -> list[Pending]:
        """Give up what is still in flight (the grace period ran out): returns its jobs."""
        lost = [p for chunk in self.streams.values() for p in chunk.pendings.values()]
        self.streams.clear()
        return lost
