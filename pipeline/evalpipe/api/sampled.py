"""`ep.estimate`: `evalpipe estimate` from Python, the same engine and the same JSON document.

A sample of the job's corpus is scored in rounds into the job's output until every corpus-wide
interval is within `margin` (`evalpipe.session.run_estimate`); the call returns the document
`evalpipe estimate --json` prints, whose `estimates` list reads straight into a DataFrame
(`pl.DataFrame(result["estimates"])`). Where a notebook's event loop holds the calling thread,
the rounds run on a thread of their own while the caller waits (as `ep.score` does).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from evalpipe.api.run import Job, WarningLog
from evalpipe.config import JobConfig, load_config
from evalpipe.engine import StopSignals
from evalpipe.session import EstimateOptions, ProgressOption, display_for, run_estimate


def estimate(
    job: str | Path | Job | JobConfig,
    *,
    margin: float,
    by: str | Sequence[str] = (),
    confidence: float = 0.95,
    max_rows: int | None = None,
    max_cost: float | None = None,
    seed: int = 0,
    progress: ProgressOption = False,
) -> dict[str, Any]:
    """Estimate the answers over the corpus of `job` (a YAML config's path, an `ep.Job` or a
    config) from a stratified random sample, as `evalpipe estimate` does: strata `by` (input
    columns), every corpus-wide interval's half-width at most `margin` (a mean level's on its
    0-1 scale), or fewer rows at `max_rows` / `max_cost` (the document says what precision
    was reached). Returns the JSON document of `evalpipe estimate --json`. `progress`: as
    for `score` (default: nothing shown)."""
    config = _config(job)
    options = EstimateOptions(
        margin=margin, by=(by,) if isinstance(by, str) else tuple(by), confidence=confidence,
        max_rows=max_rows, max_cost=max_cost, seed=seed,
    )  # fmt: skip
    display = display_for(progress)

    def call() -> dict[str, Any]:
        stop = StopSignals(cancel=True)
        return run_estimate(config, options, log=WarningLog(), stop=stop, display=display)

    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return call()
    with concurrent.futures.ThreadPoolExecutor(1, "evalpipe-estimate") as pool:
        return pool.submit(call).result()


def _config(job: str | Path | Job | JobConfig) -> JobConfig:
    if isinstance(job, Job):
        return job.config
    if isinstance(job, JobConfig):
        return job
    return load_config(Path(job))
