"""One job, from a prepared config to its summary: the connection to the service, the
dispatcher that feeds the workers, progress, signals and the exit code.

The CLI imports this package for its options (log formats, signals); the rest loads on first
use (`evalpipe.lazy`), so `evalpipe models` and a first contact that fails say so without
first importing the planner, the corpus readers and Ray's driver side.
"""

from typing import TYPE_CHECKING

from evalpipe.job.events import FORMATS, EventLog, default_format
from evalpipe.job.stopping import GRACE_SECONDS, StopNow, StopSignals
from evalpipe.lazy import lazy_exports

if TYPE_CHECKING:
    from evalpipe.job.calibration import calibrate
    from evalpipe.job.connect import Connection, list_models
    from evalpipe.job.displays import ProgressOption, display_for
    from evalpipe.job.estimation import estimate, format_estimate
    from evalpipe.job.launch import RunOptions, run_command
    from evalpipe.job.packmeasure import calibrate_packing
    from evalpipe.job.prepared import prepare
    from evalpipe.job.progress import Display, ProgressSnapshot
    from evalpipe.job.rayhere import running_differences
    from evalpipe.job.runner import VERSION, Outcome, run_job
    from evalpipe.job.sampled import EstimateOptions, run_estimate

__all__ = [
    "FORMATS",
    "GRACE_SECONDS",
    "VERSION",
    "Connection",
    "Display",
    "EstimateOptions",
    "EventLog",
    "Outcome",
    "ProgressOption",
    "ProgressSnapshot",
    "RunOptions",
    "StopNow",
    "StopSignals",
    "calibrate",
    "calibrate_packing",
    "default_format",
    "display_for",
    "estimate",
    "format_estimate",
    "list_models",
    "prepare",
    "run_command",
    "run_estimate",
    "run_job",
    "running_differences",
]

__getattr__ = lazy_exports(
    __name__,
    {
        "evalpipe.job.calibration": ("calibrate",),
        "evalpipe.job.connect": ("Connection", "list_models"),
        "evalpipe.job.displays": ("ProgressOption", "display_for"),
        "evalpipe.job.estimation": ("estimate", "format_estimate"),
        "evalpipe.job.launch": ("RunOptions", "run_command"),
        "evalpipe.job.packmeasure": ("calibrate_packing",),
        "evalpipe.job.prepared": ("prepare",),
        "evalpipe.job.progress": ("Display", "ProgressSnapshot"),
        "evalpipe.job.rayhere": ("running_differences",),
        "evalpipe.job.runner": ("VERSION", "Outcome", "run_job"),
        "evalpipe.job.sampled": ("EstimateOptions", "run_estimate"),
    },
)
