"""The driver's side of a run: what becomes of each row, and the answers folded back to rows.

`Dispatcher` takes rows a batch at a time and asks the row classifier (`evalpipe.planning`) what
becomes of each: rows answered by the answer cache are finished at once (a row the cache answers in
part sends only the other questions, and its answers are merged), a row whose state another row
already sent waits for that answer, a sample row the packing measurement asked alone keeps that
answer, and the rest are queued as jobs for the sending side (`evalpipe.engine.sending.Sender`,
which keeps every worker busy and brings the results back). Each result is folded into rows (the
row that was sent and every row waiting on the same state) and handed to the sink at once; fresh
answers go to the answer cache (answers given in packs to a cache apart). The corpus is read only
as fast as answers come back: `has_room` is the back-pressure.

`stop` ends the intake: queued jobs are dropped, workers send nothing more, and what is in flight
is still folded as it comes back.

With a shared tier, a state another host is paying for is parked until its answer is in the
shared cache or its claim lapses (`evalpipe.engine.claims`), so two hosts pay it once.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

from evalpipe.cache import JobCache
from evalpipe.contract import CountRatio
from evalpipe.engine.claims import Parked
from evalpipe.engine.folding import position, result_row
from evalpipe.engine.progress import Counters
from evalpipe.engine.sending import Pending, Sender
from evalpipe.input import Row
from evalpipe.output import ArrowAnswers, RowResult
from evalpipe.planning import CacheHit, Decision, Fate, RowClassifier, Sampled, state_key
from evalpipe.send import JobResult, StateJob

_NO_CALL = (None, None, 0, 0, 0, 0)  # a JobResult's error and call counts, for cached answers


@dataclass
class Caches:
    """Where fresh answers go (`commit` once per turn, by the runner): answers given alone to
    `alone`, answers given in packs to `packed` (apart: `evalpipe.cache`)."""

    alone: JobCache | None = None
    packed: JobCache | None = None

    def commit(self) -> None:
        for cache in (self.alone, self.packed):
            if cache is not None:
                cache.commit()

    def of(self, result: JobResult) -> JobCache | None:
        return self.alone if result.pack == 1 else self.packed

    def lookup(self, states: Sequence[bytes]) -> dict[bytes, CacheHit]:
        """The hits of `states`: answers given alone, and (a packing run's) given in packs."""
        hits = dict(self.alone.lookup(states)) if self.alone is not None else {}
        missing = [s for s in states if s not in hits] if self.packed is not None else []
        return {**self.packed.lookup(missing), **hits} if self.packed and missing else hits


@dataclass
class Dispatcher:
    """Rows in, jobs to the sender, answers folded back to rows (module docstring).

    `fixed_ratio`: the run plans with a kept ratio (as `plan` did), measuring without replanning;
    `sampled`: rows the packing measurement asked alone, which keep those answers."""

    sender: Sender
    classifier: RowClassifier
    counters: Counters
    emit: Callable[[list[RowResult]], None]
    caches: Caches = field(default_factory=Caches)
    fixed_ratio: bool = False
    sampled: Sequence[Sampled] = ()
    jobs: dict[int, Pending] = field(default_factory=dict)
    in_flight: dict[bytes, Pending] = field(default_factory=dict)  # repeated states, by key
    answered: dict[bytes, JobResult] = field(default_factory=dict)
    count: CountRatio = field(default_factory=CountRatio)  # the service's tokens per one of ours
    next_index: int = 0

    def __post_init__(self) -> None:
        self.preanswered = {state_key(s.state): s for s in self.sampled}
        self.parked = Parked(self.caches.alone)  # states another host pays for
        self._fresh: list[Pending] = []  # this batch's jobs, claimed before they are queued

    @property
    def stopping(self) -> bool:
        return self.sender.stopping

    # -- intake ------------------------------------------------------------------------------

    def has_room(self) -> bool:
        """Fewer jobs in hand than keep every worker busy twice over: read more rows."""
        return len(self.jobs) < self.sender.room()

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
        self.sender.queue.extend(self.parked.claim(self._fresh))
        self._fresh = []
        if cached:
            self._count_from_cache(cached)
        if done or cached:
            self.emit(sorted([*done, *cached], key=position) if done and cached else done or cached)

    def _queue(self, row: Row, decision: Decision) -> None:
        assert decision.state_hash is not None
        job = StateJob(self.next_index, row.state, decision.requests)
        pending = Pending(
            job, [row], decision.key, decision.state_hash, decision.hit, decision.saved_tokens,
            self.classifier.scale,
        )  # fmt: skip
        self.next_index += 1
        self.jobs[pending.job.index] = pending
        self._fresh.append(pending)
        if decision.key is not None:
            self.in_flight[decision.key] = pending

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
        job = StateJob(-1, s.state, (s.request,))
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

    def _from_elsewhere(self, pending: Pending, hit: CacheHit) -> None:
        """A parked state another host answered: its rows from the cache, as if found there."""
        self._drop(pending)
        answers = (
            dict(hit.answers) if pending.hit is None else {**pending.hit.answers, **hit.answers}
        )
        if pending.key is not None:
            self.answered[pending.key] = JobResult(-1, answers, hit.model, 0, *_NO_CALL)
        now = time.time()
        rows = [
            RowResult(
                row.id,
                answers,
                hit.model,
                0,
                None,
                None,
                now,
                pending.state_hash,
                len(answers),
                False,
                row.position,
            )
            for row in pending.rows
        ]
        self._count_from_cache(rows)
        self.emit(rows)

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
    def submit(self) -> None:
        """Hand queued jobs to the workers; rows no longer within the context limit by the
        count as calibrated now are refused here. Parked states another host answered are
        finished, those whose claim lapsed queued."""
        answered, lapsed = self.parked.recheck(self.caches.lookup, self.jobs.values())
        for pending, hit in answered:
            self._from_elsewhere(pending, hit)
        self.sender.queue.extend(lapsed)
        refused: list[RowResult] = []
        for pending, error in self.sender.submit():
            self._drop(pending)
            decision = Decision(Fate.CONTEXT_LIMIT, pending.state_hash, pending.key, error=error)
            refused.extend(self._fail(row, decision) for row in pending.rows)
        if refused:
            self.emit(refused)

    def idle(self) -> bool:
        return self.sender.idle() and not self.parked

    def stop(self, cancel: bool = False, drain: bool = False) -> None:
        """Take no more rows (`Sender.stop`: the queue dropped, the workers told)."""
        for pending in [*self.sender.stop(cancel, drain), *self.parked.drop()]:
            self._drop(pending)

    def abandon(self) -> int:
        """Give up what is still in flight (the grace period ran out); returns how many jobs.
        Their rows stay unwritten: the next run sends them again."""
        lost = self.sender.abandon()
        for pending in lost:
            self._drop(pending)
        return len(lost)

    def _drop(self, pending: Pending) -> None:
        self.jobs.pop(pending.job.index, None)
        if pending.key is not None:
            self.in_flight.pop(pending.key, None)

    def collect(self, timeout: float) -> None:
        """Wait up to `timeout` for results and fold them into rows."""
        collected = self.sender.collect(timeout)
        for pending, result in collected.finished:
            self._finish(pending, result)
        for pending in collected.dropped:
            self._drop(pending)

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
        if result.abandoned:  # never sent: the job was stopping
            self._drop(pending)
            return
        del self.jobs[result.index]
        self._count_calls(result)
        self._measure_count(result)
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
        cache = self.caches.of(result)
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
            self.sender.cap.measure(
                self.count.ratio, self.count.samples
            )  # its estimates, by its count
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
