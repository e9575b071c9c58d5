"""The Ray a process runs its jobs on: started quietly, joined, or found running; owned by a
thread that lives as long as the process; and reaped by a process of its own if this one dies
(even by `kill -9`).

A room apart from the engine that sends on it (`evalpipe.engine`) because a Ray's life is the
process's, not one job's: the Python API's second call and an estimate's rounds find it up.
"""

from typing import TYPE_CHECKING

from evalpipe.lazy import lazy_exports

if TYPE_CHECKING:
    from evalpipe.cluster.here import (
        SHUTDOWN_SECONDS as SHUTDOWN_SECONDS,
        JoinedRay as JoinedRay,
        LocalRay as LocalRay,
        bounded as bounded,
        ray_here as ray_here,
        running_differences as running_differences,
    )

__all__, __getattr__ = lazy_exports(__name__)
