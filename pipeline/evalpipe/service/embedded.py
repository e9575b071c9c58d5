"""`EmbeddedService`: the reference service started from Python, in a thread or a subprocess.

Jobs with `base_url: embedded` and the tests start the service this way and get a base URL
back once it accepts connections.

- mode="thread": an aiohttp runner on its own event loop in a daemon thread. Cheap to start;
  shares the GIL with the caller, so it suits tests and small jobs.
- mode="process": `python -m evalpipe.service --port 0 ...` in a subprocess, with the key in
  its environment (never on its command line, where `ps` shows it). It prints its URL on
  stdout, which `start` reads; `set_limits` and `stats` go through the admin endpoints. The
  child exits when its stdin closes, so it cannot outlive its parent; it runs in a process
  group of its own, so an interrupt of the parent's group (Ctrl-C, a Jupyter kernel's) leaves
  it to the parent, which stops it (or leaves it running for the next job:
  `evalpipe.service.kept`).
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import os
import queue
import subprocess
import sys
import threading
from dataclasses import replace
from pathlib import Path
from types import TracebackType
from typing import IO, Any, Literal
from urllib.parse import urlsplit

import httpx

from evalpipe.errors import ConfigError, ServiceUnreachable
from evalpipe.service.ratelimit import check_limits
from evalpipe.service.server import ServiceServer, base_url
from evalpipe.service.settings import FAULT_FIELDS, KEY_ENV, ServiceSettings

START_TIMEOUT = 30.0  # seconds for the server to accept connections
STOP_TIMEOUT = 10.0  # seconds for a clean exit before the process is killed
ADMIN_TIMEOUT = 10.0
_PROJECT_ROOT = Path(__file__).resolve().parents[2]


class _ThreadBackend:
    """The service on an event loop of its own, in a daemon thread."""

    def __init__(self, settings: ServiceSettings, host: str, port: int) -> None:
        self._server = ServiceServer(settings, host, port)
        self._loop = asyncio.new_event_loop()
        self._thread: threading.Thread | None = None

    def start(self) -> int:
        ready: concurrent.futures.Future[int] = concurrent.futures.Future()
        self._thread = threading.Thread(
            target=self._run, args=(ready,), name="evalpipe-service", daemon=True
        )
        self._thread.start()
        return ready.result(timeout=START_TIMEOUT)

    def _run(self, ready: concurrent.futures.Future[int]) -> None:
        asyncio.set_event_loop(self._loop)
        try:
            port = self._loop.run_until_complete(self._server.start())
        except BaseException as exc:
            ready.set_exception(exc)
            self._loop.close()
            return
        ready.set_result(port)
        try:
            self._loop.run_forever()
        finally:
            self._loop.run_until_complete(self._server.stop())
            self._loop.run_until_complete(self._loop.shutdown_asyncgens())
            self._loop.close()

    @property
    def pid(self) -> int:
        return os.getpid()

    def stop(self) -> None:
        if self._thread is None or not self._thread.is_alive():
            return
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(STOP_TIMEOUT)

    def _on_loop(self, func: Any, *args: Any) -> Any:
        # The service's state belongs to its loop: read and change it only there.
        async def call() -> Any:
            return func(*args)

        return asyncio.run_coroutine_threadsafe(call(), self._loop).result(ADMIN_TIMEOUT)

    def set_limits(self, rpm: float | None, tps: float | None) -> None:
        assert self._server.service is not None
        self._on_loop(self._server.service.limiter.set_limits, rpm, tps)

    def set_faults(self, changes: dict[str, float]) -> None:
        assert self._server.service is not None
        self._on_loop(self._server.service.set_faults, changes)

    def stats(self) -> dict[str, Any]:
        assert self._server.service is not None
        return self._on_loop(self._server.service.snapshot)


class _ProcessBackend:
    """The service as `python -m evalpipe.service` in a child process."""

    def __init__(self, settings: ServiceSettings, host: str, port: int) -> None:
        self._settings = settings
        self._host = host
        self._port = port
        self._process: subprocess.Popen[bytes] | None = None
        self._stdout: queue.Queue[bytes] = queue.Queue()
        self._stderr: collections.deque[str] = collections.deque(maxlen=20)
        self._url = ""
        self._admin_client: httpx.Client | None = None

    def start(self) -> int:
        # -P: the working directory is not put on sys.path, so a user's own `evalpipe.py`
        # (or any module of that name) beside the job cannot stand in for the package.
        command = [sys.executable, "-P", "-m", "evalpipe.service", "--host", self._host]
        command += ["--port", str(self._port), "--stop-on-stdin-eof", *self._settings.to_args()]
        self._process = subprocess.Popen(
            command,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=self._environment(),
            # A group of its own: a signal to the caller's group (Ctrl-C in a terminal, a
            # Jupyter kernel's interrupt) is the caller's to act on; the child ends with stdin.
            process_group=0,
        )
        _drain(self._process.stdout, self._stdout.put)
        errors = _drain(self._process.stderr, self._keep_stderr)
        try:
            line = self._stdout.get(timeout=START_TIMEOUT)  # b"" when the child exits first
            port = urlsplit(line.decode().strip()).port
        except (queue.Empty, ValueError, UnicodeDecodeError):
            port = None
        if not port:
            self.stop()
            errors.join(STOP_TIMEOUT)
            why = " ".join("".join(self._stderr).split()) or "no output"
            raise ServiceUnreachable(f"the embedded service process did not start: {why}")
        self._url = base_url(self._host, port)
        # One client for every admin call: a new one costs tens of ms (its TLS setup), which a
        # benchmark polling stats several times a second would feel. Plain HTTP on loopback.
        self._admin_client = httpx.Client(
            base_url=self._url,
            headers={"Authorization": f"Bearer {self._settings.api_key}"},
            timeout=ADMIN_TIMEOUT,
            verify=False,
        )
        return port

    def _keep_stderr(self, line: bytes) -> None:
        self._stderr.append(line.decode(errors="replace"))

    def _environment(self) -> dict[str, str]:
        env = dict(os.environ)
        env[KEY_ENV] = self._settings.api_key
        # The child imports this very package, installed or not.
        paths = [str(_PROJECT_ROOT), env.get("PYTHONPATH", "")]
        env["PYTHONPATH"] = os.pathsep.join(filter(None, paths))
        return env

    @property
    def pid(self) -> int:
        assert self._process is not None
        return self._process.pid

    def stop(self) -> None:
        if self._admin_client is not None:
            self._admin_client.close()
            self._admin_client = None
        process = self._process
        if process is None or process.poll() is not None:
            return
        assert process.stdin is not None
        try:
            process.stdin.close()  # the child's cue to shut down cleanly
            process.wait(STOP_TIMEOUT)
        except (OSError, subprocess.TimeoutExpired):
            process.terminate()
            try:
                process.wait(STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()

    def _admin(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        if self._admin_client is None:
            raise ServiceUnreachable("the embedded service process is not running")
        try:
            response = self._admin_client.request(method, path, json=body)
        except httpx.HTTPError as exc:
            raise ServiceUnreachable(f"the embedded service did not answer {path}: {exc}") from None
        if response.status_code != 200:
            raise ConfigError(f"the embedded service refused {path}: {response.text}")
        return response.json()

    def set_limits(self, rpm: float | None, tps: float | None) -> None:
        limits = {name: v for name, v in (("rpm", rpm), ("tps", tps)) if v is not None}
        self._admin("POST", "/_admin/limits", limits)

    def set_faults(self, changes: dict[str, float]) -> None:
        self._admin("POST", "/_admin/faults", changes)

    def stats(self) -> dict[str, Any]:
        return self._admin("GET", "/_admin/stats")


def _drain(stream: IO[bytes] | None, sink: Any) -> threading.Thread:
    """Read a child's pipe line by line in a daemon thread, so the child never blocks on it;
    b"" goes to `sink` at the end."""

    def run() -> None:
        assert stream is not None
        for line in iter(stream.readline, b""):
            sink(line)
        sink(b"")
        stream.close()

    thread = threading.Thread(target=run, name="evalpipe-service-pipe", daemon=True)
    thread.start()
    return thread


class EmbeddedService:
    """The embedded reference service, started and stopped from Python.

    with EmbeddedService(ServiceSettings(api_key="k")) as service:
        client.post(service.base_url + "/v1/evaluate", ...)
        service.set_limits(rpm=600)      # takes effect at once, without a restart
        service.stats()["responses"]     # {"200": 12, "429": 3, ...}
    """

    def __init__(
        self,
        settings: ServiceSettings,
        host: str = "127.0.0.1",
        port: int = 0,
        mode: Literal["thread", "process"] = "thread",
    ) -> None:
        if mode not in ("thread", "process"):
            raise ConfigError(f"mode: must be 'thread' or 'process' (got {mode!r})")
        self.settings = settings
        self.host = host
        self.port = port  # the bound port once started
        self._requested_port = port
        self.mode = mode
        self.base_url = ""
        self._backend: _ThreadBackend | _ProcessBackend | None = None

    def start(self) -> str:
        """Start serving; returns the base URL (without /v1) once connections are accepted."""
        if self._backend is not None:
            raise ConfigError("the embedded service is already started")
        backend_type = _ThreadBackend if self.mode == "thread" else _ProcessBackend
        backend = backend_type(self.settings, self.host, self._requested_port)
        try:
            port = backend.start()
        except OSError as exc:
            where = f"{self.host}:{self.port}"
            message = f"the embedded service cannot listen on {where}: {exc}"
            raise ServiceUnreachable(message) from None
        self._backend = backend
        self.port = port
        self.base_url = base_url(self.host, port)
        return self.base_url

    def stop(self) -> None:
        """Stop serving and wait for it; safe to call twice."""
        backend, self._backend = self._backend, None
        if backend is not None:
            backend.stop()

    def set_limits(self, rpm: float | None = None, tps: float | None = None) -> None:
        """Change the rate limits now (None leaves a limit as it is)."""
        check_limits(rpm, tps)
        self._started().set_limits(rpm, tps)

    def set_faults(self, **changes: float) -> None:
        """Inject other faults from now on: `fault_slow=0.0`, `slow_seconds=2`... (the fields
        of `FAULT_FIELDS`, as the settings name them); the draws start again from the seed."""
        unknown = sorted(set(changes) - set(FAULT_FIELDS))
        if unknown:
            raise ConfigError(f"{unknown[0]}: not a fault setting ({', '.join(FAULT_FIELDS)})")
        fields: dict[str, Any] = dict(changes)
        replace(self.settings, **fields)  # ConfigError for a value the service would refuse
        self._started().set_faults(changes)

    def stats(self) -> dict[str, Any]:
        """Counters: responses by status, accepted requests and tokens, faults, limits."""
        return self._started().stats()

    @property
    def pid(self) -> int:
        """The id of the process serving: this one in thread mode, the child in process mode."""
        return self._started().pid

    def _started(self) -> _ThreadBackend | _ProcessBackend:
        if self._backend is None:
            raise ConfigError("the embedded service is not started")
        return self._backend

    def __enter__(self) -> EmbeddedService:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
