"""What the user sees while a job runs and when it ends: counters, live progress, the summary.

One engine (`Progress`) turns the job's counters into a `ProgressSnapshot` every turn of the
driver and hands it to a `Display`, at most once per the display's `interval`, and always a last
time, in `finally`, when the job ends (`close`). The CLI's display is `LogDisplay`: on a terminal
a rich progress bar; otherwise (a scheduler's log) a progress event every `interval` seconds (a
plain line, or a JSON line: `evalpipe.engine.events`), so nightly logs stay readable. The Python
API's displays (rich, tqdm, plain lines, silence, a callback) are in `evalpipe.session.displays`.
The summary, a dict first and text second, is `evalpipe.engine.summary`'s.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from evalpipe.engine.events import EventLog
from evalpipe.planning import UNKNOWN, Price

WATCH_SECONDS = 0.25  # how often, at most, the run's metrics get a new sample


@dataclass
class Counters:
    """Running totals of a job, updated by the driver as results arrive."""

    rows_total: int
    rows_skipped: int = 0  # committed by an earlier run
    rows_done: int = 0
    answered: int = 0
    errors: Counter[str] = field(default_factory=Counter)
    network_causes: Counter[str] = field(default_factory=Counter)  # rows, by NetworkError.cause
    requests: int = 0
    attempts: int = 0
    retries: int = 0
    rate_limited: int = 0
    refused_for_length: int = 0  # requests the service refused as too long, split and resent
    requests_failed: int = 0  # requests that ended in an error, after their retries
    input_tokens: int = 0
    reused: int = 0  # rows answered from an identical state's answer
    rows_from_cache: int = 0  # rows the answer cache answered whole (nothing sent)
    questions_from_cache: int = 0  # answers taken from the cache (whole rows and parts of rows)
    cache_saved_tokens: int = 0  # what those would have cost, by the plan's estimate
    cache: str = "off"  # the answer cache: "on", or "off: why" (evalpipe.cache.answers)
    actor_restarts: int = 0
    workers: int = 0  # workers started, replacements included
    nodes: int = 0  # the Ray nodes they ran on
    models: Counter[str] = field(default_factory=Counter)
    price: Price = UNKNOWN  # the config's (evalpipe.planning.price)
    service: str = ""  # who answers: its origin, or "embedded" (ServiceConfig.identity)
    token_ratio: str = ""  # the kept ratio the run planned with (evalpipe.planning.ratios), if any
    packing: dict[str, Any] = field(default_factory=dict)  # rows per request and why (packcheck)
    canary: dict[str, Any] | None = None  # the canary's result (evalpipe.preflight.canary)
    calibration: dict[str, Any] | None = None  # the calibration applied, as the summary shows it
    packs: int = 0  # requests that carried more than one row
    rows_packed: int = 0  # rows answered by such a request
    pack_refusals: int = 0  # rows whose pack was refused as too many questions and halved
    rows_by_request: int = 0  # rows answered (or failed) by a request of this run
    started: float = field(default_factory=time.monotonic)
    first_request: float | None = None

    @property
    def elapsed(self) -> float:
        return max(1e-9, time.monotonic() - self.started)

    def eta(self) -> float | None:
        """Seconds left at the pace since the first request; None until an answer came back
        (rows refused before sending, or start-up, say nothing of the pace)."""
        if self.first_request is None or self.requests == 0:
            return None
        left = self.rows_total - self.rows_skipped - self.rows_done
        sending = max(1e-9, time.monotonic() - self.first_request)
        return left * sending / self.rows_done


@dataclass(frozen=True)
class ProgressSnapshot:
    """Where a running job stands: what a progress callback receives (`ep.score(...,
    progress=callback)`), several times a second at most and once more when the job ends.

    Counts only grow from one snapshot to the next. `rows_done` counts the rows this call
    finished plus those an earlier run committed (`rows_skipped`); the last snapshot (`final`)
    of a job that finished has `rows_done == rows_total`. Rates are since the first request
    (0 while nothing was sent); `eta_seconds` is None until an answer came back; `cost_usd`
    is None when the price is unknown."""

    rows_done: int
    rows_total: int
    rows_skipped: int  # committed by an earlier run (a resumed `output`)
    rows_in_error: int
    rows_from_cache: int  # answered whole by the answer cache: nothing sent
    requests: int  # answered requests
    retries: int
    rate_limited_429: int
    input_tokens: int  # what the service billed
    requests_per_second: float
    tokens_per_second: float
    elapsed_seconds: float  # since the job started
    eta_seconds: float | None
    cost_usd: float | None
    final: bool = False  # the job's last snapshot (it ended: finished, stopped or failed)


def snapshot(c: Counters, final: bool = False) -> ProgressSnapshot:
    """The counters as they stand, as a `ProgressSnapshot`."""
    since = c.first_request if c.first_request is not None else c.started
    sending = max(1e-9, time.monotonic() - since)
    return ProgressSnapshot(
        rows_done=c.rows_done + c.rows_skipped,
        rows_total=c.rows_total,
        rows_skipped=c.rows_skipped,
        rows_in_error=sum(c.errors.values()),
        rows_from_cache=c.rows_from_cache,
        requests=c.requests,
        retries=c.retries,
        rate_limited_429=c.rate_limited,
        input_tokens=c.input_tokens,
        requests_per_second=c.attempts / sending,
        tokens_per_second=c.input_tokens / sending,
        elapsed_seconds=c.elapsed,
        eta_seconds=c.eta(),
        cost_usd=c.price.cost(c.input_tokens),
        final=final,
    )


def figures(s: ProgressSnapshot) -> dict[str, Any]:
    """A `progress` event's figures: rates since the first request, errors so far, ETA, money
    spent."""
    return {
        "rows_done": s.rows_done,
        "rows_total": s.rows_total,
        "requests_per_second": round(s.requests_per_second, 2),
        "tokens_per_second": round(s.tokens_per_second, 1),
        "rate_limited_429": s.rate_limited_429,
        "retries": s.retries,
        "rows_in_error": s.rows_in_error,
        "eta_seconds": None if s.eta_seconds is None else round(s.eta_seconds, 1),
        "cost_usd": s.cost_usd,
    }


def progress_line(s: ProgressSnapshot, rows: bool = True) -> str:
    """The progress line: `15/50 rows  1.2 req/s  ...  ETA 30s  spent $0.0123` (`rows`: with
    the rows done, which a bar shows itself)."""
    eta = s.eta_seconds
    done = f"{s.rows_done}/{s.rows_total} rows  " if rows else ""
    spent = "" if s.cost_usd is None else f"  spent ${s.cost_usd:.4f}"
    return (
        f"{done}{s.requests_per_second:.1f} req/s  {s.tokens_per_second:.0f} tok/s  "
        f"429s {s.rate_limited_429}  retries {s.retries}  errors {s.rows_in_error}  "
        f"ETA {'?' if eta is None else f'{eta:.0f}s'}{spent}"
    )


class Display(Protocol):
    """Where progress goes. `update` gets a snapshot at most every `interval` seconds (0:
    every turn of the driver, about ten a second); `close` gets the last one, always (in
    `finally`, after an error too), and must leave nothing running (no thread, no live
    display). A display starts whatever it draws with on its first `update`."""

    interval: float

    def update(self, snapshot: ProgressSnapshot) -> None: ...

    def close(self, snapshot: ProgressSnapshot) -> None: ...


class LogDisplay:
    """`evalpipe run`'s display: a rich bar on a terminal, otherwise a `progress` event (a
    plain line, or a JSON line) every `interval` seconds. `last_line`: a last plain line when
    the job ends (the Python API's `progress="plain"`; the CLI prints its summary instead);
    `bar=False`: lines on a terminal too."""

    def __init__(
        self, log: EventLog, interval: float = 10.0, last_line: bool = False, bar: bool = True
    ) -> None:
        self._log = log
        self._bar: Any = None
        self._task: Any = None
        self._last_line = last_line
        self._tty = bar and not log.is_json and log.stream.isatty()
        self.interval = 0.0 if self._tty else interval

    def _start_bar(self, s: ProgressSnapshot) -> None:
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

        self._bar = Progress(
            BarColumn(bar_width=20),
            MofNCompleteColumn(),
            TextColumn("{task.fields[line]}"),
            console=Console(file=self._log.stream),
            transient=False,
        )
        todo = s.rows_total - s.rows_skipped
        self._task = self._bar.add_task("rows", total=todo, line="")
        self._bar.start()

    def update(self, s: ProgressSnapshot) -> None:
        if self._tty:
            if self._bar is None:
                self._start_bar(s)
            self._bar.update(
                self._task,
                completed=s.rows_done - s.rows_skipped,
                line=progress_line(s, rows=False),
            )
            return
        self._log.emit("progress", progress_line(s), **figures(s))

    def close(self, s: ProgressSnapshot) -> None:
        if self._tty:
            self.update(s)
            self._bar.stop()
        elif self._last_line:
            self._log.emit("progress", progress_line(s), **figures(s))


class Progress:
    """The job's live progress: the counters, as snapshots, to a display (the CLI's
    `LogDisplay` on `log` unless another is given), throttled to its `interval`; `watch` (the
    run's metrics take a sample) is called every `WATCH_SECONDS`, and once more at the end."""

    def __init__(
        self,
        c: Counters,
        log: EventLog,
        interval: float = 10.0,
        display: Display | None = None,
        watch: Callable[[], None] | None = None,
    ) -> None:
        self._c = c
        self._display = display if display is not None else LogDisplay(log, interval)
        self._last = -float("inf")
        self._closed = False
        self._watch = watch
        self._watched = -float("inf")

    def figures(self) -> dict[str, Any]:
        """The live figures of a `progress` event."""
        return figures(snapshot(self._c))

    def line(self) -> str:
        return progress_line(snapshot(self._c))

    def update(self, force: bool = False) -> None:
        now = time.monotonic()
        if self._watch is not None and now - self._watched >= WATCH_SECONDS:
            self._watched = now
            self._watch()
        if self._closed or not (force or now - self._last >= self._display.interval):
            return
        self._last = now
        self._display.update(snapshot(self._c))

    def close(self) -> None:
        """The last snapshot, and the display closed (once; call it in `finally`)."""
        if not self._closed:
            self._closed = True
            if self._watch is not None:
                self._watch()
            self._display.close(snapshot(self._c, final=True))
