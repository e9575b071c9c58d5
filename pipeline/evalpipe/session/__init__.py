"""One command's or one call's session: the start-up sequence (prepare, lock, first contact,
run) written once, `evalpipe run` to its exit code, `evalpipe plan`, the sampled estimate, and
the Python API's progress displays.

The front ends (`evalpipe.cli`, `evalpipe.api`) start jobs through here. Everything loads on
first use (`evalpipe.lazy`), so `evalpipe models` and a first contact that fails say so without
first importing the planner, the corpus readers and Ray's driver side.
"""

from typing import TYPE_CHECKING

from evalpipe.lazy import lazy_exports

if TYPE_CHECKING:
    from evalpipe.session.displays import ProgressOption, display_for
    from evalpipe.session.estimate import EstimateOptions, run_estimate
    from evalpipe.session.launch import RunOptions, run_command
    from evalpipe.session.plan import plan_job
    from evalpipe.session.start import Session, opened

__all__ = [
    "EstimateOptions",
    "ProgressOption",
    "RunOptions",
    "Session",
    "display_for",
    "opened",
    "plan_job",
    "run_command",
    "run_estimate",
]

__getattr__ = lazy_exports(
    __name__,
    {
        "evalpipe.session.displays": ("ProgressOption", "display_for"),
        "evalpipe.session.estimate": ("EstimateOptions", "run_estimate"),
        "evalpipe.session.launch": ("RunOptions", "run_command"),
        "evalpipe.session.plan": ("plan_job",),
        "evalpipe.session.start": ("Session", "opened"),
    },
)
