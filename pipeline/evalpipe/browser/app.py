"""The browser's web application: the page, its assets and the JSON it asks for, behind a token.

Every request must carry the token the server was started with (in the address, as Jupyter's
`?token=`, or the cookie the first visit set, or the `X-Evalpipe-Token` header the page's script
sends); a request without it gets 403 and no row. A label (POST) needs the header: a cookie alone
is what another site's form would send. Responses carry a strict Content-Security-Policy (the
page's own script and style only, nothing inline, no other origin) and are never cached; the
page renders every value from the table as text (`textContent`), so a state holding HTML or a
script shows as what it is and runs nothing. Queries run on worker threads: polars and numpy
release the GIL, and the event loop keeps answering while a view is sorted.
"""

from __future__ import annotations

import asyncio
import hmac
from collections.abc import Awaitable, Callable
from functools import partial
from importlib.resources import files
from typing import Any

import orjson
from aiohttp import web

from evalpipe.browser.state import Browsed
from evalpipe.errors import EvalpipeError

COOKIE = "evalpipe-browse-token"
HEADER = "X-Evalpipe-Token"
CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; base-uri 'none'; form-action 'none'"
)
ASSETS = {"app.js": "text/javascript", "app.css": "text/css"}
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def _json(document: Any, status: int = 200) -> web.Response:
    body = orjson.dumps(document, option=orjson.OPT_SERIALIZE_NUMPY, default=str)
    return web.Response(body=body, status=status, content_type="application/json")


def build_app(browsed: Browsed, token: str) -> web.Application:
    """The application over `browsed` (an output, its comparison, its labels file)."""

    @web.middleware
    async def guarded(request: web.Request, handler: Handler) -> web.StreamResponse:
        given = request.headers.get(HEADER) or request.query.get("token")
        if request.method == "GET":
            given = given or request.cookies.get(COOKIE)
        if not given or not hmac.compare_digest(given.encode(), token.encode()):
            response: web.StreamResponse = web.Response(
                status=403, text="403: this page needs the token in the address evalpipe "
                "browse printed (http://HOST:PORT/?token=...)\n",
            )  # fmt: skip
        else:
            try:
                response = await handler(request)
            except EvalpipeError as exc:
                response = _json({"error": f"{type(exc).__name__}: {exc.message}"}, 400)
        response.headers["Content-Security-Policy"] = CSP
        response.headers["X-Content-Type-Options"] = "nosniff"
        response.headers["Referrer-Policy"] = "no-referrer"
        response.headers["Cache-Control"] = "no-store"
        return response

    async def run(function: Callable[..., Any], *args: Any) -> Any:
        return await asyncio.get_running_loop().run_in_executor(None, partial(function, *args))

    async def page(request: web.Request) -> web.Response:
        html = (files("evalpipe.browser") / "assets" / "index.html").read_text(encoding="utf-8")
        response = web.Response(text=html.replace("{{token}}", token), content_type="text/html")
        response.set_cookie(COOKIE, token, httponly=True, samesite="Strict", path="/")
        return response

    async def asset(request: web.Request) -> web.Response:
        name = request.match_info["name"]
        if name not in ASSETS:
            raise web.HTTPNotFound()
        text = (files("evalpipe.browser") / "assets" / name).read_text(encoding="utf-8")
        return web.Response(text=text, content_type=ASSETS[name])

    async def no_icon(request: web.Request) -> web.Response:
        return web.Response(status=204)  # the browser asks; a 404 would be logged as an error

    async def meta(request: web.Request) -> web.Response:
        return _json(await run(browsed.meta))

    async def rows(request: web.Request) -> web.Response:
        return _json(await run(browsed.page, dict(request.query)))

    async def row(request: web.Request) -> web.Response:
        return _json(await run(browsed.row, dict(request.query)))

    async def comparison(request: web.Request) -> web.Response:
        return _json(await run(browsed.comparison, dict(request.query)))

    async def queue(request: web.Request) -> web.Response:
        return _json(await run(browsed.queue, dict(request.query)))

    async def labels(request: web.Request) -> web.Response:
        return _json(await run(browsed.labels_summary))

    async def label(request: web.Request) -> web.Response:
        if HEADER not in request.headers:
            return _json({"error": f"a label needs the {HEADER} header"}, 403)
        try:
            body = orjson.loads(await request.read())
        except orjson.JSONDecodeError:
            return _json({"error": "the body is not JSON"}, 400)
        if not isinstance(body, dict):
            return _json({"error": "the body is not a JSON object"}, 400)
        return _json(await run(browsed.label, body))

    app = web.Application(middlewares=[guarded], client_max_size=64 * 1024)
    app.router.add_get("/", page)
    app.router.add_get("/assets/{name}", asset)
    app.router.add_get("/favicon.ico", no_icon)
    app.router.add_get("/api/meta", meta)
    app.router.add_get("/api/rows", rows)
    app.router.add_get("/api/row", row)
    app.router.add_get("/api/compare", comparison)
    app.router.add_get("/api/queue", queue)
    app.router.add_get("/api/labels", labels)
    app.router.add_post("/api/label", label)
    return app
