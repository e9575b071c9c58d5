"""`shared`: the one setting that names the shared tier (Redis), which hosts on one account share.

Why a module of its own: the tier is optional and new, and `evalpipe.config.model` holds the
sections every job has; this one is added to `JobConfig` as `shared`, unset by default (then
nothing is shared beyond this machine, as before). The password never goes in the file: the URL
is refused when it carries one, and `password_env` names the variable that holds it.
"""

from __future__ import annotations

from urllib.parse import urlsplit

from pydantic import Field, field_validator

from evalpipe.config.section import ConfigSection
from evalpipe.stores import refusal

SCHEMES = ("redis", "rediss")
PASSWORD_ENV = "EVALPIPE_SHARED_PASSWORD"


class SharedConfig(ConfigSection):
    """The shared tier: hosts that share no Ray and no disk share the account's pace, the
    answer cache, what is learned and one run per output through it."""

    url: str | None = None
    """The Redis that every host on the account reaches: `redis://host:6379/0`, or
    `rediss://host:6380/0` for TLS (a user name may come before `@`, never a password). Set, the
    account's requests and tokens are reserved on one schedule in it, answers are cached and
    looked up in it, what is learned of the service is kept in it, and an output is held by a
    lease in it. A tier that refuses the password or cannot be reached at start is exit 2; one
    lost during a run is a warning, and the run goes on alone. Unset: nothing is shared beyond
    this machine."""
    lease_seconds: float = Field(default=20.0, gt=0)
    """How long the output's lease in the tier lasts unrenewed (it is renewed every eighth of
    it): a host that died frees its output this soon, and the states it had claimed to pay
    (claims last 15 s, or this when shorter); a run that cannot confirm its lease for a
    quarter of it sends nothing new until it can, and one that cannot for this long (the tier or
    the host stalled) stops sending and committing and exits 9, which a scheduler retries."""
    password_env: str = PASSWORD_ENV
    """The name of the environment variable that holds the tier's password (never the password
    itself). Unset or empty: no password is sent."""

    @field_validator("url")
    @classmethod
    def _url(cls, url: str | None) -> str | None:
        if url is None:
            return None
        try:  # credentials first: no message says more of a URL that holds them
            why = refusal(url, "the variable shared.password_env names")
            if why is None:
                parts = urlsplit(url)
                parts.port  # noqa: B018 - a port that is not a number raises here
        except ValueError:
            raise ValueError("not a URL (redis://host[:port][/db])") from None
        if why is not None:
            raise ValueError(why)
        if parts.scheme not in SCHEMES or not parts.hostname:
            raise ValueError(
                f"must be redis://host[:port][/db] or rediss://... (its scheme is "
                f"'{parts.scheme[:20]}')"
            )
        return url
