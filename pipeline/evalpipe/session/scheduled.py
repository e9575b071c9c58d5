"""A run for a scheduler: `evalpipe run` started by an Airflow task or a Dagster asset instead of
a command line, its end handed back as data rather than as an exit code alone.

Both front ends (`evalpipe.airflow`, `evalpipe.dagster`) run a job config the same way, through
`evalpipe run`'s own sequence (`evalpipe.session.launch.launched`: the lock, the contact with the
service, the engine, the exit codes), and ask the same things of its end (`Ran`):

    exit_code, error   what `evalpipe run` would have exited with, and the error that said so
    retry              whether the scheduler's retry mends it (`evalpipe.errors.retry_mends`)
    summary            the run's figures, as the manifest keeps them (the XCom, the metadata)
    table              where the rows are: the output, its partition, the table's version
    datasets           the corpus and the table with their schemas, for the scheduler's lineage

A retry pays nothing answered before: nothing of the try (its number, the worker, the run id)
is part of the job, so the same config and partition name the same output, and the retry
resumes it (`--restart` is never implied): the rows committed and journaled are skipped, and
only what was in flight when a try was killed is sent again. The journal of an object-store
output is on the worker's disk (`output.staging`): a retry on another worker resumes from the
committed rows, or from the journal too where `output.staging` is a volume both see.

A partition (a Dagster partition key, Airflow's `{{ ds }}`) is the table's `output.partition`
where the format keeps partitions (Delta: `evalpipe.output.output_format(...).partitioned`); a
Parquet output gets a folder per partition instead (`OUT/dt=2026-11-27`, Hive style: the nightly
layout).
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from evalpipe.config import JobConfig, load_config
from evalpipe.engine import (
    GRACE_SECONDS,
    Datasets,
    EventLog,
    LogFormat,
    StopSignals,
    datasets_of,
    format_summary,
    new_run_id,
)
from evalpipe.errors import EvalpipeError, retry_mends
from evalpipe.output import output_format
from evalpipe.session.launch import Launched, RunOptions, launched
from evalpipe.stores import is_uri

_GUARDS = {"max_cost": "max_cost_usd", "max_duration": "max_duration", "deadline": "deadline"}


@dataclass(frozen=True)
class Scheduled:
    """One scheduled run of the job config at `config`: `overrides` are `--set` style
    `KEY=VALUE` strings; `partition` the run's partition (`{"dt": "2026-11-27"}`); the guard
    rails and `max_error_rate` as `evalpipe run`'s flags; `lineage=False` when the scheduler's
    own OpenLineage integration tells the catalog (`Ran.datasets`)."""

    config: Path
    overrides: tuple[str, ...] = ()
    partition: Mapping[str, str] = field(default_factory=dict)
    max_cost: float | None = None
    max_duration: float | str | None = None
    deadline: str | None = None
    max_error_rate: float | None = None
    ray_address: str | None = None
    grace_seconds: float = GRACE_SECONDS
    log_format: LogFormat = "text"
    lineage: bool = True

    def all_overrides(self) -> tuple[str, ...]:
        """The overrides, then the guard rails and the partition as overrides of their own."""
        guards = {key: getattr(self, flag) for flag, key in _GUARDS.items()}
        found = tuple(f"limits.{k}={json.dumps(v)}" for k, v in guards.items() if v is not None)
        return self.overrides + found + self._partition_overrides()

    def _partition_overrides(self) -> tuple[str, ...]:
        if not self.partition:
            return ()
        config = load_config(self.config, self.overrides)
        if output_format(config.output.format).partitioned:
            return tuple(f"output.partition.{k}={json.dumps(v)}" for k, v in self.partition.items())
        folder = "/".join(f"{k}={v}" for k, v in self.partition.items())
        path = str(config.output.path).rstrip("/") + "/" + folder
        return (f"output.path={json.dumps(path)}",)


@dataclass(frozen=True)
class Ran:
    """What came of a scheduled run (see the module docstring). `summary` is None when the run
    failed before it had one (a bad config, a refused key)."""

    exit_code: int
    error: EvalpipeError | None
    summary: dict[str, Any] | None
    summary_text: str | None
    rows_committed: int | None
    table: str | None
    partition: dict[str, str]
    delta_version: int | None
    datasets: Datasets | None

    @property
    def retry(self) -> bool:
        """Whether the scheduler should try again (the retry resumes)."""
        return retry_mends(self.exit_code, self.error)

    @property
    def message(self) -> str:
        """The one line that says how the run ended (`ErrorType: ...` for an error)."""
        if self.error is not None:
            return self.error.one_line()
        if self.exit_code == 0:
            return "finished"
        return f"stopped (exit {self.exit_code}); committed rows are kept and a retry resumes"


def run_scheduled(job: Scheduled) -> Ran:
    """Run `job` here (SIGTERM and SIGINT stop it cleanly in the main thread, as they stop
    `evalpipe run`) and say what came of it; never raises an evalpipe error, only bugs."""
    started = time.monotonic()
    log = EventLog(job.log_format, run_id=new_run_id())
    try:
        overrides = job.all_overrides()
    except EvalpipeError as error:  # the config, read for the partition's overrides
        log.error(error)
        return _ran(Launched(error.exit_code, error=error))
    options = RunOptions(
        job.config, overrides, ray_address=job.ray_address, log_format=job.log_format,
        grace_seconds=job.grace_seconds, max_error_rate=job.max_error_rate, lineage=job.lineage,
    )  # fmt: skip
    stop = StopSignals()
    stop.install()
    return _ran(launched(options, started, stop, log))


def _ran(launched: Launched) -> Ran:
    outcome, prepared = launched.outcome, launched.prepared
    config = prepared.config if prepared is not None else None
    summary = outcome.summary if outcome is not None else None
    datasets = None
    if prepared is not None and config is not None:
        datasets = datasets_of(prepared)
    return Ran(
        exit_code=launched.exit_code,
        error=launched.error,
        summary=summary,
        summary_text=format_summary(summary) if summary is not None else None,
        rows_committed=outcome.rows_committed if outcome is not None else None,
        table=_uri(config) if config is not None else None,
        partition=dict(config.output.partition) if config is not None else {},
        delta_version=_table_version(config) if outcome is not None else None,
        datasets=datasets,
    )


def _table_version(config: JobConfig | None) -> int | None:
    """The table's version after the run (None for a Parquet output, which has none)."""
    if config is None:
        return None
    return output_format(config.output.format).version(config.output.path)


def _uri(config: JobConfig) -> str:
    """The output as a scheduler's view names it: a URI, or an absolute local path."""
    path = config.output.path
    return str(path) if is_uri(path) else str(Path(path).absolute())
