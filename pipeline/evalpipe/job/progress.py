"""What the user sees while a job runs and when it ends: counters, a live line, the summary.

On a terminal the live view is a rich progress bar; otherwise (a scheduler's log) a progress
event every `interval` seconds (a plain line, or a JSON line: `evalpipe.job.events`), so nightly
logs stay readable. The summary is a dict first (it goes into the manifest and the `summary`
event) and text second.
"""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from evalpipe.config import EMBEDDED_WARNING
from evalpipe.job.events import EventLog
from evalpipe.planning import UNKNOWN, Price, shown_usd


@dataclass
class Counters:
    """Running totals of a job, updated by the driver as results arrive."""

    rows_total: int
    rows_skipped: int = 0  # committed by an earlier run
    rows_done: int = 0
    answered: int = 0
    errors: Counter[str] = field(default_factory=Counter)
    requests: int = 0
    attempts: int = 0
    retries: int = 0
    rate_limited: int = 0
    refused_for_length: int = 0  # requests the service refused as too long, split and resent
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


def summary(c: Counters, rpm: float, tps: float) -> dict[str, Any]:
    """The end-of-job figures, as plain data for the manifest and for printing."""
    wall = c.elapsed
    # Rates over the sending time: start-up (Ray, the service check) is reported on its own.
    startup = (c.first_request - c.started) if c.first_request is not None else wall
    sending = max(1e-9, wall - startup)
    return {
        "rows_total": c.rows_total,
        "rows_skipped_committed_earlier": c.rows_skipped,
        "rows_answered": c.answered,
        "rows_in_error": dict(sorted(c.errors.items())),
        "rows_reused_identical_state": c.reused,
        "requests": c.requests,
        "attempts": c.attempts,
        "retries": c.retries,
        "rate_limited_429": c.rate_limited,
        "requests_refused_for_length": c.refused_for_length,
        "input_tokens": c.input_tokens,
        "cost_usd": c.price.cost(c.input_tokens),
        "price_per_million_input_tokens": c.price.per_million,
        "price_source": c.price.source,
        "service": c.service,
        "token_ratio": c.token_ratio or None,
        "cache": c.cache,
        "rows_from_cache": c.rows_from_cache,
        "questions_from_cache": c.questions_from_cache,
        "cache_saved_tokens": c.cache_saved_tokens,
        "cache_saved_usd": c.price.cost(c.cache_saved_tokens),
        "wall_seconds": round(wall, 3),
        "startup_seconds": round(startup, 3),
        "achieved_rpm": round(c.attempts / sending * 60, 1),
        "rpm_limit": rpm,
        "achieved_tps": round(c.input_tokens / sending, 1),
        "tps_limit": tps,
        "models": dict(c.models),
        "actor_restarts": c.actor_restarts,
        "workers": c.workers,
        "nodes": c.nodes,
    }


def _refused_line(s: dict[str, Any]) -> list[str]:
    refused = s.get("requests_refused_for_length", 0)
    if not refused:
        return []
    return [f"                {refused} requests refused for length, split and sent again"]


def _cache_line(s: dict[str, Any]) -> list[str]:
    """The answer cache's line; summaries written before it existed have none."""
    if "cache" not in s:
        return []
    if s["cache"] != "on":
        return [f"  cache         {s['cache']}"]
    return [
        f"  cache         {s['rows_from_cache']} rows and {s['questions_from_cache']} questions "
        f"answered from the cache, saving ~{s['cache_saved_tokens']:,} tokens "
        f"({shown_usd(s['cache_saved_usd'])})"
    ]


def _cost_part(s: dict[str, Any]) -> str:
    """`cost $0.001234 ($0.042 per million input tokens (pricing.default))`; summaries written
    before the price was the user's carry the price they used in the text only."""
    if s.get("cost_usd") is None:
        return f"cost unknown ({s.get('price_source', 'no price')})"
    per_million = s.get("price_per_million_input_tokens")
    if per_million is None:
        return f"cost ${s['cost_usd']:.6f}"
    return f"cost ${s['cost_usd']:.6f} (${per_million:g} per million, {s['price_source']})"


def _service_lines(s: dict[str, Any]) -> list[str]:
    service = s.get("service")
    if not service:
        return []
    lines = [f"  service       {service}"]
    if s.get("token_ratio"):
        lines.append(f"  token ratio   {s['token_ratio']} (planned with it)")
    if service == "embedded":
        lines.append(f"                {EMBEDDED_WARNING}")
    return lines


def _workers_line(s: dict[str, Any]) -> list[str]:
    """Where the job's workers ran; summaries written before it was counted have none."""
    if not s.get("workers"):
        return []
    restarts = s.get("actor_restarts") or 0
    nodes = f"{s['nodes']} node{'s' if s['nodes'] != 1 else ''}"
    replaced = f", {restarts} of them replacing workers that died" if restarts else ""
    return [f"  workers       {s['workers']} on {nodes}{replaced}"]


def format_summary(s: dict[str, Any]) -> str:
    errors = ", ".join(f"{k} {v}" for k, v in s["rows_in_error"].items()) or "none"
    models = ", ".join(s["models"]) or "none"
    lines = [
        "evalpipe summary",
        f"  rows          {s['rows_total']} total, {s['rows_answered']} answered, "
        f"{sum(s['rows_in_error'].values())} in error ({errors}), "
        f"{s['rows_skipped_committed_earlier']} committed by an earlier run",
        f"  reused        {s['rows_reused_identical_state']} rows answered from an identical state",
        f"  requests      {s['requests']} ({s['attempts']} attempts, {s['retries']} retries, "
        f"{s['rate_limited_429']} answered 429)",
        *_refused_line(s),
        f"  input tokens  {s['input_tokens']:,}  {_cost_part(s)}",
        *_cache_line(s),
        f"  wall time     {s['wall_seconds']:.1f} s ({s['startup_seconds']:.1f} s to the first "
        "request)",
        f"  throughput    {s['achieved_rpm']:.0f} RPM of {s['rpm_limit']:.0f} limit, "
        f"{s['achieved_tps']:.0f} tokens/s of {s['tps_limit']:.0f}",
        *_workers_line(s),
        *_service_lines(s),
        f"  models        {models}",
    ]
    return "\n".join(lines)


class Progress:
    """Live progress: a rich bar on a terminal, otherwise a `progress` event (a plain line, or
    a JSON line) every `interval` seconds."""

    def __init__(self, c: Counters, log: EventLog, interval: float = 10.0) -> None:
        self._c = c
        self._log = log
        self._interval = interval
        self._last = 0.0
        self._bar: Any = None
        self._task: Any = None
        if not log.is_json and log.stream.isatty():
            self._start_bar()

    def _start_bar(self) -> None:
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

        self._bar = Progress(
            BarColumn(bar_width=20),
            MofNCompleteColumn(),
            TextColumn("{task.fields[line]}"),
            console=Console(file=self._log.stream),
            transient=False,
        )
        todo = self._c.rows_total - self._c.rows_skipped
        self._task = self._bar.add_task("rows", total=todo, line="")
        self._bar.start()

    def figures(self) -> dict[str, Any]:
        """The live figures: rates since the first request, errors so far, ETA, money spent."""
        c = self._c
        since = c.first_request if c.first_request is not None else c.started
        wall = max(1e-9, time.monotonic() - since)
        eta = c.eta()
        return {
            "rows_done": c.rows_done + c.rows_skipped,
            "rows_total": c.rows_total,
            "requests_per_second": round(c.attempts / wall, 2),
            "tokens_per_second": round(c.input_tokens / wall, 1),
            "rate_limited_429": c.rate_limited,
            "retries": c.retries,
            "rows_in_error": sum(c.errors.values()),
            "eta_seconds": None if eta is None else round(eta, 1),
            "cost_usd": c.price.cost(c.input_tokens),
        }

    def line(self) -> str:
        f = self.figures()
        eta = f["eta_seconds"]
        done = "" if self._bar is not None else f"{f['rows_done']}/{f['rows_total']} rows  "
        return (
            f"{done}{f['requests_per_second']:.1f} req/s  "
            f"{f['tokens_per_second']:.0f} tok/s  429s {f['rate_limited_429']}  "
            f"retries {f['retries']}  errors {f['rows_in_error']}  "
            f"ETA {'?' if eta is None else f'{eta:.0f}s'}" + self._spent()
        )

    def _spent(self) -> str:
        """`  spent $0.0123` at the config's price; nothing when the price is unknown."""
        usd = self._c.price.cost(self._c.input_tokens)
        return "" if usd is None else f"  spent ${usd:.4f}"

    def update(self, force: bool = False) -> None:
        if self._bar is not None:
            self._bar.update(self._task, completed=self._c.rows_done, line=self.line())
            return
        now = time.monotonic()
        if force or now - self._last >= self._interval:
            self._last = now
            self._log.emit("progress", self.line(), **self.figures())

    def close(self) -> None:
        if self._bar is not None:
            self.update()
            self._bar.stop()
