"""The tier's values sealed with a key only the account has: nobody else's value is an answer.

Why a module of its own: one Redis may serve several teams, and anyone who can write to it can
write evalpipe's keys with evalpipe's own code; a CRC catches damage, not a forger. So every
value the tier keeps for the account (an answer, a learned value, a canary's baseline) is
sealed: HMAC-SHA256 over its key and itself, under a key derived from the API key (HMAC of a
fixed label and the service's identity, RFC 2104 used as a key derivation: the API key itself
never leaves this process, and another tenant of the Redis, who lacks it, cannot make a seal).
A value whose seal does not hold is a miss, never an answer.

The derived key is kept in this process only, by the account's prefix (`remember`, called when
the prefix is made from the API key); an address that crossed to another process (a Ray actor)
carries no key, and there values are neither read nor written (only the driver's are).
"""

from __future__ import annotations

import hashlib
import hmac

TAG = 32  # bytes of the seal, before the value
LABEL = b"evalpipe-tier-seal/1\0"
_KEYS: dict[str, bytes] = {}  # the account's prefix -> its sealing key, in this process only


def remember(prefix: str, identity: str, api_key: str) -> None:
    """Derive the sealing key of the account at `prefix` from its API key, and keep it here."""
    _KEYS[prefix] = hmac.new(api_key.encode(), LABEL + identity.encode(), hashlib.sha256).digest()


def _tag(secret: bytes, key: bytes, value: bytes) -> bytes:
    message = len(key).to_bytes(4, "big") + key + value
    return hmac.new(secret, message, hashlib.sha256).digest()


def seal(prefix: str, key: bytes, value: bytes) -> bytes | None:
    """`value` as kept at `key`: its seal, then itself (None: this process has no key)."""
    secret = _KEYS.get(prefix)
    return None if secret is None else _tag(secret, key, value) + value


def unseal(prefix: str, key: bytes, kept: bytes) -> bytes | None:
    """The value kept at `key` when its seal holds, else None (forged, damaged, or unsealed)."""
    secret = _KEYS.get(prefix)
    if secret is None or not isinstance(kept, bytes) or len(kept) < TAG:
        return None
    value = kept[TAG:]
    return value if hmac.compare_digest(kept[:TAG], _tag(secret, key, value)) else None
