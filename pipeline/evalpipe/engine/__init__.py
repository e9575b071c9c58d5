"""The engine of one prepared job on Ray: the corpus streamed through the account's pace to the
workers and back into the output, exactly once, until it is done, stopped or out of budget.

    runner.py    run_job: source → plan → dispatch → fold → sink, one way, and how it ended
    dispatch.py  Dispatcher: the rows in (the answer cache, repeats), the answers folded back
    sending.py   Sender: what each worker is given and when (replanning, the cost cap, packs)
    folding.py   a job's result as output rows
    intake.py    whether Ray is needed at once, and what a batch costs the heap
    guards.py    the cost cap and the time limit
    stopping.py  SIGTERM and SIGINT: a clean stop, and a second signal's at once
    progress.py  the run's counters, and what the user sees while it runs
    summary.py   the run's summary: a dict, then text
    observed.py  the run's telemetry, fed from its counters; its datasets, for lineage
    events.py    what a run says on stderr, for a person or a program

It is handed a prepared job (`evalpipe.planning.PreparedJob`), the service's base URL once it
answered, and how many rows go in a request (`evalpipe.planning.PackingChoice`): how those were
decided is the session's (`evalpipe.session`) and the preflight's (`evalpipe.preflight`).
The CLI imports this package for its options (log formats, signals); the rest loads on first
use (`evalpipe.lazy`).
"""

from typing import TYPE_CHECKING

from evalpipe.engine.events import (
    FORMATS as FORMATS,
    EventLog as EventLog,
    LogFormat as LogFormat,
    default_format as default_format,
)
from evalpipe.engine.stopping import (
    GRACE_SECONDS as GRACE_SECONDS,
    StopNow as StopNow,
    StopSignals as StopSignals,
)
from evalpipe.lazy import lazy_exports

if TYPE_CHECKING:
    from evalpipe.engine.guards import seconds_available as seconds_available
    from evalpipe.engine.observed import (
        Datasets as Datasets,  # what a run reads and writes (`evalpipe.observe`'s), for lineage
        datasets_of as datasets_of,
    )
    from evalpipe.engine.progress import (
        Display as Display,
        LogDisplay as LogDisplay,
        ProgressSnapshot as ProgressSnapshot,
        progress_line as progress_line,
    )
    from evalpipe.engine.runner import (
        VERSION as VERSION,
        Outcome as Outcome,
        new_run_id as new_run_id,
        run_job as run_job,
    )
    from evalpipe.engine.summary import format_summary as format_summary

__all__, __getattr__ = lazy_exports(__name__)
