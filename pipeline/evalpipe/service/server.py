"""Running the embedded service on an event loop: start, report the port, stop cleanly.

Two callers: `evalpipe serve` (and the process mode's child) serve until a signal or until
their parent closes stdin; the thread mode runs a `ServiceServer` on its own loop in a thread.
Both go through `ServiceServer`, so a served app is set up and torn down the same way.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import sys
import threading
from collections.abc import Callable

from aiohttp import web

from evalpipe.service.app import ServiceApp, build_app
from evalpipe.service.settings import ServiceSettings

SHUTDOWN_SECONDS = 2.0  # how long in-flight requests may finish when the service stops
ACCESS_LOG_FORMAT = '%a "%r" %s %b %Tfs'  # never a header: the key must not reach a log
access_logger = logging.getLogger("evalpipe.service.access")


def base_url(host: str, port: int) -> str:
    """The URL a client on this machine uses, for a server bound to `host`."""
    host = {"0.0.0.0": "127.0.0.1", "::": "::1", "": "127.0.0.1"}.get(host, host)
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


class ServiceServer:
    """One `ServiceApp` served over TCP on the running loop."""

    def __init__(self, settings: ServiceSettings, host: str = "127.0.0.1", port: int = 0) -> None:
        self.settings = settings
        self.host = host
        self.port = port
        self.service: ServiceApp | None = None
        self._runner: web.AppRunner | None = None

    async def start(self) -> int:
        """Listen; returns the bound port (the chosen one when `port` was 0)."""
        self.service = ServiceApp(self.settings)
        logging_kwargs: dict[str, object] = {"access_log": None}
        if self.settings.log_requests:
            logging_kwargs = {"access_log": access_logger, "access_log_format": ACCESS_LOG_FORMAT}
        self._runner = web.AppRunner(
            build_app(self.service),
            handle_signals=False,
            # A client that hangs up before its answer (a cancelled request) is not answered,
            # so not billed: its handler is cancelled, as a real service stops its work.
            handler_cancellation=True,
            shutdown_timeout=SHUTDOWN_SECONDS,
            **logging_kwargs,  # type: ignore[arg-type]
        )
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, self.port, backlog=1024)
        try:
            await site.start()
        except BaseException:
            await self._runner.cleanup()
            raise
        self.port = self._runner.addresses[0][1]
        self.service.start_schedule()
        return self.port

    async def stop(self) -> None:
        if self.service is not None:
            await self.service.stop_schedule()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None


async def serve_until_stopped(
    server: ServiceServer, on_ready: Callable[[str], None], stop_on_stdin_eof: bool = False
) -> None:
    """Serve until SIGINT/SIGTERM (or, for a child process, until stdin closes)."""
    loop = asyncio.get_running_loop()
    stopped = asyncio.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError, RuntimeError):  # not on Windows
            loop.add_signal_handler(sig, stopped.set)
    if stop_on_stdin_eof:
        # The parent holds our stdin; when it exits or closes it, we go too: no orphan servers.
        watcher = threading.Thread(target=_wait_for_eof, args=(loop, stopped), daemon=True)
        watcher.start()
    port = await server.start()
    try:
        on_ready(base_url(server.host, port))
        await stopped.wait()
    finally:
        await server.stop()


def _wait_for_eof(loop: asyncio.AbstractEventLoop, stopped: asyncio.Event) -> None:
    with contextlib.suppress(OSError, ValueError):
        while sys.stdin.buffer.read(4096):
            pass
    with contextlib.suppress(RuntimeError):  # the loop may be closed already
        loop.call_soon_threadsafe(stopped.set)
