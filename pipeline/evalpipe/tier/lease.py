"""One run per output across hosts: a lease in the tier that fails closed, with a fencing token.

Why a module of its own: the output's OS lock (`evalpipe.output.lock`) keeps two runs on one
machine apart and vanishes with its process, but two pods writing one object-store or Delta
output share no machine. With the tier, the run also takes a lease on the output in it: taken
when free (`SET key holder PX`), renewed every eighth of `seconds` by a thread of the driver
while it is still ours, released (only if still ours) when the run ends. A host that dies stops
renewing, and its lease lapses within `seconds` (`shared.lease_seconds`): a scheduler's retry on
another pod then takes it and resumes. A second run while it is held is refused at once, told
who holds it.

The lease fails closed. It counts as ours only until `seconds` after the last renewal Redis
confirmed was *sent* (Redis's own expiry starts later, so this end comes first), less a tenth
for the clocks' drift. A renewal that fails (the tier down, frozen, cut off) confirms nothing;
one that finds the lease gone or another's marks it lost for good. `confirm` is the run's check
before it sends or commits: `LeaseLost` (exit 9, retried by schedulers) once the lease is lost
or unconfirmed past its end. Before that, a lease unconfirmed for a quarter of `seconds` is not
`steady`: the run sends nothing new until a renewal confirms it again, so what a host cut off
from the tier pays meanwhile, which the next holder pays again, stays small. Both read the
monotonic clock only, so a host thawed after a freeze longer than its lease stops at its first
check, before any round trip.

A check cannot stop a write already on its way; the fencing token does. Each taking of the
lease increments the output's token in the same script (`INCR`), so a later holder always has
a larger one; every commit carries `token`, and the output refuses one older than it has seen
(`evalpipe.output`'s formats).

The key is a digest of the output's place (its URI, or host and absolute path for a local
folder, which only that host can write), not of the account: one output is one output,
whatever key writes it.
"""

from __future__ import annotations

import hashlib
import secrets
import threading
import time

from evalpipe.errors import LeaseLost
from evalpipe.tier.client import Tier

LEASE_SECONDS = 20.0  # the default of `shared.lease_seconds`
DRIFT = 0.1  # the share of a lease kept back for the clocks' drift and a commit's length

# KEYS[1]: the lease, KEYS[2]: the output's fencing token; ARGV[1]: our value, ARGV[2]:
# milliseconds; ARGV[3]: 1 to take it when it is free. Replies {1, token} when the lease is ours
# (renewed, or taken: then with a new token), {0, holder} when another's, {0, ''} when gone.
_RENEW = """
local holder = redis.call('GET', KEYS[1])
if holder == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return {1, redis.call('GET', KEYS[2]) or '0'}
end
if not holder and ARGV[3] == '1' then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
  return {1, tostring(redis.call('INCR', KEYS[2]))}
end
return {0, holder or ''}
"""
_RELEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""


def lease_key(place: str) -> bytes:
    """The tier's key of the output at `place` (module docstring); the braces make the digest a
    Redis Cluster hash tag, so the lease and its token (`token_key`) share a slot, as one script
    needs."""
    digest = hashlib.blake2b(place.encode(), digest_size=16).hexdigest().encode()
    return b"evalpipe:lease:{" + digest + b"}"


def token_key(place: str) -> bytes:
    """The tier's key of the output's fencing token: never expires, only grows."""
    return lease_key(place) + b":token"


def _who(value: bytes | str) -> str:
    text = value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)
    return text.rsplit(" [", 1)[0]


class OutputLease:
    """The lease of one output in `tier`, held as `note` (who and since when) for `seconds`."""

    def __init__(self, tier: Tier, place: str, note: str, seconds: float | None = None) -> None:
        self._tier = tier
        self.place = place
        self._keys = [lease_key(place), token_key(place)]
        self._value = f"{note} [{secrets.token_hex(6)}]".encode()
        self._script = tier.script(_RENEW)
        self._release = tier.script(_RELEASE)
        self.seconds = LEASE_SECONDS if seconds is None else seconds
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._until = 0.0  # time.monotonic() until which the lease is surely ours
        self.token = 0  # the fencing token of our holding (0: none)
        self.lost: str | None = None  # why it is no longer ours, once it is not

    @property
    def renew_seconds(self) -> float:
        return self.seconds / 8

    def steady(self) -> bool:
        """Whether a renewal confirmed the lease lately (within a quarter lease: two renewals
        missed are a tier or a host in trouble). A run sends nothing new while it is not, so a
        host cut off pays little that another host will pay again; confirmed again, it goes on."""
        left = self._until - time.monotonic()
        return self.lost is None and left > self.seconds * (1 - DRIFT - 0.25)

    def take(self) -> str | None:
        """Take the lease and start renewing it: None, or who holds it now (then nothing is
        held). LeaseLost when the tier cannot say (nothing is sent unleased)."""
        sent = time.monotonic()
        reply = self._ask(take=True)
        if reply is None:
            raise LeaseLost(
                "the output's lease cannot be taken: the shared tier (shared.url) "
                "does not answer; a retry resumes once it does"
            )
        ours, value = reply
        if not ours:
            return _who(value) if value else "another run"
        self.token, self._until = int(value), sent + self.seconds * (1 - DRIFT)
        self._thread = threading.Thread(target=self._keep, name="evalpipe-lease", daemon=True)
        self._thread.start()
        return None

    def _ask(self, take: bool) -> tuple[bool, bytes] | None:
        """One round trip of the renewal script: (ours, token or holder); None on an error (the
        tier's down-pause is not waited for: a lease has no time to lose)."""
        import redis

        ms = int(self.seconds * 1000)
        args = [self._value, ms, "1" if take else "0"]
        try:
            ours, value = self._script(keys=self._keys, args=args)
        except redis.RedisError:
            return None
        return bool(ours), value if isinstance(value, bytes) else str(value).encode()

    def _keep(self) -> None:
        """Renew every eighth lease while it is ours; stop once it is lost (module docstring)."""
        while not self._stop.wait(self.renew_seconds) and self.lost is None:
            sent = time.monotonic()
            reply = self._ask(take=False)
            if sent >= self._until:  # whatever Redis says now, it was unconfirmed for a while
                self._lose("it could not be confirmed before it lapsed")
            elif reply is not None and reply[0]:
                self._until = sent + self.seconds * (1 - DRIFT)
            elif reply is not None:
                holder = _who(reply[1]) if reply[1] else None
                self._lose(f"{holder} took it" if holder else "it lapsed")

    def _lose(self, why: str) -> None:
        if self.lost is None:
            self.lost = why
            self._tier.warn(
                f"the output's lease in the shared tier is lost ({why}): this run sends and "
                "commits nothing more"
            )

    def confirm(self) -> None:
        """LeaseLost unless the lease is surely ours now (no round trip: the clock only)."""
        if self.lost is None and time.monotonic() >= self._until:
            self._lose("it could not be confirmed before it lapsed")
        if self.lost is not None:
            raise LeaseLost(
                f"the output's lease in the shared tier was lost ({self.lost}): nothing more "
                "was committed (finished rows are journaled on this host); a retry resumes "
                "once the output is free"
            )

    def release(self) -> None:
        """Stop renewing and give the lease up (only if it is still ours)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=self.renew_seconds + 5)
        release = self._release
        self._tier.call(lambda r: release(keys=self._keys[:1], args=[self._value]), 0)
