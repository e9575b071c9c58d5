"""The tier as one process uses it: one client, and calls that never fail a run.

Why a module of its own: the answer cache, what is learned and the output's lease all talk to the
tier from the driver, and each must outlive the tier's loss the same way. So every call goes
through `Tier.call`: a Redis error (the server gone, a timeout, a restart) marks the tier down
with one warning, the call returns its default (a miss, nothing kept), and for `RETRY_SECONDS`
no call tries again, so a run without its tier costs nothing; the next call after that
reconnects (redis-py makes a new connection) and, when it answers, one line says so. The
primitives here are the only Redis commands outside the pace (`evalpipe.tier.pace`) and the
lease (`evalpipe.tier.lease`): answers by key with an age limit, claims with an expiry, and small
kept fields.

One `Tier` per address and process (`Tier.of`): the session opens it with its log's warning
(`check`: exit 2 when it refuses us), and later users in the process find it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from evalpipe.errors import first_line
from evalpipe.tier.address import TierAddress, check

T = TypeVar("T")
RETRY_SECONDS = 2.0  # a tier found down is not asked again for this long
CHUNK = 2000  # keys per command of a batch
_OPEN: dict[tuple[str, str], Tier] = {}  # by URL and password variable: one per tier
_OPENING = threading.Lock()

# KEYS: claim keys; ARGV[1]: our token, ARGV[2]: milliseconds. Each key is taken when free,
# renewed when ours; the reply says, per key, whether it is ours now (1) or another's (0).
_CLAIM = """
local out = {}
for i, key in ipairs(KEYS) do
  local holder = redis.call('GET', key)
  if not holder then
    redis.call('SET', key, ARGV[1], 'PX', ARGV[2])
    out[i] = 1
  elseif holder == ARGV[1] then
    redis.call('PEXPIRE', key, ARGV[2])
    out[i] = 1
  else
    out[i] = 0
  end
end
return out
"""


class Tier:
    """One client of the tier at `address`; `warn` is told when it is lost and back."""

    def __init__(
        self, address: TierAddress, client: Any, warn: Callable[[str], None] = lambda m: None
    ) -> None:
        self.address = address
        self._client = client
        self.warn = warn
        self._down_until = 0.0
        self._lost: str | None = None  # why, while it is down
        self._unsaid: list[str] = []  # the start's warnings, until a run's log is given
        self._claim = client.register_script(_CLAIM)
        self._forged_said = False

    @classmethod
    def of(cls, address: TierAddress, warn: Callable[[str], None] | None = None) -> Tier:
        """This process's Tier at `address` (one per URL and password variable, whatever the
        account: keys carry their account's prefix), opened and checked on first use
        (ConfigError when it refuses us); `warn` (the run's log) replaces the one it had."""
        with _OPENING:
            tier = _OPEN.get((address.url, address.password_env))
            if tier is None:
                client, warnings = check(address)
                tier = _OPEN[address.url, address.password_env] = cls(address, client)
                tier._unsaid = warnings  # said once a run's log is given
        if warn is not None:
            tier.warn = warn
            unsaid, tier._unsaid = tier._unsaid, []
            for warning in unsaid:
                warn(warning)
        return tier

    def script(self, source: str) -> Any:
        """A Lua script on this tier's client, called without `call`'s pause (its errors are
        the caller's: the lease's, which cannot wait out a pause)."""
        return self._client.register_script(source)

    def forged(self, count: int) -> None:
        """`count` values whose seal did not hold were read as misses: said once a process."""
        if count and not self._forged_said:
            self._forged_said = True
            self.warn(
                f"{count} value(s) in the shared tier failed their check (written without this "
                "account's API key, damaged, or kept by an older evalpipe): each is read as a "
                "miss, never as an answer; this is said once"
            )

    @property
    def up(self) -> bool:
        return self._lost is None

    def call(self, fn: Callable[[Any], T], default: T) -> T:
        """`fn(client)`, or `default` when the tier is down or fails now (module docstring)."""
        import redis

        if self._lost is not None and time.monotonic() < self._down_until:
            return default
        try:
            result = fn(self._client)
        except redis.RedisError as exc:
            self._down(exc)
            return default
        if self._lost is not None:
            self._lost = None
            self.warn("the shared tier (shared.url) is back: this run shares through it again")
        return result

    def _down(self, exc: BaseException) -> None:
        self._down_until = time.monotonic() + RETRY_SECONDS
        if self._lost is None:
            self._lost = first_line(exc)
            self.warn(
                f"the shared tier (shared.url) was lost ({self._lost}): this run goes on with "
                "this host's own pace and without the shared cache, and reconnects when it can"
            )

    # -- answers: values by key, with an age limit ---------------------------------------------

    def get_many(self, keys: Sequence[bytes]) -> list[bytes | None]:
        """The values of `keys` (None for a key not there), all None when the tier is down;
        one round trip (MGETs of CHUNK keys in a pipeline)."""

        def get(client: Any) -> list[bytes | None]:
            with client.pipeline(transaction=False) as pipe:
                for start in range(0, len(keys), CHUNK):
                    pipe.mget(list(keys[start : start + CHUNK]))
                return [value for chunk in pipe.execute() for value in chunk]

        found = self.call(get, None) if keys else []
        return [None] * len(keys) if found is None else found

    def put_many(self, items: Sequence[tuple[bytes, bytes, int | None]]) -> bool:
        """Set (key, value, seconds to live or None) in one round trip; whether it was done."""

        def put(client: Any) -> bool:
            with client.pipeline(transaction=False) as pipe:
                for key, value, ttl in items:
                    pipe.set(key, value, ex=ttl)
                pipe.execute()
            return True

        return bool(items) and self.call(put, False)

    # -- claims: who pays for a state now --------------------------------------------------------

    def claim(self, keys: Sequence[bytes], token: bytes, seconds: float) -> list[bool] | None:
        """Take (or renew, when ours) each claim for `seconds`: per key, whether it is ours.
        None when the tier is down (then nobody's claims count)."""
        if not keys:
            return []
        ms = max(1, int(seconds * 1000))
        replies = self.call(lambda r: self._claim(keys=list(keys), args=[token, ms]), None)
        return None if replies is None else [bool(n) for n in replies]

    def holders(self, keys: Sequence[bytes]) -> list[bytes | None] | None:
        """Who holds each claim (None: nobody); None when the tier is down."""
        got = self.call(lambda r: r.mget(list(keys)) if keys else [], None)
        return None if got is None else list(got)

    # -- small kept values (what is learned) ---------------------------------------------------

    def field(self, name: bytes, field: str) -> bytes | None:
        """One field of the hash `name`; None when not there or the tier is down."""
        value = self.call(lambda r: r.hget(name, field), None)
        return value if isinstance(value, bytes) else None

    def set_field(self, name: bytes, field: str, value: bytes) -> None:
        self.call(lambda r: r.hset(name, field, value), 0)

    def close(self) -> None:
        with _OPENING:
            if _OPEN.get((self.address.url, self.address.password_env)) is self:
                del _OPEN[self.address.url, self.address.password_env]
        self._client.close()
