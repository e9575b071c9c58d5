"""The shared tier (Redis): what hosts on one account share when they share no Ray and no disk.

A room of its own below `evalpipe.limits` and `evalpipe.cache` (and `evalpipe.planning`'s
learned values, `evalpipe.output`'s lock), which use it through the small surface here, with the
local file or SQLite as the other implementation:

    address.py  TierAddress (URL, password variable, the account's key prefix), the start's check
    client.py   Tier: one client per process, calls that never fail a run (a lost tier is a
                warning and a miss), answers with an age limit, claims, kept fields
    pace.py     TierPace: the account's schedule (GCRA in one Lua script), the Budget's Schedule
    lease.py    OutputLease: one run per output across hosts, failing closed, with a fencing
                token that grows with each new holder
    seal.py     the values kept for the account sealed (HMAC-SHA256, a key derived from the
                API key): another tenant's value is a miss, never an answer

redis-py is imported on first use only: a job without `shared.url` never loads it.
"""

from typing import TYPE_CHECKING

from evalpipe.lazy import lazy_exports
from evalpipe.tier.address import (
    TierAddress as TierAddress,
    account_prefix as account_prefix,
    job_address as job_address,
)

if TYPE_CHECKING:
    from evalpipe.tier.client import Tier as Tier
    from evalpipe.tier.lease import OutputLease as OutputLease
    from evalpipe.tier.pace import TierPace as TierPace

__all__, __getattr__ = lazy_exports(__name__)
