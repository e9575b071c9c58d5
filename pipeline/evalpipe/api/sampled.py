"""`ep.estimate`: `evalpipe estimate` from Python, the same engine and the same JSON document.

A sample of the corpus is scored in rounds into an output until every corpus-wide interval is
within `margin` (`evalpipe.session.run_estimate`); the call returns the document `evalpipe
estimate --json` prints, whose `estimates` list reads straight into a DataFrame
(`pl.DataFrame(result["estimates"])`). The corpus is a job's (a YAML config, an `ep.Job`, a
config: into the job's output), or data given as `ep.score` takes it (a polars or pandas
DataFrame, a pyarrow Table, a DuckDB relation, a Parquet path) with `id`, `state`, `questions`
and `service`: into `output`, else into a temporary folder (the answer cache still keeps what
was paid for, so the same call again, or with a smaller margin, pays only for rows it adds).
Where a notebook's event loop holds the calling thread, the rounds run on a thread of their own
while the caller waits (as `ep.score` does).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from evalpipe.api.call import Questions, job_configs
from evalpipe.api.questions import Service
from evalpipe.api.run import Job, WarningLog
from evalpipe.config import JobConfig, load_config
from evalpipe.engine import Display, StopSignals
from evalpipe.errors import ConfigError
from evalpipe.session import EstimateOptions, ProgressOption, display_for, run_estimate


def estimate(
    data: Any,
    *,
    margin: float,
    by: str | Sequence[str] = (),
    id: str | None = None,
    state: str | Sequence[str] | None = None,
    questions: Questions | None = None,
    service: Service | None = None,
    output: str | Path | None = None,
    confidence: float = 0.95,
    max_rows: int | None = None,
    max_cost: float | None = None,
    seed: int = 0,
    progress: ProgressOption = False,
) -> dict[str, Any]:
    """Estimate the answers over a corpus from a stratified random sample, as `evalpipe
    estimate` does: strata `by` (input columns), every corpus-wide interval's half-width at most
    `margin` (a mean level's on its 0-1 scale), or fewer rows at `max_rows` / `max_cost` (the
    document says what precision was reached). Returns the JSON document of `evalpipe estimate
    --json`: `pl.DataFrame(result["estimates"])` is the table of figures with their intervals
    (`low`, `high`).

    `data`: a job (a YAML config's path, an `ep.Job`, a config), sampled into the job's output;
    or, with `id`, `state`, `questions` and `service` as `ep.score` takes them, a polars or
    pandas DataFrame, a pyarrow Table, a DuckDB relation or a Parquet path, sampled into
    `output` (default: a temporary folder; the answer cache keeps what was paid for).
    `progress`: as for `score` (default: nothing shown)."""
    options = EstimateOptions(
        margin=margin, by=(by,) if isinstance(by, str) else tuple(by), confidence=confidence,
        max_rows=max_rows, max_cost=max_cost, seed=seed,
    )  # fmt: skip
    display = display_for(progress)
    given = {"id": id, "state": state, "questions": questions, "service": service}
    if all(value is None for value in given.values()):
        if output is not None:
            raise ConfigError("output: a job writes to its own output.path; give output= with data")
        return _estimated(_config(data), options, display)
    missing = [f"{name}=" for name, value in given.items() if value is None]
    if missing:
        raise ConfigError(f"{', '.join(missing)}: needed to estimate from data, as for ep.score")
    assert id is not None and state is not None and questions is not None and service is not None
    with job_configs(data, id, state, questions, service, output) as configs:
        document = _estimated(configs[-1], options, display)
    if output is None:
        document["output"] = None  # the temporary folder is gone
    return document


def _estimated(config: JobConfig, options: EstimateOptions, display: Display) -> dict[str, Any]:
    def call() -> dict[str, Any]:
        stop = StopSignals(cancel=True)
        return run_estimate(
            config, options, log=WarningLog(), stop=stop, display=display, keep_service=True
        )  # an embedded service is found again by the next call, as `ep.score`'s is

    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return call()
    with concurrent.futures.ThreadPoolExecutor(1, "evalpipe-estimate") as pool:
        return pool.submit(call).result()


def _config(job: Any) -> JobConfig:
    if isinstance(job, Job):
        return job.config
    if isinstance(job, JobConfig):
        return job
    if isinstance(job, str | Path):
        return load_config(Path(job))
    raise ConfigError(
        f"data: a {type(job).__name__} needs id=, state=, questions= and service= (as for "
        "ep.score); or give a job: a YAML config's path, an ep.Job or a config"
    )
