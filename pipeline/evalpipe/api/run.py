"""Scoring from Python: `score`, `ascore`, `plan`, `read` and `Job`, on the CLI's own engine.

A call builds the same job config a YAML file would (`evalpipe.config`), prepares it and runs
it with `evalpipe.session`, so the account's limits, the answer cache, repeated states, the
service's token count and exactly-once hold as for `evalpipe run`. A DataFrame (polars, pandas),
a pyarrow Table or a DuckDB relation is written to a Parquet file first (`evalpipe.api.call`);
the output is written to `output` (a rerun resumes and pays nothing again), else to a folder the
call keeps under the cache home, so that the same call again resumes it too (`evalpipe.api.kept`),
and comes back as a polars DataFrame with the output table's columns, rows in input order. One
run per output, as for `evalpipe run`: a call holds its output's lock while it runs.

Where a notebook's event loop holds the calling thread, the job runs on a thread of its own
while the caller waits. Errors are the public `evalpipe.errors` tree; nothing here exits the
process.

An interrupt (a kernel's SIGINT, Ctrl-C in a script) stops the call within a few seconds and
raises KeyboardInterrupt: unlike `evalpipe run`'s stop, which lets the requests in flight finish
(a scheduler's contract), the call cancels them (`StopSignals(cancel=True)`), so none is answered
or billed after it; the answers received before are written and kept in the answer cache (the
same call again pays nothing for them), and no actor of the call stays alive: its workers, the
idle workers of earlier calls and the account's Budget (unless another job uses it) end, so the
next call starts clean (with new workers: a few seconds). In a script SIGINT's handler is the
job's for the call (a second interrupt leaves at once, what is journaled kept); where a loop
runs (a notebook, `asyncio.run`), the waiting caller's is, and asks the job on its thread to stop
the same way. An awaited `ascore` that is cancelled (`asyncio.run`'s answer to Ctrl-C) or
interrupted stops its job the same way before CancelledError goes on.

Guard rails (`max_cost=`, `max_duration=`, `deadline=`: `evalpipe.engine.guards`) stop a call as
they stop `evalpipe run`, then raise `CostCapReached` or `DeadlineReached`; a call again resumes.

Ray: the first call starts a local Ray (or joins RAY_ADDRESS) quietly, on a thread that lives
as long as the process (`evalpipe.cluster.owner`), and leaves it up for the next; a Ray already
running in the process (the user's `ray.init`) is used as it is, with an
`EvalpipeWarning` (once) where its settings differ from what the call needs
(`evalpipe.cluster.running_differences`). With `ep.Service("embedded", ...)`, the first call
starts the embedded service and the next calls of the same key and limits find it
(`evalpipe.service.kept_service`): one account, one Budget, until the process exits.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import threading
import warnings
from collections.abc import Iterator, Sequence
from pathlib import Path
from types import FrameType
from typing import Any

import polars as pl

from evalpipe.api.call import Questions, input_order, job_configs
from evalpipe.api.kept import tidy, used
from evalpipe.api.questions import Service
from evalpipe.api.reading import read
from evalpipe.cluster import running_differences
from evalpipe.config import JobConfig, load_config, with_limits
from evalpipe.engine import Display, EventLog, Outcome, StopNow, StopSignals
from evalpipe.errors import EvalpipeError, OutputLocked, ResumeConflict
from evalpipe.planning import prepare
from evalpipe.session import ProgressOption, display_for, opened, plan_job


class EvalpipeWarning(UserWarning):
    """What `evalpipe run` prints as a warning (the embedded service's made-up answers, a
    model alias), and a running Ray whose settings differ from what the call needs. Filter
    it as any warning: `warnings.filterwarnings("ignore", category=ep.EvalpipeWarning)`. The
    job's own warnings while it runs (an answer cache that cannot be used, another job's limits
    on the account) are EvalpipeWarnings too: the API prints nothing but its progress."""


class WarningLog(EventLog):
    """The job's voice in the API: its warnings are Python warnings (`EvalpipeWarning`)."""

    def warning(self, message: str) -> None:
        warnings.warn(message, EvalpipeWarning, stacklevel=2)


class Job:
    """A job config, run or planned from Python: `Job.from_yaml(path).run()` is `evalpipe
    run path`, with its summary returned instead of printed."""

    def __init__(self, config: JobConfig) -> None:
        self.config = config

    @classmethod
    def from_yaml(cls, path: str | Path, overrides: Sequence[str] = ()) -> Job:
        """The job in a YAML config; `overrides` are `--set` style `KEY=VALUE` strings."""
        return cls(load_config(path, overrides))

    def run(self, *, restart: bool = False, progress: ProgressOption = True,
            max_cost: float | None = None, max_duration: float | str | None = None,
            deadline: str | None = None) -> dict[str, Any]:  # fmt: skip
        """Run (or resume) the job; returns its summary (the manifest's). `restart`: start the
        output over (`--restart`). `progress`: as for `score`. `max_cost`, `max_duration` and
        `deadline`: the guard rails, as for `score`."""
        config = with_limits(self.config, **_limits(max_cost, max_duration, deadline))
        display = display_for(progress)
        return _run(config, restart=restart, progress=display).summary

    def plan(self) -> dict[str, Any]:
        """`evalpipe plan`'s figures, as a dict; sends nothing."""
        return plan_job(prepare(self.config))


def score(
    data: Any,
    *,
    id: str,
    state: str | Sequence[str],
    questions: Questions,
    service: Service,
    output: str | Path | None = None,
    progress: ProgressOption = True,
    max_cost: float | None = None,
    max_duration: float | str | None = None,
    deadline: str | None = None,
) -> pl.DataFrame:
    """Score every row of `data` and return the output table as a polars DataFrame, rows in
    input order. `data`: a polars or pandas DataFrame, a pyarrow Table, a DuckDB relation, or
    a Parquet path or URI. `state`: the column holding each row's state, or a list of columns
    (an object state). `output`: where the table is kept (a rerun then resumes); by default a
    folder under the cache home named by the call (its data, questions, service and model),
    so that the same call again resumes it and returns at once (evalpipe.api.kept).
    An interrupt stops it within a few seconds (module docstring).

    `progress`, on stderr, in a terminal or a notebook: True (default: in a notebook a widget
    updated in place where ipywidgets is installed, else a rich bar redrawn in place; a rich
    bar in a terminal; a plain line every 10 s elsewhere), False or None (nothing at all),
    "plain", "rich", "tqdm" (needs tqdm), or a function called with an `ep.ProgressSnapshot`
    at most five times a second and with the last one (`final`); what it raises ends the
    call. A bar is the call's own, cleared when it returns, closed however it ends; another
    value is a ConfigError before anything is read or sent (how-to: "Show progress").

    `max_cost` (dollars; needs the service's `pricing`), `max_duration` (seconds, "30m", "6h")
    and `deadline` ("06:00", an ISO time) are `evalpipe run`'s: a call they stop writes what
    finished, then raises `CostCapReached` or `DeadlineReached`; the same call resumes."""
    display, stop = display_for(progress), StopSignals(cancel=True)
    limits = _limits(max_cost, max_duration, deadline)
    return score_frame(stop, data, id, state, questions, service, output, display, limits)


def score_frame(
    stop: StopSignals,
    data: Any,
    id_column: str,
    state: str | Sequence[str],
    questions: Questions,
    service: Service,
    output: str | Path | None,
    progress: Display,
    limits: dict[str, Any] | None = None,
) -> pl.DataFrame:
    with job_configs(data, id_column, state, questions, service, output, keep=True) as configs:
        configs = [with_limits(config, **(limits or {})) for config in configs]
        config = _scored(configs, stop, progress)
        table = read(config.output.path).collect()
        order = input_order(config)
    if len(configs) > 1:  # this call's output is kept: others unused for long are not
        with contextlib.suppress(OSError, EvalpipeError):  # tidying never fails a call
            tidy(keep=Path(configs[0].output.path))
    return order.join(table, on=id_column, how="left").sort("__order").drop("__order")


def _scored(configs: Sequence[JobConfig], stop: StopSignals, progress: Display) -> JobConfig:
    """Run the first config; the next when the first one's (kept) output cannot be made or
    another process holds it (`evalpipe.api.kept`). Returns the config that ran."""
    *kept, last = configs
    for config in kept:
        try:
            used(Path(config.output.path))
        except OSError:  # a cache home that cannot be written: the call is not kept
            continue
        try:
            try:
                _run(config, stop=stop, progress=progress)
            except ResumeConflict:  # a damaged kept folder: it is ours, start it over
                _run(config, stop=stop, progress=progress, restart=True)
            return config
        except OutputLocked:  # the same call in another notebook: this one elsewhere
            continue
    _run(last, stop=stop, progress=progress)
    return last


async def ascore(
    data: Any,
    *,
    id: str,
    state: str | Sequence[str],
    questions: Questions,
    service: Service,
    output: str | Path | None = None,
    progress: ProgressOption = True,
    max_cost: float | None = None,
    max_duration: float | str | None = None,
    deadline: str | None = None,
) -> pl.DataFrame:
    """`score` for async callers, with the same options (`progress` and the guard rails
    included): the job runs on a thread, the event loop keeps running.
    Cancelling the awaiting task (`asyncio.run`'s answer to Ctrl-C, a timeout) stops the job
    as an interrupt does: what is in flight is cancelled, then CancelledError is raised."""
    stop = StopSignals(cancel=True)
    limits = _limits(max_cost, max_duration, deadline)
    options = (data, id, state, questions, service, output, display_for(progress), limits)
    job = asyncio.ensure_future(asyncio.to_thread(_stoppable, stop, *options))
    try:
        with interrupt_asks(stop, then_the_callers=True):  # however the loop's owner reacts
            frame = await asyncio.shield(job)
    except asyncio.CancelledError:
        stop.ask()
        await asyncio.wait([job])  # its requests cancelled, its actors ended: a few seconds
        raise
    if frame is None:  # stopped by the job's own thread: an interrupt it caught
        raise KeyboardInterrupt("stopped; the answers received are kept")
    return frame


def _stoppable(stop: StopSignals, *options: Any) -> pl.DataFrame | None:
    """`score_frame` on an executor's thread, None when stopped (KeyboardInterrupt must not
    cross into the event loop, which would re-raise it out of the loop itself)."""
    try:
        return score_frame(stop, *options)
    except KeyboardInterrupt:
        return None


def plan(
    data: Any,
    *,
    id: str,
    state: str | Sequence[str],
    questions: Questions,
    service: Service,
) -> dict[str, Any]:
    """What scoring `data` would cost and take (`evalpipe plan`'s figures); sends nothing."""
    with job_configs(data, id, state, questions, service, None) as configs:
        return plan_job(prepare(configs[-1]))


# --------------------------------------------------------------------------- the job


def _limits(max_cost: Any, max_duration: Any, deadline: Any) -> dict[str, Any]:
    """The guard rails' arguments as `limits` keys (`evalpipe.config.with_limits`)."""
    return {"max_cost_usd": max_cost, "max_duration": max_duration, "deadline": deadline}


def _run(
    config: JobConfig,
    *,
    restart: bool = False,
    progress: Display,
    stop: StopSignals | None = None,
) -> Outcome:
    """Run the job here, or on a thread of its own when an event loop holds this thread."""
    stop = stop or StopSignals(cancel=True)  # an interrupt cancels what is in flight
    if _loop_running():
        return _on_a_thread(config, stop, restart, progress)
    return _job(config, stop, restart, progress)


def _loop_running() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


def _job(config: JobConfig, stop: StopSignals, restart: bool, progress: Display) -> Outcome:
    """The job, stopped by an interrupt (in the main thread: the handlers are ours for the
    call, then the caller's again; on another, `_on_a_thread` asks): the requests in flight
    are cancelled, and KeyboardInterrupt is raised once what was answered is written."""
    stop.install()
    try:
        with opened(config, WarningLog(), keep_service=True) as session:  # for the next call
            for message in running_differences(None, config.service.api_key_env):
                _warn_once(message)
            outcome = session.run(restart=restart, display=progress, stop=stop, keep_ray=True)
    except StopNow:  # a second interrupt: at once, what is journaled is kept
        raise KeyboardInterrupt("stopped at once; finished rows are journaled") from None
    finally:
        stop.restore()
    if outcome.halted is not None:  # the cost cap or the time limit: rows written, resumable
        raise outcome.halted
    if outcome.ended_how == "stopped":
        raise KeyboardInterrupt(f"stopped by {stop.name}; {outcome.rows_committed} rows written")
    return outcome


_WARNED: set[str] = set()


def _warn_once(message: str) -> None:
    """An EvalpipeWarning the process has not shown yet (a notebook calls again and again)."""
    if message not in _WARNED:
        _WARNED.add(message)
        warnings.warn(message, EvalpipeWarning, stacklevel=5)


def _on_a_thread(config: JobConfig, stop: StopSignals, restart: bool, progress: Display) -> Outcome:
    done: dict[str, Any] = {}

    def work() -> None:
        try:
            done["outcome"] = _job(config, stop, restart, progress)
        except BaseException as exc:  # raised again in the caller's thread
            done["error"] = exc

    thread = threading.Thread(target=work, name="evalpipe-score", daemon=True)
    with interrupt_asks(stop):
        thread.start()
        try:
            while thread.is_alive():
                thread.join(0.1)
        except KeyboardInterrupt:  # raised by the caller's own handler (a kernel's)
            stop.ask()  # the job cancels what is in flight, keeps what was answered, ends
            _join(thread)
            raise
    if "error" in done:
        raise done["error"]
    outcome: Outcome = done["outcome"]
    return outcome


def _join(thread: threading.Thread) -> None:
    """Wait for a stopping job (a few seconds): further interrupts meanwhile are ignored, as
    leaving now would leave its actors behind."""
    while thread.is_alive():
        with contextlib.suppress(KeyboardInterrupt):
            thread.join()


@contextlib.contextmanager
def interrupt_asks(stop: StopSignals, then_the_callers: bool = False) -> Iterator[None]:
    """In the main thread, SIGINT asks the job to stop for the call's length: the handler of
    a running loop may not raise (`asyncio.run`'s only cancels its main task, which cannot
    run before a blocking call returns); the job's thread then raises KeyboardInterrupt.
    `then_the_callers`: the caller's handler runs too (an awaiting `ascore`: `asyncio.run`
    cancels it, a kernel raises), so the job stops whichever way the interrupt is taken."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def asks(signum: int, frame: FrameType | None) -> None:
        stop.ask()
        if then_the_callers and callable(before):
            before(signum, frame)

    before = signal.signal(signal.SIGINT, asks)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, before)
