"""One job, from a prepared config to its summary: the connection to the service, the
dispatcher that feeds the workers, progress, signals and the exit code.
"""

from evalpipe.job.calibration import calibrate
from evalpipe.job.connect import Connection, list_models
from evalpipe.job.displays import ProgressOption, display_for
from evalpipe.job.estimation import estimate, format_estimate
from evalpipe.job.events import FORMATS, EventLog, default_format
from evalpipe.job.launch import RunOptions, run_command
from evalpipe.job.packmeasure import calibrate_packing
from evalpipe.job.prepared import PreparedJob, prepare
from evalpipe.job.progress import Display, ProgressSnapshot
from evalpipe.job.rayhere import running_differences
from evalpipe.job.runner import VERSION, Outcome, run_job
from evalpipe.job.stopping import GRACE_SECONDS, StopNow, StopSignals

__all__ = [
    "FORMATS",
    "GRACE_SECONDS",
    "VERSION",
    "Connection",
    "Display",
    "EventLog",
    "Outcome",
    "PreparedJob",
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
    "run_job",
    "running_differences",
]
