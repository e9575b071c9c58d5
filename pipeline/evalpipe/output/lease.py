"""One run per output across hosts: with a shared tier, the output's lock is also a lease in it.

Why a module of its own: the OS lock (`evalpipe.output.lock`) keeps two runs on one machine
apart; pods on one object-store or Delta output share no machine, only the tier. So a run with
`shared.url` also holds the output's lease there (`evalpipe.tier.OutputLease`: renewed while
the run lives, lapsing within `LEASE_SECONDS` of a host that died), taken after the OS lock and
before anything is sent. A second run finds it held and exits 2 at once (`OutputLocked`, naming
the holder); a scheduler's retry on another pod goes on once the lease lapses.

An object-store output is named by its URI; a local folder by this host and its absolute path
(only this host writes it, and its OS lock already keeps this host's runs apart).
"""

from __future__ import annotations

import os
import socket
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path

from evalpipe.errors import OutputLocked
from evalpipe.output.lock import hold, output_lock, unused_removed
from evalpipe.stores import Location
from evalpipe.tier import TierAddress


def place(output: Location) -> str:
    """What names the output in the tier (module docstring)."""
    if isinstance(output, Path):
        return f"{socket.gethostname()}:{output.expanduser().resolve()}"
    return str(output).rstrip("/")


@contextmanager
def leased(output: Location, tier: TierAddress | None) -> Iterator[None]:
    """Hold the output's lease in `tier` for the duration (nothing without a tier); raises
    OutputLocked at once when another run holds it."""
    if tier is None:
        yield
        return
    from evalpipe.tier import OutputLease, Tier

    since = datetime.now(UTC).isoformat(timespec="seconds")
    lease = OutputLease(Tier.of(tier), place(output), f"pid {os.getpid()} on "
                        f"{socket.gethostname()} since {since}")  # fmt: skip
    holder = lease.take()
    if holder is not None:
        raise OutputLocked(
            f"{output} is in use by {holder} (its lease in the shared tier {tier.url}); wait "
            "for that run to end (a dead host's lease lapses within half a minute), or choose "
            "another output.path"
        )
    try:
        yield
    finally:
        lease.release()


@contextmanager
def output_held(
    output: Location, staging: Path | None, shown: str, tier: TierAddress | None
) -> Iterator[None]:
    """The output held for a run, as `evalpipe run` holds it: its OS lock (a lock file left
    unused by an earlier run removed first; `shown` names the output in the refusal), then its
    lease in the shared `tier` when there is one. OutputLocked at once when another run has it."""
    lock = output_lock(output, staging)
    with unused_removed(lock), hold(lock, shown), leased(output, tier):
        yield
