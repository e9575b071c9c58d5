"""One command's or one call's session: the start-up sequence (prepare, lock, first contact,
run) written once, `evalpipe run` to its exit code, `evalpipe plan`, the sampled estimate, the
Python API's progress displays, and a run for a scheduler (`run_scheduled`: its end as data).

The front ends (`evalpipe.cli`, `evalpipe.api`, `evalpipe.airflow`, `evalpipe.dagster`) start
jobs through here. Everything loads on first use (`evalpipe.lazy`), so `evalpipe models` and a
first contact that fails say so without first importing the planner, the corpus readers and
Ray's driver side.
"""

from typing import TYPE_CHECKING

from evalpipe.lazy import lazy_exports

if TYPE_CHECKING:
    from evalpipe.session.displays import (
        ProgressOption as ProgressOption,
        display_for as display_for,
    )
    from evalpipe.session.early import tier_refuses as tier_refuses
    from evalpipe.session.estimate import (
        EstimateOptions as EstimateOptions,
        run_estimate as run_estimate,
    )
    from evalpipe.session.launch import (
        RunOptions as RunOptions,
        error_rate as error_rate,
        run_command as run_command,
    )
    from evalpipe.session.plan import plan_job as plan_job
    from evalpipe.session.scheduled import (
        Ran as Ran,
        Scheduled as Scheduled,
        run_scheduled as run_scheduled,
    )
    from evalpipe.session.start import Session as Session, opened as opened

__all__, __getattr__ = lazy_exports(__name__)
