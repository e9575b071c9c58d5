"""The account's limits, held once however many workers, jobs and hosts send: pacing,
the shared Budget, the host's schedule file and where the Budget runs; and `LocalPacer`, the
same pace and schedule for requests sent before a run's Budget exists.

A Worker actor needs only its `LeasePacer`; the Budget's side, the local pacer and the
placement helpers load on first use (`evalpipe.lazy`), so a worker's process does not import
them.
"""

from typing import TYPE_CHECKING

from evalpipe.lazy import lazy_exports
from evalpipe.limits.lease import LeasePacer

if TYPE_CHECKING:
    from evalpipe.limits.account import account_budget, job_budget
    from evalpipe.limits.local import LocalPacer
    from evalpipe.limits.placement import alive_nodes, choose_node, driver_node, on_node

__all__ = [
    "LeasePacer",
    "LocalPacer",
    "account_budget",
    "alive_nodes",
    "choose_node",
    "driver_node",
    "job_budget",
    "on_node",
]

__getattr__ = lazy_exports(
    __name__,
    {
        "evalpipe.limits.account": ("account_budget", "job_budget"),
        "evalpipe.limits.local": ("LocalPacer",),
        "evalpipe.limits.placement": ("alive_nodes", "choose_node", "driver_node", "on_node"),
    },
)
