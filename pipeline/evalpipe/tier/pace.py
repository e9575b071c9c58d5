"""The account's schedule in the tier: every sender on the key, on any host, reserves on it.

Why a module of its own: hosts that share no Ray and no disk meet only here. It is the host
schedule file's algorithm (`evalpipe.limits.hostpace`: the generic cell rate algorithm, for
requests and for tokens, half a second of burst) kept in Redis instead of a file, and run on
the server as one Lua script, so one reservation is one atomic round trip and the hosts'
grants together keep to the limits in the order they were asked. Times are the server's
(`TIME`), so the hosts' clocks need not agree; the reply is how long to wait.

    pace = TierPace(address, fallback=HostPace.open(...))    # in the Budget's process
    pace.set_limits(rps=19.9, tps=248_750)
    delay = await pace.reserve(requests=1, tokens=480)      # seconds until they may go

It is the Budget's `Schedule` (`evalpipe.limits.pacing`), on the actor's event loop through
redis-py's asyncio client. When the tier fails, the reservation falls back to `fallback` (the
host's schedule file, or nothing) and the Budget's own pace, whose AIMD on 429s holds the rest;
the tier is asked again after `RETRY_SECONDS`.
"""

from __future__ import annotations

import time
from typing import Any, Protocol

from evalpipe.tier.address import TierAddress
from evalpipe.tier.client import RETRY_SECONDS

BURST = 0.5  # seconds the schedule may run ahead of now (evalpipe.limits.hostpace's BURST)
KEEP_MS = 60_000  # a schedule nobody reserved on this long is forgotten (it is in the past)

# KEYS[1], KEYS[2]: when the request and token schedules are next free (server seconds).
# ARGV: request gap, token gap (seconds each), requests, tokens, burst. Replies the delay.
_RESERVE = """
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
local function free(key)
  local at = tonumber(redis.call('GET', key))
  if at == nil or at < now or at > now + 30 then return now end
  return at
end
local request_span = tonumber(ARGV[3]) * tonumber(ARGV[1])
local token_span = tonumber(ARGV[4]) * tonumber(ARGV[2])
local burst = tonumber(ARGV[5])
local request_free, token_free = free(KEYS[1]), free(KEYS[2])
local go = math.max(now, request_free + request_span - burst, token_free + token_span - burst)
redis.call('SET', KEYS[1], string.format('%.6f', math.max(request_free, go) + request_span),
  'PX', ARGV[6])
redis.call('SET', KEYS[2], string.format('%.6f', math.max(token_free, go) + token_span),
  'PX', ARGV[6])
return string.format('%.6f', go - now)
"""


class Fallback(Protocol):
    """What a reservation falls back to while the tier is away (the host's schedule file)."""

    def set_limits(self, rps: float, tps: float) -> None: ...

    def reserve(self, requests: int, tokens: int) -> float: ...

    def close(self) -> None: ...


class TierPace:
    """The account's schedule in the tier at `address`, with `fallback` while it is away."""

    def __init__(self, address: TierAddress, fallback: Fallback | None = None) -> None:
        self.address = address
        self._fallback = fallback
        self._gaps = (0.0, 0.0)  # unpaced until `set_limits`
        self._client: Any = None  # made on the event loop that reserves
        self._script: Any = None
        self._down_until = 0.0
        self.lost: str | None = None  # why the tier is away (the Budget's stats say it)
        self._keys = [address.key("pace", "requests"), address.key("pace", "tokens")]

    def set_limits(self, rps: float, tps: float) -> None:
        """The configured limits (times headroom) this host's reservations are spaced at."""
        self._gaps = (1.0 / rps, 1.0 / tps)
        if self._fallback is not None:
            self._fallback.set_limits(rps, tps)

    async def reserve(self, requests: int, tokens: int) -> float:
        """Take the next slot for `requests` and `tokens` on the account's schedule: the
        seconds to wait before they go (0 when they may go now)."""
        import redis

        if self.lost is None or time.monotonic() >= self._down_until:
            try:
                delay = float(await self._reserve(requests, tokens))
            except redis.RedisError as exc:
                self.lost = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
                self._down_until = time.monotonic() + RETRY_SECONDS
            else:
                self.lost = None
                return delay if delay > 1e-6 else 0.0
        return self._fallback.reserve(requests, tokens) if self._fallback is not None else 0.0

    async def unreachable(self) -> str | None:
        """Why this process cannot reserve on the tier (None: it can): the Budget's process
        reads the password from its own environment, which on a Ray cluster started apart is
        not the driver's. Asks with an empty reservation, which takes no slot."""
        await self.reserve(0, 0)
        return self.lost

    async def _reserve(self, requests: int, tokens: int) -> Any:
        if self._script is None:
            import redis.asyncio

            self._client = redis.asyncio.Redis.from_url(self.address.url, **self.address.options())
            self._script = self._client.register_script(_RESERVE)
        request_gap, token_gap = self._gaps
        args = [f"{request_gap:.9f}", f"{token_gap:.12f}", requests, tokens, BURST, KEEP_MS]
        return await self._script(keys=self._keys, args=args)

    def close(self) -> None:
        """Close the fallback's file (the client goes with the event loop)."""
        if self._fallback is not None:
            self._fallback.close()
            self._fallback = None
