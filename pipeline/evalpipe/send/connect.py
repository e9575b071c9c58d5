"""The connection to the evaluation service: the key, the embedded service, the start-up probe.

The CLI drives this module, so the job itself only ever receives a base URL:

    with Connection(config.service, config.limits) as connection:
        connection.fail_fast()           # a remote service that refuses at once: before Ray
        run_job(prepared, connection.ready, ...)

Opening a `Connection` reads the API key from the variable the config names (for `embedded`
with the variable unset, a one-off key is made and exported, so local Ray workers inherit it),
starts the embedded reference service when asked, and probes `GET /v1/models` — all in a
thread, because the job starts Ray meanwhile in the main thread (Ray's processes die with the
thread that started them). `ready` is a future of the base URL; it raises `AuthError` or
`ServiceUnreachable` if the service refused the key or could not be reached.

`keep=True` (the Python API's jobs: a notebook's calls, one after another) keeps the embedded
service for the process's next job of the same settings (`evalpipe.service.kept_service`):
the same URL, so the same account and Budget, and no second of start-up a call. The CLI runs
one job a process and stops its service with the job. The one-off key is made once a process
(under a lock, for jobs on several threads), so the calls that follow find it, and the service
kept with it.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
import threading
from collections.abc import Callable, Iterator
from concurrent import futures
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import ExitStack, contextmanager

from evalpipe.config import EMBEDDED, LimitsConfig, RetryPolicy, ServiceConfig, api_key_in
from evalpipe.contract import ModelEntry
from evalpipe.errors import MissingKeyError
from evalpipe.send.client import EvalClient

# A remote service's quick refusal is reported before Ray starts: `fail_fast` waits for the
# probe's first attempt to tell (an answer, a final error, or a retry to come) this long at most.
EARLY_PROBE_SECONDS = 1.5
# `evalpipe models` is interactive: a few quick retries, not a night's patience.
INTERACTIVE_POLICY = RetryPolicy(max_attempts=3, base_delay=0.5, max_delay=2.0, attempt_timeout=10)
_ONE_OFF = threading.Lock()  # two jobs' threads that find the variable unset make one key


def api_key(service: ServiceConfig) -> str:
    """The key from the variable `service.api_key_env` names; MissingKeyError if it is unset
    (for the embedded service, a one-off key is made and exported instead)."""
    env = service.api_key_env
    key = api_key_in(env)
    if key:
        return key
    if service.base_url == EMBEDDED:
        with _ONE_OFF:
            key = api_key_in(env)  # another thread's, made meanwhile
            if not key:  # the workers' (a local Ray inherits it)
                key = os.environ[env] = secrets.token_urlsafe(24)
        return key
    raise MissingKeyError(
        f"service.api_key_env: the variable {env} is not set; export the API key in it"
    )


@contextmanager
def service_url(
    service: ServiceConfig, limits: LimitsConfig, key: str, keep: bool = False
) -> Iterator[str]:
    """The base URL to call; starts (and at the end stops) the embedded reference service, or
    with `keep` finds the one kept for these settings (started and kept if there is none)."""
    if service.base_url != EMBEDDED:
        yield service.base_url
        return
    from evalpipe.service import EmbeddedService, ServiceSettings, kept_service

    settings = ServiceSettings(
        api_key=key,
        rpm=limits.requests_per_minute,
        tps=limits.tokens_per_second,
        latency=service.latency,
    )
    if keep:
        yield kept_service(settings).base_url
        return
    with EmbeddedService(settings, port=0, mode="process") as embedded:
        yield embedded.base_url


async def _probe(url: str, key: str, wait: float, retrying: Callable[[], None]) -> None:
    """One GET /v1/models: an unreachable service or a refused key stops the job here."""
    async with EvalClient(url, key) as client:
        await client.probe(wait=wait, retrying=retrying)


class Connection:
    """The service of one job, started (or found kept, with `keep`) and probed in the
    background (module docstring)."""

    def __init__(self, service: ServiceConfig, limits: LimitsConfig, keep: bool = False) -> None:
        self.service = service
        self._limits = limits
        self._keep = keep
        self._key = api_key(service)
        self._stack = ExitStack()
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="evalpipe-connect")
        self._told: Future[None] = Future()  # the first attempt told: answered, failed, retrying
        self.ready: Future[str] = self._pool.submit(self._connect)
        self.ready.add_done_callback(lambda _: self._tell())

    def _connect(self) -> str:
        url = self._stack.enter_context(
            service_url(self.service, self._limits, self._key, self._keep)
        )
        asyncio.run(_probe(url, self._key, self.service.connect_wait, self._tell))
        return url

    def _tell(self) -> None:
        with contextlib.suppress(futures.InvalidStateError):  # told already
            self._told.set_result(None)

    def fail_fast(self) -> None:
        """For a remote service, wait for the probe's first attempt to tell (at most
        EARLY_PROBE_SECONDS): a refused key or a failure no retry mends (a wrong URL, an
        untrusted certificate) is reported before Ray's seconds of start-up, however loaded
        the machine; a service that is only slow to answer lets Ray start meanwhile."""
        if self.service.base_url != EMBEDDED:
            futures.wait([self._told], timeout=EARLY_PROBE_SECONDS)
            if self.ready.done():
                self.ready.result()

    def close(self) -> None:
        """Stop the embedded service, if one was started and not kept (after the probe)."""
        self._pool.shutdown(wait=True)
        self._stack.close()

    def __enter__(self) -> Connection:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


async def _models(url: str, key: str, wait: float) -> list[ModelEntry]:
    async with EvalClient(url, key, policy=INTERACTIVE_POLICY) as client:
        await client.probe(wait=wait)
        return (await client.list_models()).models


def list_models(service: ServiceConfig) -> list[ModelEntry]:
    """The service's model list (`evalpipe models`)."""
    key = api_key(service)
    with service_url(service, LimitsConfig(), key) as url:
        return asyncio.run(_models(url, key, service.connect_wait))
