"""The account's limits, held once however many workers, jobs and hosts send: pacing,
the shared Budget, the host's schedule file and where the Budget runs.
"""

from evalpipe.limits.account import account_budget, job_budget
from evalpipe.limits.lease import LeasePacer
from evalpipe.limits.placement import alive_nodes, choose_node, driver_node, on_node

__all__ = [
    "LeasePacer",
    "account_budget",
    "alive_nodes",
    "choose_node",
    "driver_node",
    "job_budget",
    "on_node",
]
