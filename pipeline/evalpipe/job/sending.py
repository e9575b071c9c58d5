"""The dispatcher's sending side: what each worker is given, and when.

`Dispatcher` (`evalpipe.job.dispatch`) is a `Sending`: it keeps every worker busy with a bounded
number of calls in flight, each a chunk of jobs taken from the queue as planned by the token
count as calibrated now, and under the cost cap (`evalpipe.job.guards.CostCap`: a job that does
not fit waits for those in flight, or stops the run).

With `packing.rows` above 1, the jobs taken for a worker are grouped into packs by the planner's
rule (`evalpipe.planning.Packer`; a job that needs several requests, or fits with no other, goes
alone) and each pack is one request (`evalpipe.send.Pack`); its results come back per job. The
first pack goes by itself, and what the service refuses or answers sets the most questions per
request (`Packer.learn`) before the others are sent.

A room of its own so that how requests are made up (replanning, the cost cap, packs, the probe)
reads apart from the dispatcher's intake and the folding of results back into rows. The state
is the dispatcher's: `Sending` declares what of it this side reads and feeds.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from evalpipe.input import Row
from evalpipe.job.guards import CostCap
from evalpipe.job.progress import Counters
from evalpipe.output import RowResult
from evalpipe.planning import CacheHit, Decision, Fate, Packer, RowClassifier
from evalpipe.send import Fleet, Job, JobResult, Pack


@dataclass
class Chunk:
    """Jobs sent to one worker in one call; `pendings` are those not yet answered."""

    worker: int
    pendings: dict[int, Pending]


@dataclass
class Pending:
    """A job sent (or queued): the rows waiting for its answer."""

    job: Job
    rows: list[Row]  # the input rows (id, position) that take its answer
    key: bytes | None  # the state key when the state is repeated in the corpus
    state_hash: bytes
    hit: CacheHit | None = None  # the answers the cache gave (the job asks the others)
    saved_tokens: int = 0
    scale: float = 1.0  # the planner's token scale its requests were planned with


class Sending:
    """Sends queued jobs to the workers, alone or in packs (module docstring)."""

    # The dispatcher's fields (`evalpipe.job.dispatch.Dispatcher`), read and fed here.
    fleet: Fleet | Callable[[], Fleet]  # or how to start it, when the first request is due
    workers: list[Any]
    chunk: int  # jobs per call
    per_worker: int  # calls in flight per worker
    classifier: RowClassifier
    counters: Counters
    emit: Callable[[list[RowResult]], None]
    queue: deque[Pending]
    streams: dict[Any, Chunk]  # a chunk's results, streaming
    stopping: bool
    cap: CostCap
    packer: Packer | None  # rows per request above 1: how jobs are packed
    pack_seen: bool  # a pack's answer came back: until then one pack at a time
    probe_sent: bool  # the first pack is in flight: nothing more is sent meanwhile
    # The dispatcher's: a job it no longer holds, a row refused before any request.
    _drop: Callable[[Pending], None]
    _fail: Callable[[Row, Decision], RowResult]

    def _started(self) -> Fleet:
        """The fleet, started now if it was not: a run the cache answers whole needs none."""
        if not isinstance(self.fleet, Fleet):
            self.fleet = self.fleet()
            self.workers = self.fleet.workers
        return self.fleet

    def submit(self) -> None:
        if self.stopping or not self.queue:
            return
        self._started()
        busy = [0] * len(self.workers)
        for chunk in self.streams.values():
            busy[chunk.worker] += 1
        rows = self.packer.rows if self.packer is not None else 1
        probing = self.packer is not None and not self.pack_seen
        if probing and self.probe_sent:
            return  # the first pack learns the service's cap before more are sent
        for w, worker in enumerate(self.workers):
            while busy[w] < self.per_worker and self.queue:
                taken = self._take(rows if probing else self.chunk * rows)
                if not taken:
                    break
                units = self._units(taken)
                stream = worker.process.remote(units)
                self.streams[stream] = Chunk(w, {p.job.index: p for p in taken})
                if self.counters.first_request is None:
                    self.counters.first_request = time.monotonic()
                if probing and any(isinstance(unit, Pack) for unit in units):
                    self.probe_sent = True
                    return
                busy[w] += 1

    def _take(self, n: int) -> list[Pending]:
        """Up to `n` queued jobs to send, each planned by the token count as calibrated now:
        rows planned before the service's count was measured are split again (or refused as
        over the context limit) rather than sent for the service to refuse."""
        taken: list[Pending] = []
        refused: list[RowResult] = []
        while self.queue and len(taken) < n:
            pending = self.queue.popleft()
            if pending.scale == self.classifier.scale or self._replan(pending, refused):
                if not self.cap.admit(pending.job.index, pending.job.requests):
                    self.queue.appendleft(pending)  # waits under the cost cap, or stops the run
                    break
                taken.append(pending)
        if refused:
            self.emit(refused)
        return taken

    def _replan(self, pending: Pending, refused: list[RowResult]) -> bool:
        """Plan a queued job again; False (its rows refused, into `refused`) when it no longer
        fits the context limit at all."""
        job = pending.job
        keys = [k for request in job.requests for k in request.keys]
        plan = self.classifier.replan(job.state, keys, pending.key)
        pending.scale = self.classifier.scale
        if plan.error_type is None:
            pending.job = replace(job, requests=plan.requests)
            return True
        self._drop(pending)
        decision = Decision(Fate.CONTEXT_LIMIT, pending.state_hash, pending.key, error=plan.error)
        refused.extend(self._fail(row, decision) for row in pending.rows)
        return False

    def _units(self, taken: list[Pending]) -> list[Job | Pack]:
        """What is sent for `taken`: each job alone, or, when packing, the jobs of one request
        each (`evalpipe.planning.packing`) in packs (a pack of one goes alone)."""
        if self.packer is None:
            return [p.job for p in taken]
        units: list[Job | Pack] = [p.job for p in taken if len(p.job.requests) != 1]
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

    def _learn_packing(self, result: JobResult) -> None:
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
