"""evalpipe for Dagster (`pip install evalpipe[dagster]`): `evalpipe_asset`, a job config as an
asset with daily partitions, whose materialization carries the run's rows, tokens and cost,
whose check is the error rate, and whose retry resumes.

    import dagster as dg
    from evalpipe.dagster import evalpipe_asset

    reviews_scored = evalpipe_asset("configs/nightly.yaml", name="reviews_scored",
                                    start_date="2026-11-01", max_error_rate=0.05,
                                    retry_policy=dg.RetryPolicy(max_retries=2))
    defs = dg.Definitions(assets=[reviews_scored])

The how-to (docs/how-to/schedulers.md) shows it with a schedule.
"""

from typing import TYPE_CHECKING

from evalpipe.lazy import lazy_exports

if TYPE_CHECKING:
    from evalpipe.dagster.asset import (
        ERROR_RATE as ERROR_RATE,
        evalpipe_asset as evalpipe_asset,
        metadata as metadata,
    )

__all__, __getattr__ = lazy_exports(__name__)
