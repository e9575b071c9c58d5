"""The HTTP transports the job uses in production, built one way from `service.transport`.

`EvalClient` takes any `httpx.AsyncBaseTransport` (tests hand it an `httpx.MockTransport`);
this module builds the real ones, so the pool size, keep-alive and proxy rules live in one
place and the client does not need to know which library moves the bytes:

- "aiohttp": httpx's API over aiohttp's pool (httpx-aiohttp), which holds its rate under
  concurrency where httpx's own pool does not (DESIGN.md; bench/RESULTS.md, transport table).
- "httpx": httpx's own pool.

A proxy named by the environment (HTTPS_PROXY and the like, NO_PROXY) is used as
httpx.AsyncClient would, except for loopback addresses. A transport never follows a redirect,
so a POST cannot silently become a GET elsewhere.

Every transport of a process shares one TLS context: building one loads the bundle, 20-40 ms
of CPU, which each client of a worker, and each call's probe, paid again. It trusts what curl
and Python's `ssl` trust when told: the CA file SSL_CERT_FILE names and the hashed directory
SSL_CERT_DIR names (both, when both are set; either replaces the default), else certifi's
bundle. A company CA is trusted that way, in the driver and in the Ray workers alike (they
inherit the environment).

`answers_tls` asks a port whether it speaks TLS, so the first contact can tell an http:// URL
given for a service that speaks https from a server that merely hung up.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import ipaddress
import os
import ssl
import urllib.request

import httpx
from httpx_aiohttp import AiohttpTransport

from evalpipe.config import DEFAULT_KIND, TransportKind
from evalpipe.stores import tls_context as trusted_context

MAX_CONNECTIONS = 256  # the pool's size unless the caller sizes it to its requests in flight
KEEPALIVE_EXPIRY = 5.0  # seconds; below common server idle timeouts, so reuse rarely races a close


def new_transport(
    base_url: str, kind: TransportKind = DEFAULT_KIND, max_connections: int = MAX_CONNECTIONS
) -> httpx.AsyncBaseTransport:
    """A pooled transport of `kind` for requests to `base_url` (which decides the proxy)."""
    # Every connection stays in the keep-alive pool (httpx keeps only 20 by default), so a
    # busy worker reuses connections instead of opening one per request.
    limits = httpx.Limits(
        max_connections=max_connections,
        max_keepalive_connections=max_connections,
        keepalive_expiry=KEEPALIVE_EXPIRY,
    )
    proxy = env_proxy(base_url)
    if kind == "aiohttp":
        return AiohttpTransport(
            verify=tls_context(), limits=limits, proxy=httpx.Proxy(proxy) if proxy else None
        )
    if kind == "httpx":
        return httpx.AsyncHTTPTransport(verify=tls_context(), limits=limits, proxy=proxy)
    raise ValueError(f"transport must be 'aiohttp' or 'httpx' (got {kind!r})")


@functools.cache
def tls_context() -> ssl.SSLContext:
    """The process's TLS context, made on first use (an SSLContext is safe to share between
    threads and connections): SSL_CERT_FILE's and SSL_CERT_DIR's CAs, else certifi's bundle
    (`evalpipe.stores.trust`, which every other connection's trust comes from too).
    ConfigError if a variable names what cannot be read."""
    return trusted_context()


def env_proxy(base_url: str) -> str | None:
    """The proxy the environment names for `base_url` (HTTPS_PROXY, HTTP_PROXY, ALL_PROXY, in
    either case), as httpx.AsyncClient would use it; none for a host NO_PROXY covers, and none
    for loopback (the embedded service), as Go's net/http does."""
    url = httpx.URL(base_url)
    if _is_loopback(url.host) or urllib.request.proxy_bypass(url.host):
        return None
    proxies = urllib.request.getproxies()
    return proxies.get(url.scheme) or proxies.get("all") or None


def proxy_shown(proxy: str) -> str:
    """A proxy's URL fit to show: scheme, host and port, never its user or password."""
    url = httpx.URL(proxy)
    port = f":{url.port}" if url.port is not None else ""
    return f"{url.scheme}://{url.host}{port}"


def proxy_variable(scheme: str) -> str:
    """The name of the variable that sets the proxy for `scheme` (as set, in its case):
    HTTPS_PROXY or HTTP_PROXY, else ALL_PROXY; the upper-case name when none is set."""
    for name in (f"{scheme}_proxy", "all_proxy"):
        for spelled in (name, name.upper()):
            if os.environ.get(spelled):
                return spelled
    return f"{scheme}_proxy".upper()


async def answers_tls(host: str, port: int, timeout: float = 1.0) -> bool:
    """Does `host:port` complete a TLS handshake (its certificate unchecked: only the
    protocol is asked)? False when it does not, or not within `timeout` seconds."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)  # no CA bundle to load: nothing is checked
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    try:
        async with asyncio.timeout(timeout):
            _, writer = await asyncio.open_connection(host, port, ssl=context)
    except (OSError, TimeoutError):  # ssl.SSLError is an OSError
        return False
    writer.close()
    with contextlib.suppress(OSError, TimeoutError):
        async with asyncio.timeout(timeout):
            await writer.wait_closed()
    return True


def _is_loopback(host: str) -> bool:
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
