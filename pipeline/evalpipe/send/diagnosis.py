"""What a connection error was, when it can be told, in one sentence with its fix: the
sub-table of `evalpipe.send.failures` for the failures of a first contact on a company network.

    what failed                                       cause                  mid-run
    a name that does not resolve (EAI_NONAME)         unknown_host           retried
    a certificate not trusted (unknown issuer...)     certificate_untrusted  not retried
    a certificate expired or not yet valid            certificate_expired    not retried
    a certificate for another host name or address    certificate_name       not retried
    TLS answered by bytes that are not TLS            speaks_http            not retried
    plain HTTP hung up on by a port that speaks TLS   speaks_https           (probe only)
    the proxy's CONNECT answered 407, 403, 5xx...     proxy_refused          retried
    the proxy not there (refused, its name unknown)   proxy_unreachable      retried

The transport is aiohttp under httpx, so an error arrives as aiohttp's, ssl's or socket's
wrapped in httpx's: `diagnose` walks the exception chain (`__cause__`, `__context__`) and reads
the facts from the innermost errors' attributes (`verify_code`, `reason`, `errno`, a proxy's
`status`). Anything it cannot tell (a timeout, a reset, a refused port) is left to the retries.
The first contact raises the cause's `ServiceUnreachable` subclass (`first_contact_error`); a
call mid-run becomes a `NetworkError` whose `cause` is the key here. A proxy is named by its
address only, never its user or password.
"""

from __future__ import annotations

import re
import socket
import ssl
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

import aiohttp
import httpx

from evalpipe.errors import (
    CertificateError,
    HostNotFound,
    ProxyError,
    SchemeMismatch,
    ServiceUnreachable,
    one_line,
)
from evalpipe.send.transport import proxy_shown, proxy_variable

# What a connection error was, when it can be told (NetworkError.cause), in the summary's words.
CAUSES: Mapping[str, str] = {
    "unknown_host": "host name does not resolve",
    "certificate_untrusted": "certificate not trusted",
    "certificate_expired": "certificate expired or not yet valid",
    "certificate_name": "certificate for another name",
    "certificate": "certificate refused",
    "speaks_https": "the service speaks https",
    "speaks_http": "the service speaks http",
    "proxy_refused": "the proxy refused the tunnel",
    "proxy_unreachable": "the proxy cannot be reached",
}
# Causes no retry can mend (the same server answers the same way): a call meeting one ends at
# once, and the row is sent again when the job resumes. A name that does not resolve or a
# proxy may come back (DNS, a restart), so those keep the call's patience mid-run.
LASTING: frozenset[str] = frozenset(
    {"certificate_untrusted", "certificate_expired", "certificate_name", "certificate",
     "speaks_https", "speaks_http"}
)  # fmt: skip
TRUST_FIX = (
    "if a company CA signs it, point SSL_CERT_FILE at that CA's PEM file (or SSL_CERT_DIR "
    "at a directory of CA certificates), as curl and Python do, then try `evalpipe models`"
)
# OpenSSL's reasons for bytes that are not TLS where a TLS record was expected.
_NOT_TLS = frozenset(
    {"WRONG_VERSION_NUMBER", "RECORD_LAYER_FAILURE", "PACKET_LENGTH_TOO_LONG",
     "UNKNOWN_PROTOCOL"}
)  # fmt: skip
_UNKNOWN_NAME = frozenset(
    code for code in (socket.EAI_NONAME, getattr(socket, "EAI_NODATA", None)) if code is not None
)  # EAI_AGAIN ("temporary failure in name resolution") is left to the retries
_X509_UNTRUSTED = frozenset({2, 18, 19, 20, 21})  # issuer unknown, self-signed, chain unverified
_X509_EXPIRED = frozenset({9, 10})  # not yet valid, expired
_X509_NAME = frozenset({62, 63, 64})  # host name, e-mail, IP address mismatch


@dataclass(frozen=True)
class Where:
    """The URL a client calls and the proxy it goes through (None: direct), for messages."""

    base_url: str
    proxy: str | None = None  # as the environment names it: credentials are never shown

    @property
    def host(self) -> str:
        return httpx.URL(self.base_url).host

    @property
    def address(self) -> str:
        """`host:port`, the port made explicit."""
        url = httpx.URL(self.base_url)
        port = url.port or (443 if url.scheme == "https" else 80)
        return f"{url.host}:{port}"


@dataclass(frozen=True)
class Diagnosis:
    """A connection error told: its `cause` (a key of CAUSES) and one sentence with the fix."""

    cause: str
    sentence: str

    @property
    def lasting(self) -> bool:
        return self.cause in LASTING


def diagnose(exc: BaseException, where: Where) -> Diagnosis | None:
    """What a connection error was, when it can be told: a name that does not resolve, a
    certificate refused, TLS answered by a plain-HTTP server, a proxy that cannot be reached or
    refused the tunnel; None for anything else (a timeout, a reset, a refused port)."""
    chain = list(_chain(exc))
    # aiohttp's errors carry their facts as attributes; httpx's wrappers only as text.
    told = (_told(seen, where) for seen in chain if not _wrapper(seen, chain))
    return next((found for found in told if found is not None), None)


def _wrapper(exc: BaseException, chain: list[BaseException]) -> bool:
    """An httpx ProxyError wrapping aiohttp's (which says the same in attributes), or one of
    aiohttp's errors posing as an ssl error (the real one is further down the chain)."""
    if isinstance(exc, aiohttp.ClientError):
        return isinstance(exc, ssl.SSLError)
    if isinstance(exc, httpx.ProxyError):
        return any(isinstance(seen, aiohttp.ClientHttpProxyError) for seen in chain)
    return False


def _chain(exc: BaseException) -> Iterator[BaseException]:
    seen: BaseException | None = exc
    visited: set[int] = set()
    while seen is not None and id(seen) not in visited:
        visited.add(id(seen))
        yield seen
        seen = seen.__cause__ or seen.__context__


def _told(exc: BaseException, where: Where) -> Diagnosis | None:
    if isinstance(exc, ssl.SSLCertVerificationError):
        return _certificate(exc, where)
    if isinstance(exc, aiohttp.ClientHttpProxyError):
        return _proxy_status(exc.status, exc.message, where)
    if isinstance(exc, httpx.ProxyError):  # httpx's own transport: "407 Proxy Auth..."
        status = re.match(r"\s*(\d{3})\b\s*(.*)", str(exc))
        if status:
            return _proxy_status(int(status[1]), status[2], where)
    if isinstance(exc, aiohttp.ClientProxyConnectionError):
        return _proxy_unreachable(first_words(exc.os_error), where)
    if isinstance(exc, aiohttp.ClientConnectorDNSError):
        os_error = exc.os_error
        if isinstance(os_error, socket.gaierror) and os_error.errno not in _UNKNOWN_NAME:
            return None  # a resolver's temporary failure: the retries may see it mended
        return _unknown_host(exc.host, first_words(os_error), where)
    if isinstance(exc, socket.gaierror) and exc.errno in _UNKNOWN_NAME:
        return _unknown_host(None, first_words(exc), where)
    if isinstance(exc, ssl.SSLError) and getattr(exc, "reason", None) in _NOT_TLS:
        return speaks_http(where, str(exc.reason).lower().replace("_", " "))
    return None


def hung_up(exc: BaseException) -> bool:
    """Did the server close the connection without an answer, or answer with bytes that are
    not HTTP (as a TLS server does to a plain-HTTP request)?"""
    for seen in _chain(exc):
        if isinstance(seen, (aiohttp.ServerDisconnectedError, httpx.RemoteProtocolError)):
            return True
        if isinstance(seen, aiohttp.ClientResponseError) and seen.status == 400:
            return True  # aiohttp's parser on an answer that is not HTTP (a TLS alert)
    return False


def first_contact_error(cause: str) -> type[ServiceUnreachable]:
    """The exception the first contact raises for a told cause (exit 2, one line)."""
    if cause == "unknown_host":
        return HostNotFound
    if cause.startswith("certificate"):
        return CertificateError
    if cause.startswith("speaks_"):
        return SchemeMismatch
    return ProxyError


def first_words(exc: BaseException) -> str:
    """An OS error's own words (a gaierror's "Name or service not known")."""
    text = getattr(exc, "strerror", None) or str(exc) or type(exc).__name__
    return one_line(str(text), 120)


def _certificate(exc: ssl.SSLCertVerificationError, where: Where) -> Diagnosis:
    code = exc.verify_code
    why = exc.verify_message or first_words(exc)
    host = f"{where.address}{_through(where)}"
    if code in _X509_UNTRUSTED:
        return Diagnosis(
            "certificate_untrusted",
            f"the certificate of {host} is not trusted ({why}): {TRUST_FIX}",
        )
    if code in _X509_EXPIRED:
        return Diagnosis(
            "certificate_expired",
            f"the certificate of {host} is not valid now ({why}): its operators must renew "
            "it, or this machine's clock is wrong; trusting a CA does not mend it",
        )
    if code in _X509_NAME:
        return Diagnosis(
            "certificate_name",
            f"the certificate of {host} is for another name ({why}): put in "
            "service.base_url the host name the certificate was issued for",
        )
    return Diagnosis("certificate", f"the certificate of {host} was refused ({why}): {TRUST_FIX}")


def _through(where: Where) -> str:
    if where.proxy is None:
        return ""
    return f" (through the proxy {proxy_shown(where.proxy)})"


def _unknown_host(host: str | None, why: str, where: Where) -> Diagnosis:
    if where.proxy is not None and host is not None and host != where.host:
        return Diagnosis(
            "proxy_unreachable",
            f"the proxy {proxy_shown(where.proxy)}'s host {host} does not resolve ({why}): "
            f"check {proxy_variable(httpx.URL(where.base_url).scheme)}",
        )
    return Diagnosis(
        "unknown_host",
        f"the host {host or where.host} does not resolve ({why}): check service.base_url",
    )


def speaks_http(where: Where, why: str) -> Diagnosis:
    """https:// to a port that answered with bytes that are not TLS."""
    plain = httpx.URL(where.base_url).copy_with(scheme="http")
    return Diagnosis(
        "speaks_http",
        f"{where.address} did not answer TLS ({why}): the service may speak http; try "
        f"service.base_url: {str(plain).rstrip('/')}",
    )


def speaks_https(where: Where) -> Diagnosis:
    """http:// to a port that hangs up on plain HTTP but completes a TLS handshake."""
    secure = httpx.URL(where.base_url).copy_with(scheme="https")
    return Diagnosis(
        "speaks_https",
        f"{where.address} hung up on a plain-HTTP request and speaks TLS: the service may "
        f"speak https; try service.base_url: {str(secure).rstrip('/')}",
    )


def _proxy_status(status: int, reason: str, where: Where) -> Diagnosis:
    variable = proxy_variable(httpx.URL(where.base_url).scheme)
    proxy = proxy_shown(where.proxy) if where.proxy else "the proxy"
    if status == 407:
        fix = f"give the proxy's user and password in {variable} (http://USER:PASSWORD@host:port)"
    elif status == 403:
        fix = "the proxy does not let this host through: ask its administrators, or list the "
        fix += "host in NO_PROXY if it is reachable without the proxy"
    elif status >= 500:
        fix = "the proxy could not reach the host: check service.base_url, and list the host "
        fix += "in NO_PROXY if it is only reachable without the proxy"
    else:
        fix = f"check {variable} and NO_PROXY"
    said = one_line(f"{status} {reason}".strip(), 80)
    return Diagnosis(
        "proxy_refused",
        f"the proxy {proxy} refused the tunnel to {where.address} ({said}): {fix}",
    )


def _proxy_unreachable(why: str, where: Where) -> Diagnosis:
    variable = proxy_variable(httpx.URL(where.base_url).scheme)
    proxy = proxy_shown(where.proxy) if where.proxy else "the proxy"
    return Diagnosis(
        "proxy_unreachable",
        f"cannot connect to the proxy {proxy} ({why}): check {variable}, or list the host in "
        "NO_PROXY if it is reachable without the proxy",
    )
