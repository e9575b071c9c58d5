"""Where the shared tier is, as plain data, and the check at start that it takes us.

Why a module of its own: the address crosses to Ray actors (the account's Budget reserves on
the tier from its own process), so it holds no secret: the URL (never with a password: the
config refuses one), the name of the variable that holds the password, which each process
reads from its own environment, and the account's key prefix. The prefix is a digest of the
service's identity and the API key, never the key: keys of one account meet, keys of two never
do, and nothing in Redis names either.

`check` is the start-up's one round trip (before anything is sent): a tier that refuses the
password or cannot be reached is one `ConfigError` line naming `shared.url` and the variable
(exit 2); a tier that evicts keys under memory pressure is one warning.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from evalpipe.config import api_key_in
from evalpipe.errors import ConfigError, first_line
from evalpipe.tier.seal import remember, seal, unseal

if TYPE_CHECKING:
    from evalpipe.config import JobConfig

CONNECT_SECONDS = 1.0  # a tier that has not answered by then is not there
CALL_SECONDS = 2.0  # one call's longest wait once connected
RETRIES, RETRY_CAP = 2, 0.1  # redis-py's retries of a dropped connection, and their longest pause
# Redis' own "no password" / "wrong password" replies, as redis-py raises them (it maps some to
# AuthenticationError, others stay ResponseError).
_REFUSALS = ("WRONGPASS", "NOAUTH", "invalid password", "invalid username-password")


@dataclass(frozen=True)
class TierAddress:
    """The tier's URL, the variable holding its password, and the account's key prefix."""

    url: str
    password_env: str
    prefix: str  # evalpipe:{digest}: every key of the account starts with it

    def password(self) -> str | None:
        """The password from this process's environment (None: none is sent)."""
        return os.environ.get(self.password_env) or None

    def seal(self, key: bytes, value: bytes) -> bytes | None:
        """`value` sealed for `key` with the account's key (`evalpipe.tier.seal`); None in a
        process that does not hold it (then nothing is written)."""
        return seal(self.prefix, key, value)

    def unseal(self, key: bytes, kept: bytes) -> bytes | None:
        """The value kept at `key` when its seal holds (None: a miss)."""
        return unseal(self.prefix, key, kept)

    def key(self, *parts: str | bytes) -> bytes:
        """The account's key of `parts` (joined by ':')."""
        out = self.prefix.encode()
        for part in parts:
            out += b":" + (part if isinstance(part, bytes) else part.encode())
        return out

    def options(self) -> dict[str, Any]:
        """redis-py's connection options (the password included: never logged). Its retries
        are few and short (its default, 10 with up to 1 s between, would stall a run on a tier
        that is gone for seconds at every call): a tier that fails is paused instead
        (`evalpipe.tier.client`). Only a dropped connection is retried, not a call that timed
        out: a tier that let one call wait `CALL_SECONDS` (frozen, cut off) would let the
        retries wait as long again each, holding up a run, and a lease's renewal, for three
        times the call's longest wait."""
        from redis.backoff import ExponentialWithJitterBackoff
        from redis.exceptions import ConnectionError
        from redis.retry import Retry

        backoff = ExponentialWithJitterBackoff(cap=RETRY_CAP, base=0.01)
        return {
            "password": self.password(),
            "socket_connect_timeout": CONNECT_SECONDS,
            "socket_timeout": CALL_SECONDS,
            "retry": Retry(backoff, RETRIES, supported_errors=(ConnectionError,)),
        }


def account_prefix(identity: str, key: str) -> str:
    """The account's key prefix: a digest of the service's identity and the API key. The braces
    make it a Redis Cluster hash tag, so an account's keys live in one slot."""
    material = f"evalpipe-tier\0{identity}\0{key}".encode()
    prefix = "evalpipe:{" + hashlib.blake2b(material, digest_size=12).hexdigest() + "}"
    remember(prefix, identity, key)  # the values' sealing key, in this process only
    return prefix


def job_address(config: JobConfig) -> TierAddress | None:
    """The tier of a job (`shared.url`) with its account's prefix, None when it has none. The
    API key is read from the variable the config names (as it is when the run starts)."""
    shared = config.shared
    if shared.url is None:
        return None
    key = api_key_in(config.service.api_key_env)
    return TierAddress(
        shared.url, shared.password_env, account_prefix(config.service.identity, key)
    )


def sync_client(address: TierAddress) -> Any:
    """A redis-py client of the tier (connections are made on first use)."""
    import redis

    return redis.Redis.from_url(address.url, **address.options())


def refused(exc: BaseException) -> bool:
    """Whether `exc` is the tier refusing our password (or asking for one)."""
    import redis

    text = str(exc)
    return isinstance(exc, redis.AuthenticationError) or (
        isinstance(exc, redis.ResponseError) and any(r in text for r in _REFUSALS)
    )


def check(address: TierAddress) -> tuple[Any, list[str]]:
    """Connect and ask once: (the client, warnings). A tier that refuses the password or cannot
    be reached raises ConfigError (exit 2), naming `shared.url` and the variable."""
    import redis

    client = sync_client(address)
    variable = f"${address.password_env}"
    try:
        client.ping()
        memory = client.info("memory")
    except redis.RedisError as exc:
        client.close()
        if refused(exc):
            state = "is not set" if address.password() is None else "holds the wrong one"
            raise ConfigError(
                f"shared.url: the tier refused the password ({first_line(exc)}); "
                f"{variable} {state}: set it to the tier's password (shared.password_env "
                "names the variable)"
            ) from None
        raise ConfigError(
            f"shared.url: the tier cannot be reached ({first_line(exc)}); start it or "
            f"correct the URL (its password comes from {variable}), or unset shared.url to "
            "share nothing"
        ) from None
    return client, evicting(address, memory)


def evicting(address: TierAddress, memory: dict[str, Any]) -> list[str]:
    """A warning when the tier may drop keys under memory pressure: a schedule or a lease
    evicted is a pace or an output no longer shared."""
    policy = str(memory.get("maxmemory_policy", "noeviction"))
    limit = int(memory.get("maxmemory", 0) or 0)
    if policy == "noeviction" or limit == 0:
        return []
    return [
        f"shared.url: the tier evicts keys when full (maxmemory-policy {policy}, maxmemory "
        f"{limit:,} bytes): an evicted schedule or lease is no longer shared; give the tier "
        "maxmemory-policy noeviction"
    ]
