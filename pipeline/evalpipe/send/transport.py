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

Every transport of a process shares one TLS context (certificate verification as httpx's
default: certifi's bundle, or SSL_CERT_FILE / SSL_CERT_DIR): building one loads the bundle,
20-40 ms of CPU, which each client of a worker, and each call's probe, paid again.
"""

from __future__ import annotations

import functools
import ipaddress
import ssl
import urllib.request

import httpx
from httpx_aiohttp import AiohttpTransport

from evalpipe.config import DEFAULT_KIND, TransportKind

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
    threads and connections)."""
    return httpx.create_ssl_context()


def env_proxy(base_url: str) -> str | None:
    """The proxy the environment names for `base_url` (HTTPS_PROXY, HTTP_PROXY, ALL_PROXY, in
    either case), as httpx.AsyncClient would use it; none for a host NO_PROXY covers, and none
    for loopback (the embedded service), as Go's net/http does."""
    url = httpx.URL(base_url)
    if _is_loopback(url.host) or urllib.request.proxy_bypass(url.host):
        return None
    proxies = urllib.request.getproxies()
    return proxies.get(url.scheme) or proxies.get("all") or None


def _is_loopback(host: str) -> bool:
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
