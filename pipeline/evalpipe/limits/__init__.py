"""The account's limits, held once however many workers, jobs and hosts send: pacing,
the shared Budget, the host's schedule file and where the Budget runs; and `LocalPacer`, the
same pace and schedule for requests sent before a run's Budget exists.

A Worker actor needs only its `LeasePacer`; the Budget's side, the local pacer and the
placement helpers load on first use (`evalpipe.lazy`), so a worker's process does not import
them.
"""

from typing import TYPE_CHECKING

from evalpipe.lazy import lazy_exports
from evalpipe.limits.lease import LeasePacer as LeasePacer, Report as Report

if TYPE_CHECKING:
    from evalpipe.limits.account import account_budget as account_budget, job_budget as job_budget
    from evalpipe.limits.local import LocalPacer as LocalPacer
    from evalpipe.limits.placement import (
        alive_nodes as alive_nodes,
        choose_node as choose_node,
        driver_node as driver_node,
        on_node as on_node,
    )

__all__, __getattr__ = lazy_exports(__name__)
