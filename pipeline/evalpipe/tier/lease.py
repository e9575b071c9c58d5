"""One run per output across hosts: a lease in the tier, renewed while the run lives.

Why a module of its own: the output's OS lock (`evalpipe.output.lock`) keeps two runs on one
machine apart and vanishes with its process, but two pods writing one object-store or Delta
output share no machine. With the tier, the run also takes a lease on the output in it:
`SET key holder NX PX`, renewed every `RENEW_SECONDS` by a thread of the driver for as long as
the run lives, released (only if still ours) when it ends. A host that dies stops renewing,
and its lease lapses within `LEASE_SECONDS`: a scheduler's retry on another pod then takes it
and resumes. A second run while it is held is refused at once, told who holds it.

The key is a digest of the output's place (its URI, or host and absolute path for a local
folder, which only that host can write), not of the account: one output is one output,
whatever key writes it. When the tier is lost the run goes on (the OS lock still holds on this
machine) and the lease is taken again once the tier answers; if another run took it meanwhile,
one warning says so.
"""

from __future__ import annotations

import hashlib
import secrets
import threading
from typing import Any

from evalpipe.tier.client import Tier

LEASE_SECONDS = 20.0  # a lease nobody renewed this long lapses: a dead host's output is free
RENEW_SECONDS = 5.0  # how often a living run renews its lease

# KEYS[1]: the lease; ARGV[1]: our value, ARGV[2]: milliseconds; ARGV[3]: 1 to take it when it
# is free. Replies 1 when the lease is ours (renewed or taken), else the holder's value.
_RENEW = """
local holder = redis.call('GET', KEYS[1])
if holder == ARGV[1] or (not holder and ARGV[3] == '1') then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
  return 1
end
return holder or 0
"""
_RELEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""


def lease_key(place: str) -> bytes:
    """The tier's key of the output at `place` (module docstring)."""
    return b"evalpipe:lease:" + hashlib.blake2b(place.encode(), digest_size=16).hexdigest().encode()


class OutputLease:
    """The lease of one output in `tier`, held as `note` (who and since when)."""

    def __init__(self, tier: Tier, place: str, note: str) -> None:
        self._tier = tier
        self._key = lease_key(place)
        self._value = f"{note} [{secrets.token_hex(6)}]".encode()
        self._renew_script = tier.call(lambda r: r.register_script(_RENEW), None)
        self._release_script = tier.call(lambda r: r.register_script(_RELEASE), None)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._taken_by: str | None = None  # another run's, once told

    def take(self) -> str | None:
        """Take the lease and start renewing it: None, or who holds it now (then nothing is
        held). A tier that is down holds nothing against us."""
        holder = self._renew(take=True)
        if holder is not None:
            return holder
        self._thread = threading.Thread(target=self._keep, name="evalpipe-lease", daemon=True)
        self._thread.start()
        return None

    def _renew(self, take: bool) -> str | None:
        if self._renew_script is None:
            return None
        ms = int(LEASE_SECONDS * 1000)
        args = [self._value, ms, "1" if take else "0"]
        reply = self._tier.call(lambda r: self._renew_script(keys=[self._key], args=args), 1)
        if reply == 1 or reply == 0:  # ours, or (never asked to take it) gone
            return None
        holder = reply.decode("utf-8", "replace") if isinstance(reply, bytes) else str(reply)
        return holder.rsplit(" [", 1)[0]

    def _keep(self) -> None:
        """Renew every RENEW_SECONDS until released; a lease lost while the tier was away is
        taken again, or, when another run took it meanwhile, said once."""
        while not self._stop.wait(RENEW_SECONDS):
            holder = self._renew(take=True)
            if holder is not None and self._taken_by is None:
                self._taken_by = holder
                self._tier.warn(
                    f"the output's lease in the shared tier lapsed while the tier was away and "
                    f"{holder} took it: two runs may now write this output"
                )

    def release(self) -> None:
        """Stop renewing and give the lease up (only if it is still ours)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=RENEW_SECONDS)
        script: Any = self._release_script
        if script is not None:
            self._tier.call(lambda r: script(keys=[self._key], args=[self._value]), 0)
