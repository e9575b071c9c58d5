"""States another host is paying for: parked until its answer is in the shared cache.

Why a module of its own: with a shared tier, two hosts started at once on one corpus meet the
same states at the same moment, and the answer cache alone cannot keep them from both paying:
neither has an answer yet. So the dispatcher claims each state it is about to send
(`evalpipe.cache.JobCache.claim`, a key with a short expiry in the tier); a state another host
claimed first is parked here with its rows instead of sent. Every `RECHECK_SECONDS` the parked
states are looked up in the cache: those answered in full are finished from it, and those whose
claim lapsed (the other host died, or its request failed) are claimed and sent. The claims of
this host's own states are renewed every third of their length (`RENEW_SHARE` of the cache's
`claim_seconds`) while they are in hand, so they lapse only when it stops. Without a shared
tier nothing is ever parked.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from evalpipe.cache import JobCache
from evalpipe.engine.sending import Pending
from evalpipe.planning import CacheHit

RECHECK_SECONDS = 0.5  # how often parked states are looked up again
RENEW_SHARE = 1 / 3  # this host's claims in hand are renewed every third of their length
Lookup = Callable[[Sequence[bytes]], Mapping[bytes, CacheHit]]


@dataclass
class Parked:
    """The pendings another host holds the claim of, by state (`cache`: the one that claims)."""

    cache: JobCache | None
    pendings: dict[bytes, Pending] = field(default_factory=dict)
    _checked: float = 0.0
    _renewed: float = 0.0

    def __len__(self) -> int:
        return len(self.pendings)

    def claim(self, fresh: list[Pending]) -> list[Pending]:
        """Claim the states of `fresh` pendings: those to send now; the others are parked."""
        if self.cache is None or not fresh:
            return fresh
        elsewhere = self.cache.claim([p.state_hash for p in fresh])
        send = []
        for pending in fresh:
            if pending.state_hash in elsewhere:
                self.pendings[pending.state_hash] = pending
            else:
                send.append(pending)
        return send

    def recheck(
        self, lookup: Lookup, in_hand: Iterable[Pending]
    ) -> tuple[list[tuple[Pending, CacheHit]], list[Pending]]:
        """At most every RECHECK_SECONDS: (parked pendings answered in full, with the answers;
        parked pendings whose claim lapsed and is now ours, to send). Renews this host's claims
        of the pendings `in_hand` every `RENEW_SHARE` of their length."""
        now = time.monotonic()
        if self.cache is None or now - self._checked < RECHECK_SECONDS:
            return [], []
        self._checked = now
        if now - self._renewed >= self.cache.claim_seconds * RENEW_SHARE:
            self._renewed = now
            self.cache.claim([p.state_hash for p in in_hand if p.state_hash not in self.pendings])
        if not self.pendings:
            return [], []
        hits = lookup(list(self.pendings))
        answered = []
        for state, hit in hits.items():
            pending = self.pendings[state]
            asked = {key for request in pending.job.requests for key in request.keys}
            if asked <= set(hit.answers):
                answered.append((self.pendings.pop(state), hit))
        lapsed = self.claim(list(self.pendings.values()))
        for pending in lapsed:
            del self.pendings[pending.state_hash]
        return answered, lapsed

    def drop(self) -> list[Pending]:
        """Give up every parked pending (the run stops): their rows stay unwritten."""
        dropped, self.pendings = list(self.pendings.values()), {}
        return dropped
