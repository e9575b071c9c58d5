"""One `evalpipe run`, from the command line to the exit code, as a scheduler needs it.

The CLI parses flags; this module holds what a run is around the job itself: the signals
(`evalpipe.engine.StopSignals`), the log (`evalpipe.engine.EventLog`), the config with its `--set`
overrides, the start-up sequence (`evalpipe.session.start`: the checks before anything is sent,
the one-run-per-output lock, the connection), the job, and how its end becomes an exit code:
the table is `evalpipe.errors.exit_codes()` (`--help` and the reference print it).
A run its cost cap or its time limit stopped (`evalpipe.engine.guards`) prints its summary, then
one line (what was spent and what the rest would cost, or when the time ran out), and exits 6
or 7. `launched` is the same run for a caller that keeps what came of it (`Launched`: the exit
code, the outcome, the error that set the code, the job as prepared): the schedulers' front
ends (`evalpipe.session.scheduled`).
"""

from __future__ import annotations

import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from evalpipe.config import load_config
from evalpipe.engine import (
    GRACE_SECONDS,
    EventLog,
    LogFormat,
    Outcome,
    StopNow,
    StopSignals,
    format_summary,
    new_run_id,
)
from evalpipe.errors import INVALID_STATE, EvalpipeError, TooManyErrors
from evalpipe.input import Selection
from evalpipe.planning import PreparedJob
from evalpipe.session.start import opened
from evalpipe.stores import shown


@dataclass(frozen=True)
class RunOptions:
    """`evalpipe run`'s flags."""

    config: Path
    overrides: tuple[str, ...] = ()
    restart: bool = False
    ray_address: str | None = None
    progress_interval: float = 10.0
    log_format: LogFormat = "text"
    grace_seconds: float = GRACE_SECONDS
    max_error_rate: float | None = None
    rows: Selection | None = None  # --limit / --sample: a few rows to try first
    lineage: bool = True  # the run's own OpenLineage events (off where a scheduler sends them)


@dataclass
class Launched:
    """What came of one run: its exit code, its outcome (None when it failed or was stopped at
    once), the error that set the code (None for 0 and a stop by signal), and the job as it
    was prepared (None when it failed before that: a bad config)."""

    exit_code: int
    outcome: Outcome | None = None
    error: EvalpipeError | None = None
    prepared: PreparedJob | None = None


def run_command(options: RunOptions, started: float, stop: StopSignals) -> int:
    """Run the job of `options`; returns the exit code (see the module docstring). `stop` is
    installed already (the CLI does it before its imports)."""
    return launched(options, started, stop).exit_code


def launched(
    options: RunOptions, started: float, stop: StopSignals, log: EventLog | None = None
) -> Launched:
    """`run_command`'s run, and what came of it; `log` (else one in `options.log_format`) says
    it on stderr as `evalpipe run` does."""
    log = log or EventLog(options.log_format, run_id=new_run_id())
    log.guard_stderr()
    ran = Launched(1)
    try:
        outcome = _run(options, log, stop, started, ran)
    except EvalpipeError as exc:
        log.error(exc)
        ran.exit_code, ran.error = exc.exit_code, exc
    except StopNow:
        log.quiet = True
        _stopped(log, stop, None, "at once, at a second signal; finished rows are journaled")
        ran.exit_code = stop.exit_code
    except Exception as exc:  # a bug: its traceback, as an event when the log is JSON
        if not log.is_json:
            raise
        trace = traceback.format_exception(exc)
        log.emit("error", None, error_type=type(exc).__name__, message=str(exc),
                 exit_code=1, traceback="".join(trace))  # fmt: skip
    else:
        ran.outcome = outcome
        ran.exit_code, ran.error = _ended(options, log, stop, outcome)
    finally:
        log.release_stderr()
        stop.restore()
    return ran


def _run(
    options: RunOptions, log: EventLog, stop: StopSignals, started: float, ran: Launched
) -> Outcome:
    config = load_config(options.config, options.overrides)

    def held(prepared: PreparedJob) -> None:
        ran.prepared = prepared
        log.emit(
            "start",
            None,
            config=str(options.config),
            output=shown(config.output.path),
            model=config.model,
            rows_total=prepared.source.num_rows,
        )

    with opened(config, log, options.rows, held=held) as session:
        return session.run(
            run_id=log.run_id,
            restart=options.restart,
            ray_address=options.ray_address,
            progress_interval=options.progress_interval,
            started=started,
            stop=stop,
            grace_seconds=options.grace_seconds,
            name=config.name or options.config.stem,
            lineage=options.lineage,
        )


def _ended(
    options: RunOptions, log: EventLog, stop: StopSignals, outcome: Outcome
) -> tuple[int, EvalpipeError | None]:
    """The exit code of a run that returned, and the error that set it."""
    log.quiet = outcome.ended_how == "stopped"
    log.summary(outcome.summary, format_summary(outcome.summary))
    if outcome.halted is not None:  # the cost cap or the time limit: its one line
        halted = outcome.halted
        log.emit("stopped", None, reason=stop.halted, rows_committed=outcome.rows_committed,
                 exit_code=halted.exit_code)  # fmt: skip
        log.error(halted)
        return halted.exit_code, halted
    if outcome.ended_how == "stopped":
        _stopped(log, stop, outcome.rows_committed, "run the same command to resume")
        return stop.exit_code, None
    rate = error_rate(outcome.summary)
    if options.max_error_rate is not None and rate > options.max_error_rate:
        exc = TooManyErrors(
            f"{rate:.2%} of the valid rows ended in an error, more than --max-error-rate "
            f"{options.max_error_rate:g} allows; every row is written (see _error_type)"
        )
        log.error(exc)
        return exc.exit_code, exc
    return 0, None


def _stopped(log: EventLog, stop: StopSignals, committed: int | None, then: str) -> None:
    rows = "" if committed is None else f"; {committed:,} rows are committed"
    log.emit(
        "stopped",
        f"Stopped by {stop.name}{rows}; {then}.",
        signal=stop.name,
        rows_committed=committed,
        exit_code=stop.exit_code,
    )


def error_rate(summary: dict[str, Any]) -> float:
    """The share of this run's valid rows (a state was there to send) that ended in error;
    rows with an invalid state are not valid rows."""
    errors = {k: n for k, n in summary["rows_in_error"].items() if k != INVALID_STATE}
    failed = sum(errors.values())
    valid = summary["rows_answered"] + failed
    return failed / valid if valid else 0.0
