"""A clean stop on SIGTERM and SIGINT: what schedulers send, and what Ctrl-C sends.

A scheduler (systemd, Airflow, Kubernetes) stops a job with SIGTERM, often to the whole process
group, then waits a while before SIGKILL. The requests in flight at that moment are paid for,
so the job lets them finish for a grace period, journals their rows, folds the journal into
parts, prints its summary and exits 143 (SIGTERM) or 130 (SIGINT): the same command resumes.

    stop = StopSignals()
    stop.install()          # at start, and again after ray.init (which sets its own handler)
    ...
    if stop.requested: ...  # the first signal: stop taking rows, wait for those in flight
                            # a second signal raises StopNow wherever the driver is

A guard rail stops the same way with no signal (`halt`): the deadline (`evalpipe.engine.guards`)
like a SIGTERM; the cost cap without telling the workers, whose requests in hand were admitted
within the cap and are all sent (`drains`). The run then exits 6 or 7 (`evalpipe.errors`).

The Python API stops differently (`StopSignals(cancel=True)`): a notebook's interrupt must end
the call within a few seconds, so the requests in flight are cancelled rather than waited for
(their connections close unanswered, so they are not billed); what was answered before is kept.

Ray's `ray.init` replaces the SIGTERM handler with one that exits 15, and its core worker adds
a native one that prints a stack dump (unless RAY_DISABLE_FAILURE_SIGNAL_HANDLER is set before
Ray is imported, which `install` does); the runner keeps ours through `ray.init` and installs
it again after, so the only output of a stop is the job's own.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from collections.abc import Iterator
from types import FrameType
from typing import Any

from evalpipe.errors import SIGNAL_EXIT_CODES

EXIT_CODES = {sig: SIGNAL_EXIT_CODES[sig.name] for sig in (signal.SIGTERM, signal.SIGINT)}
GRACE_SECONDS = 20.0  # after a stop, requests in flight may finish this long
CANCEL_SECONDS = 3.0  # after a cancelling stop, the answers already received may arrive this long
# Ray's native failure-signal handler prints a stack dump on SIGTERM; this turns it off.
NATIVE_HANDLER_OFF = "RAY_DISABLE_FAILURE_SIGNAL_HANDLER"


class StopNow(BaseException):
    """A second signal: stop at once, keeping what is journaled (not an error)."""


@contextlib.contextmanager
def through_ray() -> Iterator[None]:
    """Let a second signal's `StopNow` out of Ray's native code as itself. The handler runs
    wherever the driver is, often inside `ray.wait` or `ray.get`, whose signal check passes on
    only KeyboardInterrupt and SystemExit: any other exception raised there comes out as a
    `SystemError` ("returned a result with an exception set") caused by it."""
    try:
        yield
    except SystemError as exc:
        if isinstance(exc.__cause__, StopNow):
            raise exc.__cause__.with_traceback(exc.__traceback__) from None
        raise


class StopSignals:
    """The job's stop requests: the first signal asks for a clean stop, the second forces it."""

    def __init__(self, cancel: bool = False) -> None:
        self.cancel = cancel  # a stop cancels the requests in flight (the Python API's)
        self.signal: signal.Signals | None = None
        self.at: float | None = None  # time.monotonic() of the first signal (or halt)
        self.halted: str | None = None  # a guard rail's stop: "cost_cap" or "deadline"
        self._before: dict[signal.Signals, Any] = {}

    @property
    def requested(self) -> bool:
        return self.signal is not None

    @property
    def stopping(self) -> bool:
        """A signal came, or a guard rail asked for the stop."""
        return self.signal is not None or self.halted is not None

    @property
    def drains(self) -> bool:
        """The workers send what they hold (the cost cap's stop, no signal since)."""
        return self.halted == "cost_cap" and self.signal is None

    def halt(self, reason: str) -> None:
        """A guard rail's clean stop (`reason`: "cost_cap" or "deadline"); the first counts."""
        if self.halted is None:
            self.halted = reason
        if self.at is None:
            self.at = time.monotonic()

    @property
    def exit_code(self) -> int:
        return EXIT_CODES[self.signal] if self.signal is not None else 0

    @property
    def name(self) -> str:
        return self.signal.name if self.signal is not None else ""

    def install(self) -> None:
        """Handle SIGTERM and SIGINT in this (the main) thread from now on. In another thread
        (a job run for the Python API while a notebook's loop holds the main thread) signals
        cannot be handled here: the caller asks for the stop (`ask`) instead."""
        os.environ.setdefault(NATIVE_HANDLER_OFF, "1")  # read when Ray is imported
        if threading.current_thread() is not threading.main_thread():
            return
        for sig in EXIT_CODES:
            before = signal.signal(sig, self._handle)
            self._before.setdefault(sig, before)

    def restore(self) -> None:
        """The handlers from before the first `install` (a caller that lives on, like a test)."""
        for sig, before in self._before.items():
            signal.signal(sig, before)

    def ask(self, sig: signal.Signals = signal.SIGINT) -> None:
        """Ask for a clean stop as the first `sig` would (from the thread that caught it)."""
        if self.signal is None:
            self.signal, self.at = sig, time.monotonic()

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if self.signal is not None:
            raise StopNow(signal.Signals(signum).name)
        self.signal = signal.Signals(signum)
        self.at = time.monotonic()

    def left(self, grace: float) -> float:
        """Seconds of the grace period left since the first signal (grace when none came)."""
        if self.at is None:
            return grace
        return max(0.0, grace - (time.monotonic() - self.at))
