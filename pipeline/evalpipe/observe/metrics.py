"""The run's metrics, defined once: names, kinds, units, help, and how each reads the job's count.

The job counts in one place (`evalpipe.engine.progress.Counters`); the driver hands a `Sample` of
those counts to the run's telemetry a few times a second. Everything that exports metrics
(Prometheus' `/metrics` and Pushgateway, OpenTelemetry over OTLP) and the docs' list of metrics
read `METRICS`, so a name, a label or a unit is written here and nowhere else.

Names follow Prometheus' conventions: the `evalpipe_` prefix, `_total` for counters, base
units (seconds, dollars). OpenTelemetry gets the same names without the `_total` suffix (its
Prometheus exporters add it back to monotonic sums) and the UCUM `unit`.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

RATE_WINDOW = 10.0  # seconds: the "in use" rates are over the last this many seconds

Kind = Literal["counter", "gauge"]
Labelled = list[tuple[dict[str, str], float]]


@dataclass(frozen=True)
class Sample:
    """The job's counts at one moment (`evalpipe.engine.progress.sample` makes it from the
    counters). Counts only grow; `time` is `time.monotonic()`."""

    time: float
    rows_total: int
    rows_skipped: int  # committed by an earlier run
    rows_done: int  # finished by this run, whatever the outcome
    rows_answered: int  # answered by a request of this run (not the cache, not reused)
    rows_from_cache: int
    rows_reused: int
    rows_in_error: Mapping[str, int]  # by error type
    requests_answered: int
    requests_failed: int
    requests_refused_for_length: int
    attempts: int
    retries: int
    rate_limited: int
    input_tokens: int  # the service's count
    cost_usd: float | None  # None: no price
    cache_hits: int  # answers (questions) taken from the cache
    cache_saved_tokens: int
    eta_seconds: float | None


@dataclass(frozen=True)
class RunFacts:
    """What a run is, for the labels and the limits beside its counts."""

    run_id: str
    job: str
    output: str
    model: str
    service: str
    rpm_limit: float
    tps_limit: float
    started_unix: float = field(default_factory=time.time)


@dataclass
class Reading:
    """What the metrics read: the last sample, the rates over the last `RATE_WINDOW`
    seconds, and the run's facts and state."""

    run: RunFacts
    sample: Sample | None = None
    state: str = "running"  # then finished, stopped or failed
    ended_unix: float | None = None
    canary: dict[str, Any] | None = None  # the canary's result (evalpipe.preflight.canary)
    _history: deque[tuple[float, int, int]] = field(default_factory=deque)

    def add(self, sample: Sample) -> None:
        self.sample = sample
        history = self._history
        history.append((sample.time, sample.attempts, sample.input_tokens))
        while len(history) > 2 and sample.time - history[1][0] >= RATE_WINDOW:
            history.popleft()

    def rates(self) -> tuple[float, float]:
        """(requests per minute, input tokens per second) over the last window; 0 before two
        samples a moment apart."""
        if len(self._history) < 2:
            return 0.0, 0.0
        (t0, a0, k0), (t1, a1, k1) = self._history[0], self._history[-1]
        span = t1 - t0
        if span <= 0:
            return 0.0, 0.0
        return (a1 - a0) / span * 60, (k1 - k0) / span


@dataclass(frozen=True)
class Metric:
    """One metric: its Prometheus name, kind, UCUM unit, help, label names, and its values
    (label values and a number; none while it is unknown) in a reading."""

    name: str
    kind: Kind
    unit: str
    help: str
    labels: tuple[str, ...]
    values: Callable[[Reading], Labelled]

    @property
    def otel_name(self) -> str:
        return self.name.removesuffix("_total")


def _of(read: Callable[[Sample], float | None]) -> Callable[[Reading], Labelled]:
    """The values of an unlabelled metric of the sample (none before the first sample, or
    while `read` says None)."""

    def values(r: Reading) -> Labelled:
        value = None if r.sample is None else read(r.sample)
        return [] if value is None else [({}, float(value))]

    return values


def _rows(r: Reading) -> Labelled:
    s = r.sample
    if s is None:
        return []
    found: Labelled = [
        ({"outcome": "answered", "error_type": ""}, s.rows_answered),
        ({"outcome": "cached", "error_type": ""}, s.rows_from_cache),
        ({"outcome": "reused", "error_type": ""}, s.rows_reused),
    ]
    found += [
        ({"outcome": "error", "error_type": k}, n) for k, n in sorted(s.rows_in_error.items())
    ]
    return found


def _requests(r: Reading) -> Labelled:
    s = r.sample
    if s is None:
        return []
    return [
        ({"status": "answered"}, s.requests_answered),
        ({"status": "failed"}, s.requests_failed),
        ({"status": "refused_for_length"}, s.requests_refused_for_length),
    ]


def _rows_left(s: Sample) -> int:
    return max(0, s.rows_total - s.rows_skipped - s.rows_done)


def _info(r: Reading) -> Labelled:
    run = r.run
    labels = {"run_id": run.run_id, "model": run.model, "service": run.service, "state": r.state}
    return [(labels, 1.0)]


def _ended(r: Reading) -> Labelled:
    return [] if r.ended_unix is None else [({}, r.ended_unix)]


def _canary_passed(r: Reading) -> Labelled:
    return [] if r.canary is None else [({}, 1.0 if r.canary["passed"] else 0.0)]


def _canary_agreement(r: Reading) -> Labelled:
    """Per question: the share agreeing with the labels, and the share unchanged since the
    last run."""
    canary = r.canary or {}
    found: Labelled = [
        ({"question": t["question"], "against": "labels"}, t["share"])
        for t in canary.get("tests", [])
        if t["against"] == "labels" and t["share"] is not None
    ]
    for key, c in (canary.get("changed") or {}).items():
        if c["rows"]:
            found.append(({"question": key, "against": "last_run"}, 1 - c["changed"] / c["rows"]))
    return found


METRICS: tuple[Metric, ...] = (
    Metric("evalpipe_rows_total", "counter", "{row}",
           "Rows finished by this run, by outcome: answered (by a request), cached (the answer "
           "cache answered them whole), reused (an identical state's answer), error (with its "
           "error_type).", ("outcome", "error_type"), _rows),
    Metric("evalpipe_rows", "gauge", "{row}",
           "Rows in the corpus (or the --limit/--sample selection).", (),
           _of(lambda s: s.rows_total)),
    Metric("evalpipe_rows_committed_earlier", "gauge", "{row}",
           "Rows an earlier run had committed: not sent again.", (),
           _of(lambda s: s.rows_skipped)),
    Metric("evalpipe_rows_left", "gauge", "{row}", "Rows not finished yet.", (),
           _of(_rows_left)),
    Metric("evalpipe_eta_seconds", "gauge", "s",
           "Seconds left at the pace since the first request (absent until an answer came).",
           (), _of(lambda s: s.eta_seconds)),
    Metric("evalpipe_requests_total", "counter", "{request}",
           "Requests, by how they ended: answered, failed (after their retries), or "
           "refused_for_length (split and sent again as smaller requests).", ("status",),
           _requests),
    Metric("evalpipe_attempts_total", "counter", "{attempt}",
           "HTTP attempts of the requests, retries included.", (),
           _of(lambda s: s.attempts)),
    Metric("evalpipe_retries_total", "counter", "{attempt}",
           "Attempts that were retries of a failed one.", (), _of(lambda s: s.retries)),
    Metric("evalpipe_rate_limited_total", "counter", "{response}",
           "429 (rate limited) answers of the service.", (), _of(lambda s: s.rate_limited)),
    Metric("evalpipe_input_tokens_total", "counter", "{token}",
           "Input tokens the service billed (its count, from each answer's usage).", (),
           _of(lambda s: s.input_tokens)),
    Metric("evalpipe_spend_dollars_total", "counter", "USD",
           "What the billed input tokens cost, in US dollars, at the config's price (absent "
           "without a price).", (), _of(lambda s: s.cost_usd)),
    Metric("evalpipe_requests_per_minute", "gauge", "{request}/min",
           f"Attempts per minute over the last {RATE_WINDOW:g} seconds.", (),
           lambda r: [({}, r.rates()[0])] if r.sample else []),
    Metric("evalpipe_requests_per_minute_limit", "gauge", "{request}/min",
           "The account's request limit (limits.requests_per_minute).", (),
           lambda r: [({}, r.run.rpm_limit)]),
    Metric("evalpipe_input_tokens_per_second", "gauge", "{token}/s",
           f"Billed input tokens per second over the last {RATE_WINDOW:g} seconds.", (),
           lambda r: [({}, r.rates()[1])] if r.sample else []),
    Metric("evalpipe_input_tokens_per_second_limit", "gauge", "{token}/s",
           "The account's input-token limit (limits.tokens_per_second).", (),
           lambda r: [({}, r.run.tps_limit)]),
    Metric("evalpipe_cache_hits_total", "counter", "{answer}",
           "Answers (one question of one state) taken from the answer cache.", (),
           _of(lambda s: s.cache_hits)),
    Metric("evalpipe_cache_saved_input_tokens_total", "counter", "{token}",
           "Input tokens the cache's answers would have cost, by the plan's estimate.", (),
           _of(lambda s: s.cache_saved_tokens)),
    Metric("evalpipe_run_info", "gauge", "1",
           "1, labelled with the run's id, model, service and state (running, finished, "
           "stopped or failed).", ("run_id", "model", "service", "state"), _info),
    Metric("evalpipe_run_start_time_seconds", "gauge", "s",
           "When the run started (Unix time).", (), lambda r: [({}, r.run.started_unix)]),
    Metric("evalpipe_run_end_time_seconds", "gauge", "s",
           "When the run ended (Unix time; absent while it runs).", (), _ended),
    Metric("evalpipe_canary_passed", "gauge", "1",
           "1 when the canary (canary.labels) passed, 0 when it stopped the run before the "
           "corpus (absent without a canary).", (), _canary_passed),
    Metric("evalpipe_canary_agreement", "gauge", "1",
           "The canary's agreement per question: against=labels, the share of its rows agreeing "
           "with their labels; against=last_run, the share of its answers unchanged since the "
           "last run on the same model.", ("question", "against"), _canary_agreement),
)  # fmt: skip
