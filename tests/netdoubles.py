"""A network on loopback, for the tests (and benches) that need one: a company's (a TLS front
under a private CA, a CONNECT proxy), a partition, a receiver; each a real server in daemon
threads of the process that uses it.

- `TlsFront`: accepts TLS on 127.0.0.1 with a certificate the test's CA (trustme) issued, and
  pipes the decrypted bytes to a plain-HTTP upstream (the session's embedded service), as a
  company's load balancer in front of the evaluation service would. Given `later`, every
  handshake after the first presents that context's certificate instead (a certificate that
  changes mid-run).
- `HangUp`: a port that accepts and closes every connection at once (a server that drops
  connections: not TLS, not HTTP).
- `ConnectProxy`: an HTTP CONNECT proxy that records every tunnel's target, and either opens
  it (to the address `route` maps the target to: the name need not resolve on the client,
  which never resolves it behind a proxy) or answers with a fixed refusal status (403, 407,
  502); `auth` lists each CONNECT's Proxy-Authorization. Requests other than CONNECT
  (HTTP_PROXY's plain requests) are answered `plain_status`: 405, or 502 as a forwarding proxy
  whose upstream hung up.

- `CutProxy`: a TCP proxy to a port on loopback that can stop forwarding (`cut`): every
  connection stays open and nothing passes either way, as in a network partition (nothing
  refused, nothing answered), until `mend`. A host reaches the shared tier (Redis) through it in
  the stall tests and bench/fleet_stalls.py.

- `Receiver`: a loopback HTTP server that keeps each POST's path and body (gunzipped), as an
  OTLP collector or an OpenLineage catalog would receive them.

They run in threads of the test process (no subprocess), so tests using them stay quick.
"""

from __future__ import annotations

import asyncio
import contextlib
import gzip
import ssl
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

POLL_SECONDS = 0.02  # how often a Receiver looks for `shutdown`: http.server's 0.5 s, per call

Route = Callable[[str, int], tuple[str, int]]


class _LoopThread:
    """An asyncio loop in a daemon thread; `call` runs a coroutine on it and waits."""

    def __init__(self, name: str) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name=name, daemon=True)
        self._thread.start()

    def call(self, coro: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout=10)

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout=10)


async def _pipe(
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    flowing: threading.Event | None = None,
) -> None:
    try:
        while data := await reader.read(65536):
            while flowing is not None and not flowing.is_set():  # cut: held, never passed on
                await asyncio.sleep(0.05)
            writer.write(data)
            await writer.drain()
    except (ConnectionError, OSError, ssl.SSLError):
        pass
    finally:
        with contextlib.suppress(Exception):
            writer.close()


async def _splice(
    a: tuple[asyncio.StreamReader, asyncio.StreamWriter],
    b: tuple[asyncio.StreamReader, asyncio.StreamWriter],
    flowing: threading.Event | None = None,
) -> None:
    await asyncio.gather(_pipe(a[0], b[1], flowing), _pipe(b[0], a[1], flowing))


class TlsFront:
    """TLS on 127.0.0.1:`port` with `server_context` (`later` from the second connection on),
    forwarding to `upstream` (host, port)."""

    def __init__(
        self,
        server_context: ssl.SSLContext,
        upstream: tuple[str, int],
        later: ssl.SSLContext | None = None,
    ) -> None:
        self._contexts = (server_context, later or server_context)
        self._upstream = upstream
        self._loop = _LoopThread("tls-front")
        self._server: asyncio.Server = self._loop.call(self._start())
        self.port: int = self._server.sockets[0].getsockname()[1]
        self.connections = 0  # connections accepted

    async def _start(self) -> asyncio.Server:
        return await asyncio.start_server(self._handle, "127.0.0.1", 0)

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        context = self._contexts[min(self.connections, 1)]
        self.connections += 1
        try:
            await writer.start_tls(context)
            upstream = await asyncio.open_connection(*self._upstream)
        except (OSError, ConnectionError):  # a client that refused our certificate
            writer.close()
            return
        await _splice((reader, writer), upstream)

    def close(self) -> None:
        self._loop.call(self._stop())
        self._loop.stop()

    async def _stop(self) -> None:
        self._server.close()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self._server.wait_closed(), 2)


class HangUp:
    """A port on 127.0.0.1 that closes every connection as soon as it is accepted."""

    def __init__(self) -> None:
        self._loop = _LoopThread("hang-up")
        self._server: asyncio.Server = self._loop.call(self._start())
        self.port: int = self._server.sockets[0].getsockname()[1]
        self.connections = 0

    async def _start(self) -> asyncio.Server:
        return await asyncio.start_server(self._handle, "127.0.0.1", 0)

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        writer.close()

    def close(self) -> None:
        self._server.close()
        self._loop.stop()


class ConnectProxy:
    """A CONNECT proxy on 127.0.0.1:`port`; `targets` lists every CONNECT's "host:port"."""

    def __init__(
        self, route: Route | None = None, refuse: int | None = None, plain_status: int = 405
    ) -> None:
        self.route: Route = route or (lambda host, port: (host, port))
        self.refuse = refuse
        self.plain_status = plain_status
        self.targets: list[str] = []
        self.plain: list[str] = []  # request lines of anything but CONNECT
        self.auth: list[str] = []  # each CONNECT's Proxy-Authorization ("" when it had none)
        self._loop = _LoopThread("connect-proxy")
        self._server: asyncio.Server = self._loop.call(self._start())
        self.port: int = self._server.sockets[0].getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"

    async def _start(self) -> asyncio.Server:
        return await asyncio.start_server(self._handle, "127.0.0.1", 0)

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError):
            writer.close()
            return
        method, target, *_ = head.split(b"\r\n", 1)[0].decode("latin-1").split(" ")
        if method != "CONNECT":
            self.plain.append(f"{method} {target}")
            await self._answer(writer, self.plain_status, "Not a tunnel")
            return
        self.targets.append(target)
        headers = head.decode("latin-1").split("\r\n")[1:]
        said = [h.split(":", 1)[1].strip() for h in headers
                if h.lower().startswith("proxy-authorization:")]  # fmt: skip
        self.auth.append(said[0] if said else "")
        if self.refuse is not None:
            await self._answer(writer, self.refuse, "Refused by the test")
            return
        host, _, port = target.rpartition(":")
        try:
            upstream = await asyncio.open_connection(*self.route(host, int(port)))
        except OSError:
            await self._answer(writer, 502, "Bad Gateway")
            return
        writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
        await writer.drain()
        await _splice((reader, writer), upstream)

    @staticmethod
    async def _answer(writer: asyncio.StreamWriter, status: int, reason: str) -> None:
        body = reason.encode()
        writer.write(
            f"HTTP/1.1 {status} {reason}\r\ncontent-length: {len(body)}\r\n"
            "connection: close\r\n\r\n".encode()
            + body
        )
        with contextlib.suppress(ConnectionError):
            await writer.drain()
        writer.close()

    def close(self) -> None:
        self._loop.call(self._stop())
        self._loop.stop()

    async def _stop(self) -> None:
        self._server.close()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self._server.wait_closed(), 2)


class CutProxy:
    """A TCP proxy on 127.0.0.1:`port` to `target` (a port on loopback); `cut` holds every byte
    either way on open connections (and new ones), `mend` passes them on again."""

    def __init__(self, target: int) -> None:
        self.target = target
        self.flowing = threading.Event()
        self.flowing.set()
        self._loop = _LoopThread("cut-proxy")
        self._server: asyncio.Server = self._loop.call(self._start())
        self.port: int = self._server.sockets[0].getsockname()[1]

    async def _start(self) -> asyncio.Server:
        return await asyncio.start_server(self._handle, "127.0.0.1", 0)

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            upstream = await asyncio.open_connection("127.0.0.1", self.target)
        except OSError:
            writer.close()
            return
        await _splice((reader, writer), upstream, self.flowing)

    def cut(self) -> None:
        self.flowing.clear()

    def mend(self) -> None:
        self.flowing.set()

    def close(self) -> None:
        """Mended, then every connection dropped and the port closed."""
        self.mend()
        self._loop.call(self._stop())
        self._loop.stop()

    async def _stop(self) -> None:
        self._server.close()
        tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


class Receiver(ThreadingHTTPServer):
    """A loopback HTTP server that keeps each POST's path and body."""

    daemon_threads = True

    def __init__(self) -> None:
        self.posts: list[tuple[str, bytes]] = []
        super().__init__(("127.0.0.1", 0), _Keep)
        threading.Thread(target=self.serve_forever, args=(POLL_SECONDS,), daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    def bodies(self, path: str) -> list[bytes]:
        return [body for p, body in list(self.posts) if p == path]


class _Keep(BaseHTTPRequestHandler):
    server: Receiver

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("content-length", 0)))
        if self.headers.get("content-encoding") == "gzip":
            body = gzip.decompress(body)
        self.server.posts.append((self.path, body))
        self.send_response(200)
        self.send_header("content-type", self.headers.get("content-type", "application/json"))
        self.send_header("content-length", "0")
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        pass


@contextlib.contextmanager
def tls_front(
    server_context: ssl.SSLContext,
    upstream: tuple[str, int],
    later: ssl.SSLContext | None = None,
) -> Iterator[TlsFront]:
    front = TlsFront(server_context, upstream, later)
    try:
        yield front
    finally:
        front.close()


@contextlib.contextmanager
def connect_proxy(
    route: Route | None = None, refuse: int | None = None, plain_status: int = 405
) -> Iterator[ConnectProxy]:
    proxy = ConnectProxy(route, refuse, plain_status)
    try:
        yield proxy
    finally:
        proxy.close()


@contextlib.contextmanager
def cut_proxy(target: int) -> Iterator[CutProxy]:
    proxy = CutProxy(target)
    try:
        yield proxy
    finally:
        proxy.close()
