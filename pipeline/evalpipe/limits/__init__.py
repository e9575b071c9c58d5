"""The account's limits, held once however many workers, jobs and hosts send: pacing,
the shared Budget, the host's schedule file and where the Budget runs.

A Worker actor needs only its `LeasePacer`; the Budget's side and the placement helpers load
on first use (`evalpipe.lazy`), so a worker's process does not import them.
"""

from typing import TYPE_CHECKING

from evalpipe.lazy import lazy_exports
from evalpipe.limits.lease import LeasePacer as LeasePacer

if TYPE_CHECKING:
    from evalpipe.limits.account import account_budget as account_budget, job_budget as job_budget
    from evalpipe.limits.placement import (
        alive_nodes as alive_nodes,
        choose_node as choose_node,
        driver_node as driver_node,
        on_node as on_node,
    )

__all__, __getattr__ = lazy_exports(__name__)
