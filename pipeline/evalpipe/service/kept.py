"""Embedded services kept for the process: one per settings, found again by the next job.

A notebook's calls (`ep.score`, `Job.run`, the DuckDB and polars functions) each run a job. With
`base_url: embedded`, each started the reference service in a process of its own (a second of
imports) and, its port being new, was a new account with a Budget actor of its own on Ray (and
limits that started afresh). The Python API's jobs ask `kept_service(settings)` instead: the
service of these settings (the key, the limits, the latency) that an earlier job of this process
started, if it still answers; else a new one, kept in its place. One account is one service, so
the account's limits hold across the calls as they would on the real service.

Its life is the caller's. The service runs in a child process (`EmbeddedService`, process mode)
in a process group of its own, so an interrupt sent to the caller's group (a Jupyter kernel's
interrupt, Ctrl-C in a terminal) does not end it with the call; `stop_kept` stops every kept
service at this process's exit (atexit), and an exit that runs no Python at all (SIGKILL) ends
it too: its stdin, a pipe from this process, closes. Thread-safe: jobs on several threads that
ask for the same settings get one service.
"""

from __future__ import annotations

import atexit
import threading

from evalpipe.errors import EvalpipeError
from evalpipe.service.embedded import EmbeddedService
from evalpipe.service.settings import ServiceSettings

STOP_LOCK_SECONDS = 5.0  # at exit, a start under way elsewhere is waited for this long

_KEPT: dict[ServiceSettings, EmbeddedService] = {}
_LOCK = threading.Lock()  # held while a service is looked up, started or replaced
_AT_EXIT: list[bool] = []  # `stop_kept` is registered with atexit (once)


def kept_service(settings: ServiceSettings) -> EmbeddedService:
    """The kept service of these `settings`, started (and kept) if none answers."""
    with _LOCK:
        service = _KEPT.get(settings)
        if service is not None:
            if _answers(service):
                return service
            del _KEPT[settings]
            service.stop()  # a process that died goes at once; one that hangs is ended
        service = EmbeddedService(settings, mode="process")
        service.start()
        if not _AT_EXIT:
            atexit.register(stop_kept)
            _AT_EXIT.append(True)
        _KEPT[settings] = service
        return service


def kept_services() -> list[EmbeddedService]:
    """The services kept now, oldest first."""
    with _LOCK:
        return list(_KEPT.values())


def stop_kept() -> None:
    """Stop every kept service (at exit; a test's end). The next job starts one again."""
    # At exit a daemon thread may be stopped midway through a start, the lock held for ever.
    locked = _LOCK.acquire(timeout=STOP_LOCK_SECONDS)
    try:
        services = list(_KEPT.values())
        _KEPT.clear()
    finally:
        if locked:
            _LOCK.release()
    for service in services:
        service.stop()


def _answers(service: EmbeddedService) -> bool:
    """Whether the service answers (its counters, over loopback): a process that died, or
    that no longer answers, is not used again."""
    try:
        service.stats()
    except EvalpipeError:
        return False
    return True
