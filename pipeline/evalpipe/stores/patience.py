"""Waiting out an object store that went away for a while, instead of ending the run.

An object store is a network service: a restart, a network blip or a throttling episode can
make every request fail for seconds or minutes, and pyarrow's own retries do not cover that (an
S3 filesystem as `FileSystem.from_uri` makes it retries a request every 0.2 s for 6 s: Arrow's
ConnectRetryStrategy). A nightly run that has paid for an hour of answers should not end on a
20-second outage, so a store that answered when the run began is waited for mid-run: each
operation is tried again with a growing pause (`FIRST_DELAY` doubling up to `MAX_DELAY`) for up
to `PATIENCE_SECONDS`. Only errors that say the store could not be reached are waited for; a
missing object, a refused permission or a bad request fail at once. After that long, the error
says how long the store was away; the rows already finished are in the local journal, so the
same command resumes once the store is back.

Beneath this wait, pyarrow's own is cut short (`evalpipe.stores.location.patient_fs`): a
filesystem whose operations are waited on here makes `STORE_ATTEMPTS` attempts at a request (a
lone dropped connection is still retried where it happened, after a pause under a second), so
an operation that cannot reach the store comes back here within about a second, not 6 s, and
the store's absence is noticed, and reported, after `PATIENCE_SECONDS`, not that plus 6 s.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

from evalpipe.errors import first_line

T = TypeVar("T")

PATIENCE_SECONDS = 120.0  # how long a store that answered at the start is waited for mid-run
FIRST_DELAY = 0.5  # seconds before the first retry, doubling ...
MAX_DELAY = 5.0  # ... up to this
STORE_ATTEMPTS = 2  # attempts pyarrow's S3 client makes at one request under `patiently`
# How pyarrow (the AWS SDK, curl; GCS, Azure) says a store could not be reached or is throttling.
_AWAY = (
    "NETWORK_CONNECTION",
    "curlCode",
    "Could not connect",
    "Couldn't connect",
    "Connection refused",
    "Connection reset",
    "connection was closed",
    "timed out",
    "Timeout",
    "SERVICE_UNAVAILABLE",
    "SLOW_DOWN",
    "SlowDown",
    "INTERNAL_FAILURE",
    "Service Unavailable",
)


def unreachable(exc: BaseException) -> bool:
    """Whether `exc` says the store could not be reached (worth waiting for)."""
    if not isinstance(exc, OSError) or isinstance(
        exc, (FileNotFoundError, PermissionError, IsADirectoryError, NotADirectoryError)
    ):
        return False
    text = str(exc)
    return any(sign in text for sign in _AWAY)


def patiently(
    operation: Callable[[], T],
    patience: float,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
) -> T:
    """`operation()`, tried again while the store cannot be reached, for up to `patience`
    seconds; then an OSError that says how long it was away."""
    delay, began = FIRST_DELAY, None
    while True:
        try:
            return operation()
        except OSError as exc:
            if patience <= 0 or not unreachable(exc):
                raise
            now = clock()
            began = now if began is None else began
            if now - began >= patience:
                raise OSError(
                    f"the store could not be reached for {now - began:.0f}s ({first_line(exc)})"
                ) from None
            sleep(min(delay, max(0.0, began + patience - now)))
            delay = min(MAX_DELAY, delay * 2)
