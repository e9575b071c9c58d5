"""One run per output across hosts: with a shared tier, the output's lock is also a lease in it.

Why a module of its own: the OS lock (`evalpipe.output.lock`) keeps two runs on one machine
apart; pods on one object-store or Delta output share no machine, only the tier. So a run with
`shared.url` also holds the output's lease there (`evalpipe.tier.OutputLease`: renewed while
the run lives, lapsing within `shared.lease_seconds` of a host that died), taken after the OS
lock and before anything is sent. A second run finds it held and exits 9 at once (`OutputLocked`,
naming the holder); a scheduler's retry on another pod goes on once the lease lapses.

The lease fails closed: the sink of the output asks it (`held_lease`) before each commit and
each turn of the run, and a lease lost or unconfirmed ends the run (`LeaseLost`, exit 9) with
nothing more committed; its fencing token goes with each commit (`evalpipe.tier.lease`).

An object-store output is named by its URI. A local folder takes no lease: only this host writes
it, and its OS lock already keeps this host's runs apart (a tier lost mid-run costs it nothing).
"""

from __future__ import annotations

import os
import socket
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

from evalpipe.errors import OutputLocked
from evalpipe.output.lock import hold, output_lock, unused_removed
from evalpipe.stores import Location, is_uri
from evalpipe.tier import TierAddress

if TYPE_CHECKING:
    from evalpipe.tier import OutputLease

_HELD: dict[str, OutputLease] = {}  # by place: the leases this process holds now


def held_lease(output: Location) -> OutputLease | None:
    """The lease this process holds on `output` now (None: it holds none, as without a tier)."""
    return _HELD.get(place(output))


def place(output: Location) -> str:
    """What names the output in the tier (module docstring)."""
    if isinstance(output, Path):
        return f"{socket.gethostname()}:{output.expanduser().resolve()}"
    return str(output).rstrip("/")


@contextmanager
def leased(
    output: Location, tier: TierAddress | None, seconds: float | None = None
) -> Iterator[None]:
    """Hold the output's lease in `tier` for the duration (nothing without a tier, nothing for a
    local folder), `seconds` long (default: the tier's); raises OutputLocked at once when
    another run holds it."""
    if tier is None or not is_uri(output):
        yield
        return
    from evalpipe.tier import OutputLease, Tier

    since = datetime.now(UTC).isoformat(timespec="seconds")
    where = place(output)
    note = f"pid {os.getpid()} on {socket.gethostname()} since {since}"
    lease = OutputLease(Tier.of(tier), where, note, seconds)
    holder = lease.take()
    if holder is not None:
        raise OutputLocked(
            f"{output} is in use by {holder} (its lease in the shared tier); wait for that run "
            f"to end (a dead host's lease lapses within {lease.seconds:g} s), or choose "
            "another output.path"
        )
    _HELD[where] = lease
    try:
        yield
    finally:
        del _HELD[where]
        lease.release()


@contextmanager
def output_held(
    output: Location, staging: Path | None, shown: str, tier: TierAddress | None,
    lease_seconds: float | None = None,
) -> Iterator[None]:  # fmt: skip
    """The output held for a run, as `evalpipe run` holds it: its OS lock (a lock file left
    unused by an earlier run removed first; `shown` names the output in the refusal), then its
    lease in the shared `tier` when there is one. OutputLocked at once when another run has it."""
    lock = output_lock(output, staging)
    with unused_removed(lock), hold(lock, shown), leased(output, tier, lease_seconds):
        yield
