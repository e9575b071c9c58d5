"""The driver's side of the Ray actors: the dispatcher that feeds the fleet (`evalpipe.send.fleet`).

`Dispatcher` takes rows a batch at a time, asks
the row classifier (`evalpipe.planning`) what becomes of each (rows answered by the answer cache
are finished at once; a row the cache answers in part sends only the other questions, and its
answers are merged), hands fresh answers to the cache, and keeps every worker busy with chunks
of jobs, a bounded number per worker (back-pressure: the corpus is read only as fast as
answers come back). Each chunk's results stream back as they finish (a Ray streaming
generator per chunk); each is folded into rows — the row that was sent and every row waiting
on the same state — and handed to the sink at once. A worker that dies is replaced and the
unfinished jobs of its chunks go back to the queue, up to a bound: a worker that keeps dying
is a fault to report, not to hide. `stop` ends the intake: queued jobs are dropped, workers
send nothing more, and what is in flight is still folded as it comes back. Under a cost cap
a job is sent only if it fits (`evalpipe.job.guards.CostCap`: here spend and in-flight meet).

What each worker is sent, and when, is the sending side (`evalpipe.job.sending`): jobs planned
again by the count as calibrated now, admitted under the cost cap, and with `packing.rows` above
1 grouped into packs, the first pack alone as a probe. A pack's results come back per job, so
everything here (folding, repeats, the cache, the journal) is as for a job alone, but that
answers given in packs go to a cache apart, and the rows the packing measurement asked alone
keep those answers.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from evalpipe.cache import JobCache
from evalpipe.config import JobConfig
from evalpipe.contract import CountRatio
from evalpipe.errors import EvalpipeError
from evalpipe.input import Row
from evalpipe.job.folding import position, result_row
from evalpipe.job.guards import CostCap
from evalpipe.job.progress import Counters
from evalpipe.job.sending import Chunk, Pending, Sending
from evalpipe.output import ArrowAnswers, RowResult
from evalpipe.planning import Decision, Fate, Packer, RowClassifier, state_key
from evalpipe.send import Fleet, Job, JobResult, sizes

MAX_ACTOR_RESTARTS = 20  # a worker that keeps dying is a fault to report, not to hide
_NO_CALL = (None, None, 0, 0, 0, 0)  # a JobResult's error and call counts, for cached answers


@dataclass
class Dispatcher(Sending):
    """Keeps every worker busy (sending: `Sending`), folds results back to rows, and replaces
    dead workers."""

    config: JobConfig
    fleet: Fleet | Callable[[], Fleet]  # or how to start it, when the first request is due
    classifier: RowClassifier
    counters: Counters
    emit: Callable[[list[RowResult]], None]
    cache: JobCache | None = None  # fresh answers go to it (`commit` is the runner's)
    queue: deque[Pending] = field(default_factory=deque)
    jobs: dict[int, Pending] = field(default_factory=dict)
    streams: dict[Any, Chunk] = field(default_factory=dict)  # a chunk's results, streaming
    in_flight: dict[bytes, Pending] = field(default_factory=dict)  # repeated states, by key
    answered: dict[bytes, JobResult] = field(default_factory=dict)
    next_index: int = 0
    stopping: bool = False
    count: CountRatio = field(default_factory=CountRatio)  # the service's tokens per one of ours
    fixed_ratio: bool = False  # planning with a kept ratio (as `plan` did): measure, keep it
    cap: CostCap = field(default_factory=CostCap)  # the run's cost cap (none: unlimited)
    workers_stopped: bool = False  # told to send nothing more (a cost cap's stop lets them)
    packer: Packer | None = None  # rows per request above 1: how jobs are packed
    pack_seen: bool = False  # a pack's answer came back: until then one pack at a time
    probe_sent: bool = False  # the first pack is in flight: nothing more is sent meanwhile
    preanswered: dict[bytes, Any] = field(default_factory=dict)  # sample rows, by state key
    packed_cache: JobCache | None = None  # answers given in packs go to it, apart

    def __post_init__(self) -> None:
        self.chunk, _, self.per_worker = sizes(self.config)
        self.workers = self.fleet.workers if isinstance(self.fleet, Fleet) else []

    # -- intake ------------------------------------------------------------------------------

    def has_room(self) -> bool:
        """Fewer jobs in hand than keep every worker busy twice over: read more rows."""
        workers = len(self.workers) or self.config.concurrency.actors
        rows = self.packer.rows if self.packer is not None else 1
        return len(self.jobs) < self.chunk * self.per_worker * workers * 2 * rows

    def add_batch(self, rows: Sequence[Row]) -> None:
        """Take rows: errors now, answers from the cache or reused, waits on an identical
        state, or jobs. The rows finished at once go to the sink together."""
        done: list[RowResult] = []
        cached: list[RowResult] = []
        now = time.time()  # when the rows finished at once were scored: this batch's time
        for row, decision in zip(rows, self.classifier.classify_batch(rows), strict=True):
            key = decision.key
            if decision.fate is Fate.CACHED:
                cached.append(self._from_cache(row, decision, now))
            elif decision.fate is Fate.INVALID or decision.fate is Fate.CONTEXT_LIMIT:
                done.append(self._fail(row, decision))
            elif decision.fate is Fate.REPEAT:
                assert key is not None
                if key in self.answered:
                    done.append(self._reuse(row, self.answered[key], key))
                else:
                    self.in_flight[key].rows.append(row)
            elif decision.state_hash in self.preanswered:
                done.append(self._preanswered(row, decision))
            else:
                self._queue(row, decision)
        if cached:
            self._count_from_cache(cached)
        if done or cached:
            self.emit(sorted([*done, *cached], key=position) if done and cached else done or cached)

    def _queue(self, row: Row, decision: Decision) -> None:
        assert decision.state_hash is not None
        job = Job(self.next_index, row.state, decision.requests)
        pending = Pending(
            job, [row], decision.key, decision.state_hash, decision.hit, decision.saved_tokens,
            self.classifier.scale,
        )  # fmt: skip
        self.next_index += 1
        self.jobs[pending.job.index] = pending
        self.queue.append(pending)
        if decision.key is not None:
            self.in_flight[decision.key] = pending

    def answered_alone(self, sampled: Sequence[Any]) -> None:
        """Rows the packing measurement asked alone (`evalpipe.job.packmeasure.Sampled`): they
        keep those answers, written when the corpus reaches them, never sent again."""
        for s in sampled:
            self.preanswered[state_key(s.state)] = s

    def _preanswered(self, row: Row, decision: Decision) -> RowResult:
        assert decision.state_hash is not None
        s = self.preanswered.pop(decision.state_hash)
        result = JobResult(
            -1, s.answers, s.model, s.billed, None, None, 1, s.attempts, s.attempts - 1,
            s.rate_limited, estimated_tokens=s.request.tokens,
        )  # fmt: skip
        if decision.key is not None:  # its later repeats reuse it
            self.answered[decision.key] = result
        self._count_calls(result)
        job = Job(-1, s.state, (s.request,))
        self._merge_cached(Pending(job, [row], None, decision.state_hash), result)
        self._count_rows(result, 1)
        return result_row(row, result, result.input_tokens, decision.state_hash, time.time())

    def _fail(self, row: Row, decision: Decision) -> RowResult:
        error_type = decision.fate.value
        self.counters.errors[error_type] += 1
        self.counters.rows_done += 1
        failed = RowResult(row.id, None, None, 0, error_type, decision.error or "", time.time())
        failed.state_hash, failed.position = decision.state_hash, row.position
        return failed

    def _from_cache(self, row: Row, decision: Decision, now: float) -> RowResult:
        """A row the cache answered whole: nothing to send (counted by `_count_from_cache`)."""
        hit, state_hash = decision.hit, decision.state_hash
        assert hit is not None and state_hash is not None
        if decision.key is not None:  # its later repeats reuse it (kept for the whole run)
            kept = hit.answers.detached() if isinstance(hit.answers, ArrowAnswers) else hit.answers
            self.answered[decision.key] = JobResult(-1, kept, hit.model, 0, *_NO_CALL)
        self.counters.cache_saved_tokens += decision.saved_tokens
        return RowResult(
            row.id, hit.answers, hit.model, 0, None, None, now, state_hash,
            len(hit.answers), False, row.position,
        )  # fmt: skip

    def _count_from_cache(self, rows: list[RowResult]) -> None:
        c = self.counters
        c.rows_from_cache += len(rows)
        c.rows_done += len(rows)
        c.answered += len(rows)
        c.models.update(str(r.model) for r in rows)
        c.questions_from_cache += sum(r.cached for r in rows)

    def _count_cached(self, questions: int, saved_tokens: int) -> None:
        self.counters.questions_from_cache += questions
        self.counters.cache_saved_tokens += saved_tokens

    def _reuse(self, row: Row, result: JobResult, state_hash: bytes) -> RowResult:
        self.counters.reused += 1
        self._count_rows(result, 1)
        return result_row(row, result, 0, state_hash, time.time(), reused=True)

    # -- the run's turns, its end, and what comes back ---------------------------------------
    def commit_caches(self) -> None:
        """The fresh answers of this turn, in one transaction per cache."""
        for cache in (self.cache, self.packed_cache):
            if cache is not None:
                cache.commit()

    def keepalive(self) -> None:
        """Every turn of the run: the account's Budget hears that this job still runs."""
        if isinstance(self.fleet, Fleet):
            self.fleet.keepalive()

    def idle(self) -> bool:
        return not self.streams and not self.queue

    def stop(self, cancel: bool = False, drain: bool = False) -> None:
        """Take no more rows: drop the queue, tell the workers to send nothing more; with
        `cancel`, to cancel their requests in flight too (`Worker.cancel`); with `drain`, not
        yet: they send the jobs they hold (the cost cap's stop: admitted under it)."""
        if not self.stopping:
            self.stopping = True
            for pending in self.queue:
                self._drop(pending)
            self.queue.clear()
        if drain or self.workers_stopped:
            return
        self.workers_stopped = True
        for worker in self.workers:
            (worker.cancel if cancel else worker.stop).remote()

    def abandon(self) -> int:
        """Give up what is still in flight (the grace period ran out); returns how many jobs.
        Their rows stay unwritten: the next run sends them again."""
        lost = [p for chunk in self.streams.values() for p in chunk.pendings.values()]
        for pending in lost:
            self._drop(pending)
        self.streams.clear()
        return len(lost)

    def _drop(self, pending: Pending) -> None:
        self.jobs.pop(pending.job.index, None)
        if pending.key is not None:
            self.in_flight.pop(pending.key, None)

    def collect(self, timeout: float) -> None:
        """Wait up to `timeout` for results and fold them into rows."""
        import ray

        if not self.streams:
            return
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
                self._finish(chunk.pendings.pop(result.index), result)
        # After every finished result is folded: a dead worker may have finished some first.
        for w, lost in dead.items():
            self._lost(w, lost)

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

    def _lost(self, w: int, lost: list[Pending]) -> None:
        """Worker `w` died with jobs unanswered. Stopping, they are dropped; otherwise they
        (and those of its other chunks) go back to the queue and a new worker takes over."""
        if self.stopping:
            for pending in lost:
                self._drop(pending)
            return
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
        self.workers[w] = self._started().spawn()

    def _count_calls(self, result: JobResult) -> None:
        """A row sent by request (not answered by the cache or a repeat): its calls' counts."""
        c = self.counters
        c.rows_by_request += 1
        c.requests += result.requests
        c.attempts += result.attempts
        c.retries += result.retries
        c.rate_limited += result.rate_limited
        c.refused_for_length += result.refused_for_length
        c.requests_failed += result.failed_requests
        c.input_tokens += result.input_tokens

    def _finish(self, pending: Pending, result: JobResult) -> None:
        self.cap.settle(result.index, result.input_tokens)
        if result.abandoned:  # never sent: the job was stopping
            self._drop(pending)
            return
        del self.jobs[result.index]
        self._count_calls(result)
        self._measure_count(result)
        self._learn_packing(result)
        cached = self._merge_cached(pending, result) if result.error_type is None else 0
        if cached:
            assert pending.hit is not None
            answers = {**pending.hit.answers, **(result.answers or {})}
            model = "+".join(sorted({*pending.hit.model.split("+"), result.model or "?"}))
            result = replace(result, answers=answers, model=model)
        if pending.key is not None:
            self.in_flight.pop(pending.key, None)
            if result.error_type is None:
                self.answered[pending.key] = result
            else:
                self.classifier.forget(pending.key)
        self._count_rows(result, len(pending.rows))
        self.counters.reused += len(pending.rows) - 1
        now, digest = time.time(), pending.state_hash
        first, *repeats = pending.rows
        rows = [result_row(first, result, result.input_tokens, digest, now, cached=cached)]
        rows += [result_row(row, result, 0, digest, now, reused=True) for row in repeats]
        self.emit(rows)

    def _merge_cached(self, pending: Pending, result: JobResult) -> int:
        """An answered job: its fresh answers go to the cache; returns how many of the row's
        answers the cache gave (0 when none)."""
        cache = self.cache if result.pack == 1 else self.packed_cache
        if cache is not None and result.answers:
            cache.add(
                pending.state_hash, result.answers, result.model or "?", result.input_tokens,
                pending.job.requests,
            )  # fmt: skip
        if pending.hit is None:
            return 0
        self._count_cached(len(pending.hit.answers), pending.saved_tokens)
        return len(pending.hit.answers)

    def _measure_count(self, result: JobResult) -> None:
        """Plan with the service's token count, measured from what it billed for the
        requests it answered (the halves of a request refused for length included)."""
        if result.estimated_tokens and result.input_tokens:
            self.count.add(result.estimated_tokens, result.input_tokens)
            self.cap.measure(self.count.ratio, self.count.samples)  # its estimates, by its count
            if not self.fixed_ratio:
                self.classifier.calibrate(self.count.ratio)

    def _count_rows(self, result: JobResult, n: int) -> None:
        c = self.counters
        c.rows_done += n
        if result.error_type is None:
            c.answered += n
            c.models[result.model or "?"] += n
        else:
            c.errors[result.error_type] += n
            if result.error_cause is not None:
                c.network_causes[result.error_cause] += n
