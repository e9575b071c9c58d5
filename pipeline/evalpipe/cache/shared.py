"""The answer cache in the shared tier: what one host paid, every host on the account reads.

Why a module of its own: pods that start empty every night share no disk, so with `shared.url`
a job's `JobCache` keeps its answers in the tier instead of the machine's SQLite file. This is
the file's other implementation, the same surface (`question_ids`, `get`, `put`) over the tier's
keys: one key per (question digest, state digest) under the account's prefix, so the rule is
today's (the service, the versioned model and the question's content in the digest; answers
given in packs under a service of their own), and the value is the same checked blob, after when
it was paid and the model that gave it, sealed with the account's key (`evalpipe.tier.seal`: a
value another tenant of the Redis wrote is a miss, said once). `cache.max_age_days` (with a
tier, `SHARED_MAX_AGE_DAYS` when unset: a shared Redis must not fill) is the keys' time to live,
so Redis forgets them and nothing prunes, and it is checked again on reading (a key kept under
a longer limit is not an answer under a shorter one). A tier that is away is a miss and a write
not made (`evalpipe.tier.Tier.call`), never a wrong answer.

Claims: two hosts that meet one state at once should pay it once. Before a job sends a state's
request it claims the state (`claim`: a key with a short expiry, renewed while the request is
in flight); a host that finds a state claimed by another waits for the answer to appear and
sends it only when the claim lapses (`claimed_elsewhere`), as after the other host died. A claim
lasts `CLAIM_SECONDS`, or the job's `shared.lease_seconds` when that is shorter: a host that
died frees its output's lease and the states it claimed alike, so a retry elsewhere that comes
as soon as the lease lapsed does not wait longer for its claims.
"""

from __future__ import annotations

import hashlib
import secrets
import time
from collections.abc import Iterable, Sequence

from evalpipe.cache.store import DAY, UNKNOWN_SERVICE, Row
from evalpipe.tier import Tier, TierAddress

CLAIM_SECONDS = 15.0  # a claim nobody renewed this long lapses: its state is anyone's again
# (at most: `shared.lease_seconds` when shorter)
SHARED_MAX_AGE_DAYS = 30.0  # answers' time to live in the tier when cache.max_age_days is unset


class SharedStore:
    """The answers of the account in `tier`, for answers at most `max_age_days` old; its claims
    last `claim_seconds` (CLAIM_SECONDS, or `lease_seconds` when shorter)."""

    def __init__(
        self,
        tier: Tier,
        address: TierAddress,
        max_age_days: float | None,
        lease_seconds: float = CLAIM_SECONDS,
    ) -> None:
        self._tier = tier
        self.claim_seconds = min(CLAIM_SECONDS, lease_seconds)
        self._address = address
        self._max_age = (SHARED_MAX_AGE_DAYS if max_age_days is None else max_age_days) * DAY
        self.path = "the shared tier (shared.url)"  # as messages name a cache: never its URL
        self._ids: dict[bytes, int] = {}  # question digests numbered in this process
        self._digests: dict[int, bytes] = {}
        self._token = secrets.token_bytes(12)  # this job's claims
        self._claim_space = b""  # set by `question_ids`: the job's questions, as one digest

    def question_ids(
        self, digests: Sequence[bytes], add: bool, service: str = UNKNOWN_SERVICE
    ) -> dict[bytes, int]:
        """Numbers for these question digests (in this process only: the tier keys by digest)."""
        for digest in digests:
            if digest not in self._ids:
                self._ids[digest] = len(self._ids) + 1
                self._digests[self._ids[digest]] = digest
        questions = b"".join(sorted(self._ids))
        self._claim_space = hashlib.blake2b(questions, digest_size=12).digest()
        return {d: self._ids[d] for d in digests}

    def _key(self, question: int, state: bytes) -> bytes:
        return self._address.key(b"a", self._digests[question] + state)

    def get(
        self, states: Sequence[bytes], questions: Sequence[int], since: int = 0
    ) -> list[tuple[bytes, int, bytes, str]]:
        """(state, question, answer blob, model) of these states' answers kept in the tier
        no older than the age limit (or `since`, a time in seconds)."""
        pairs = [(state, question) for state in states for question in questions]
        keys = [self._key(q, s) for s, q in pairs]
        values = self._tier.get_many(keys)
        found, forged = [], 0
        oldest = max(since, time.time() - self._max_age)
        for (state, question), key, kept in zip(pairs, keys, values, strict=True):
            value = None if kept is None else self._address.unseal(key, kept)
            forged += kept is not None and value is None
            paid, model, blob = _parts(value)
            if blob is not None and paid >= oldest:
                found.append((state, question, blob, model))
        self._tier.forged(forged)
        return found

    def put(self, rows: Sequence[Row]) -> None:
        """Keep (state, question, blob, model, tokens, created) rows, each for what is left of
        the age limit; one round trip."""
        now = time.time()
        items = []
        for state, question, blob, model, _, created in rows:
            ttl = int(self._max_age - (now - created))
            key = self._key(question, state)
            value = self._address.seal(key, b"%d\n%s\n%s" % (int(created), model.encode(), blob))
            if value is not None and ttl > 0:
                items.append((key, value, ttl))
        self._tier.put_many(items)

    def wait(self, seconds: float) -> None:
        """Nothing to wait for: the tier has no writer's lock (the file's has)."""

    def prune(self, before: int, budget: float | None = None) -> int:
        """Nothing to prune: the keys' time to live is the age limit."""
        return 0

    def close(self) -> None:
        """Nothing of the job's own to close (the tier is the process's)."""

    # -- claims ------------------------------------------------------------------------------

    def _claim_key(self, state: bytes) -> bytes:
        return self._address.key(b"c", self._claim_space + state)

    def claim(self, states: Iterable[bytes]) -> set[bytes]:
        """Claim (or renew) `states` for this job: those another job holds (they are its to
        pay; empty when the tier is away, then every host pays its own)."""
        states = list(states)
        keys = [self._claim_key(s) for s in states]
        ours = self._tier.claim(keys, self._token, self.claim_seconds)
        if ours is None:
            return set()
        return {state for state, mine in zip(states, ours, strict=True) if not mine}

    def claimed_elsewhere(self, states: Iterable[bytes]) -> set[bytes]:
        """Of `states`, those another job still holds (a lapsed claim is nobody's)."""
        states = list(states)
        holders = self._tier.holders([self._claim_key(s) for s in states])
        if holders is None:
            return set()
        return {
            state
            for state, holder in zip(states, holders, strict=True)
            if holder is not None and holder != self._token
        }


def _parts(value: bytes | None) -> tuple[int, str, bytes | None]:
    """(when it was paid, model, answer blob) of a value unsealed; blob None when it has not
    that shape."""
    if value is None:
        return 0, "", None
    paid, _, rest = value.partition(b"\n")
    model, sep, blob = rest.partition(b"\n")
    if not sep or not paid.isdigit():
        return 0, "", None
    return int(paid), model.decode("utf-8", "replace"), blob
