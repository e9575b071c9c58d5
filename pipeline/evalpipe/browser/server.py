"""Serving the browser: on its own thread and event loop, bound to loopback, with a fresh token.

`evalpipe browse` serves until Ctrl-C; `ep.browse` returns at once with a `Browser` handle (its
`url`, `stop()`), drawn inline in Jupyter as an IFrame of that address. The token is 32 random
bytes (`secrets`), new each time, as Jupyter's; the address printed holds it.
"""

from __future__ import annotations

import asyncio
import secrets
import threading

from aiohttp import web

from evalpipe.browser.app import build_app
from evalpipe.browser.state import Browsed

STOP_SECONDS = 2.0


def _url(host: str, port: int) -> str:
    host = {"0.0.0.0": "127.0.0.1", "::": "::1", "": "127.0.0.1"}.get(host, host)
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


class Browser:
    """A running browser server: `url` (with its token), `stop()`. In Jupyter, shown inline."""

    def __init__(self, browsed: Browsed, host: str = "127.0.0.1", port: int = 0) -> None:
        self.browsed, self.host = browsed, host
        self.token = secrets.token_urlsafe(32)
        self._loop = asyncio.new_event_loop()
        self._runner = web.AppRunner(build_app(browsed, self.token), access_log=None)
        self._started = threading.Event()
        self._failed: BaseException | None = None
        self._thread = threading.Thread(
            target=self._serve, args=(port,), name="evalpipe-browse", daemon=True
        )
        self._thread.start()
        self._started.wait()
        if self._failed is not None:
            raise self._failed
        browsed.warm()

    def _serve(self, port: int) -> None:
        asyncio.set_event_loop(self._loop)
        try:
            self._loop.run_until_complete(self._runner.setup())
            site = web.TCPSite(self._runner, self.host, port)
            self._loop.run_until_complete(site.start())
            server = site._server
            assert server is not None
            self.port = int(server.sockets[0].getsockname()[1])  # type: ignore[attr-defined]
        except BaseException as exc:  # a port in use, a host that is none of this machine's
            self._failed = exc
            self._started.set()
            return
        self._started.set()
        self._loop.run_forever()
        self._loop.run_until_complete(self._runner.cleanup())
        self._loop.close()

    @property
    def base(self) -> str:
        return _url(self.host, self.port)

    @property
    def url(self) -> str:
        """The page's address, with its token."""
        return f"{self.base}/?token={self.token}"

    def stop(self) -> None:
        """Stop serving (idempotent)."""
        if self._thread.is_alive():
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=STOP_SECONDS + 5)

    def wait(self) -> None:
        """Serve until the thread ends (`stop`, or Ctrl-C in the caller)."""
        while self._thread.is_alive():
            self._thread.join(timeout=0.5)

    def __enter__(self) -> Browser:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def __repr__(self) -> str:
        return f"Browser({self.url})"

    def _ipython_display_(self) -> None:
        """Jupyter draws the page inline: an IFrame of its address."""
        from IPython.display import IFrame, display

        display(IFrame(self.url, width="100%", height=700))  # type: ignore[no-untyped-call]


def browse(
    output: str, *, vs: str | None = None, labels: str | None = None,
    input: str | None = None, reviewer: str | None = None, host: str = "127.0.0.1",
    port: int = 0,
) -> Browser:  # fmt: skip
    """Open the results browser over `output` (a folder of Parquet parts, an object-store URI
    or a Delta table): `vs`, another output of the same corpus, to compare; `labels`, the CSV
    file labels are written to; `input`, the corpus (for the states); `reviewer`, the name the
    labels carry (the login name by default). Returns at once; `.url` is the address, with
    its token, `.stop()` ends it. In Jupyter the returned value shows the page inline."""
    return Browser(
        Browsed(output, vs=vs, labels=labels, corpus=input, reviewer=reviewer), host, port
    )
