"""What an HTTP answer or a lower-layer exception turns into: the one place where the client's
failures become `evalpipe.errors`, with messages safe to show.

Kept apart from the client so the mapping can be read (and tested) as one table, without the
retry loop around it:

    2xx                                              -> success (the body is checked by the client)
    401                                              -> AuthError raised at once (the job stops)
    422 naming the context or token limit            -> ContextLengthError, not retried: the
                                                        worker splits the request instead
    422, 400, 403, 404, 413, redirects (any other)   -> RejectedError, never retried
    429                 retry-after(-ms) or backoff  -> RateLimitedError once attempts run out
    529                 retry-after(-ms) or backoff  -> OverloadedError      "
    408, 5xx                              backoff    -> ServerError          "
    timeout, refused or dropped connection  backoff  -> NetworkError         "
    a name that does not resolve, a proxy's refusal
                    (`cause` says which)      backoff  -> NetworkError         "
    a certificate not trusted / expired / for another
    name, TLS to a plain-HTTP port (`cause`)  not retried -> NetworkError
    non-JSON or contract-breaking 200       backoff  -> InvalidResponseError "

Statuses are judged by `judge`; exceptions of httpx, aiohttp, orjson and pydantic become
errors in `translated` (`raise ... from`). A connection error whose cause is known is
`diagnose`d into one sentence that names the cause and its fix (the exception chain is walked,
`__cause__` and `__context__`, since the aiohttp transport wraps aiohttp's, ssl's and socket's
errors in httpx's); the first contact (`EvalClient.probe`) stops on it at once. Messages are
one line and never hold the API key: every text that came from the service or a lower layer
passes through a `clean` function, `safe` with the client's key, which redacts the key before
cutting the line to length.
"""

from __future__ import annotations

import contextlib
import copy
import re
import socket
import ssl
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import aiohttp
import httpx
import orjson
import pydantic

from evalpipe.errors import (
    AuthError,
    CallError,
    CertificateError,
    ContextLengthError,
    HostNotFound,
    InvalidResponseError,
    NetworkError,
    OverloadedError,
    ProxyError,
    RateLimitedError,
    RejectedError,
    SchemeMismatch,
    ServerError,
    ServiceUnreachable,
    one_line,
)
from evalpipe.send.retry import retry_after
from evalpipe.send.transport import proxy_shown, proxy_variable

MAX_MESSAGE = 400  # characters of a service message kept in a row's `_error`
REDACTED = "[redacted]"
MIN_PLAIN_REDACT = 8  # keys at least this long are redacted wherever they occur

Clean = Callable[[str], str]


@dataclass(frozen=True)
class Reply:
    """One HTTP answer, its body read in full."""

    status: int
    headers: httpx.Headers
    body: bytes


@dataclass(frozen=True)
class Failure:
    """Why one attempt failed, whether another may help, and the wait the service asked for."""

    error: CallError
    retry: bool
    header_delay: float | None = None


def safe(text: str, key: str) -> str:
    """`text` made fit to show: the key redacted (in case the service or a proxy echoed it),
    then one line of at most MAX_MESSAGE characters."""
    return one_line(redact(text, key), MAX_MESSAGE)


def _bounded(text: str) -> str:
    return one_line(text, MAX_MESSAGE)


# --------------------------------------------------------------------------- statuses


def judge(reply: Reply, clean: Clean = _bounded) -> Failure | None:
    """What a status means for a call: None for success, else the failure. Raises AuthError
    on 401, which no retry can mend."""
    status = reply.status
    if 200 <= status < 300:
        return None
    if status == 401:
        raise auth_error(reply, clean)
    message = clean(service_message(reply.body, limit=None)) or "no message"
    if status == 429:
        delay = retry_after(reply.headers)
        return Failure(RateLimitedError(f"rate limited (429): {message}", status), True, delay)
    if status == 529:
        delay = retry_after(reply.headers)
        return Failure(OverloadedError(f"overloaded (529): {message}", status), True, delay)
    if status == 408 or status >= 500:
        return Failure(ServerError(f"server error ({status}): {message}", status), True)
    if status == 422 and length_refusal(reply.body):
        error: RejectedError = ContextLengthError(f"refused for length (422): {message}", status)
        return Failure(error, retry=False)
    return Failure(RejectedError(f"rejected ({status}): {message}", status), retry=False)


# A refusal for length, in the words services use: "context limit", "context too long: 100000
# tokens", "maximum context length is 64000 tokens", "too many tokens", "exceeds the token
# limit", "prompt is too long"; or a FastAPI detail entry of such a type.
_LENGTH_WORDS = re.compile(
    r"(context|token|prompt|input)[^.;]{0,40}?"
    r"(limit|length|window|too long|exceed|maximum|too many)"
    r"|(too many|exceed\w*|over)[^.;]{0,30}?tokens?\b",
    re.IGNORECASE,
)
_LENGTH_TYPES = frozenset(
    {"context_limit", "context_length", "context_length_exceeded", "token_limit",
     "too_many_tokens", "max_tokens_exceeded", "prompt_too_long"}
)  # fmt: skip


def length_refusal(body: bytes) -> bool:
    """Does a 422 body say the request is over the service's context (token) limit?"""
    with contextlib.suppress(orjson.JSONDecodeError):
        data = orjson.loads(body)
        details = data.get("detail") if isinstance(data, dict) else None
        if isinstance(details, list):
            types = {str(d.get("type", "")) for d in details if isinstance(d, Mapping)}
            if types & _LENGTH_TYPES:
                return True
    return _LENGTH_WORDS.search(service_message(body, limit=None)) is not None


def auth_error(reply: Reply, clean: Clean = _bounded) -> AuthError:
    """The error of a 401, with the service's words (the key redacted by `clean`)."""
    message = clean(service_message(reply.body, limit=None)) or "no message"
    return AuthError(f"the service refused the API key (401): {message}")


def gave_up(error: CallError, attempts: int) -> CallError:
    """The last attempt's error (its `cause` too), saying that the attempts ran out."""
    told = copy.copy(error)
    told.message = f"{error.message} (gave up after {attempts} attempts)"
    told.args = (told.message,)
    return told


# --------------------------------------------------------------------------- exceptions


@contextlib.contextmanager
def translated(
    what: str,
    timeout: float | None = None,
    clean: Clean = _bounded,
    where: Where | None = None,
) -> Iterator[None]:
    """The one place where lower-layer exceptions become evalpipe.errors (`raise ... from`).

    `what` names the thing being done in the message; `timeout` is the attempt's bound, named
    when it ran out; `clean` makes each message safe to show; `where` (the URL called and its
    proxy) lets a connection error be `diagnose`d.
    """
    try:
        yield
    except TimeoutError as exc:  # the caller's asyncio.timeout around an attempt
        within = f" within {timeout:g}s" if timeout is not None else ""
        raise NetworkError(clean(f"{what}: no complete answer{within}")) from exc
    except httpx.DecodingError as exc:
        raise InvalidResponseError(clean(f"{what}: undecodable ({_describe(exc)})")) from exc
    except (httpx.HTTPError, aiohttp.ClientError, OSError) as exc:
        # Refused, reset or dropped connections, protocol errors, and any aiohttp error the
        # httpx-aiohttp transport passes through unmapped.
        found = diagnose(exc, where) if where is not None else None
        if found is None:
            raise NetworkError(clean(f"{what}: {_describe(exc)}")) from exc
        raise NetworkError(clean(f"{what}: {found.sentence}"), cause=found.cause) from exc
    except orjson.JSONDecodeError as exc:
        raise InvalidResponseError(clean(f"{what}: not JSON ({exc})")) from exc
    except pydantic.ValidationError as exc:
        first = exc.errors(include_url=False)[0]
        path = ".".join(str(p) for p in first["loc"]) or "body"
        raise InvalidResponseError(clean(f"{what}: {path}: {first['msg']}")) from exc
    except orjson.JSONEncodeError as exc:
        raise RejectedError(clean(f"{what} cannot be encoded as JSON: {exc}")) from exc


def _describe(exc: BaseException) -> str:
    """`Type: detail` of the most telling exception: the aiohttp or OS error behind httpx's
    (the aiohttp transport maps a refused connection to httpx.ConnectTimeout, for one)."""
    cause = exc.__cause__
    shown = cause if isinstance(cause, (aiohttp.ClientError, OSError)) else exc
    text = f"{type(shown).__name__}: {str(shown) or 'no detail'}"
    timed_out = isinstance(shown, (TimeoutError, httpx.TimeoutException))
    return f"timed out ({text})" if timed_out else text


# --------------------------------------------------------------------------- diagnosis

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
     "UNKNOWN_PROTOCOL", "HTTP_REQUEST", "TLSV1_ALERT_PROTOCOL_VERSION"}
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


# --------------------------------------------------------------------------- messages


def service_message(body: bytes, limit: int | None = MAX_MESSAGE) -> str:
    """The service's own words from an error body (JSON of any known shape, or plain text),
    on one line of at most `limit` characters (None: uncut, for the caller to redact first)."""
    text = body.decode("utf-8", errors="replace").strip()
    try:
        data = orjson.loads(body)
    except orjson.JSONDecodeError:
        return one_line(text, limit)  # not JSON: a plain-text body is the message
    found = _message_in(data)
    return one_line(found if found is not None else text, limit)


def _message_in(data: Any) -> str | None:
    """The message of a decoded error body, from whichever published shape it has."""
    if isinstance(data, str):
        return data
    if not isinstance(data, Mapping):
        return None
    for key in ("error", "message", "detail"):
        value = data.get(key)
        if isinstance(value, str):
            return value
        if isinstance(value, Mapping) and isinstance(value.get("message"), str):
            return str(value["message"])
        if key == "detail" and isinstance(value, list) and value:
            return "; ".join(_detail_entry(entry) for entry in value)
    return None


def _detail_entry(entry: Any) -> str:
    if not isinstance(entry, Mapping):
        return str(entry)
    loc = list(entry.get("loc") or [])
    if loc and loc[0] == "body":  # FastAPI's prefix; a question key named "body" stays
        loc = loc[1:]
    msg = str(entry.get("msg", ""))
    path = ".".join(str(part) for part in loc)
    return f"{path}: {msg}" if path and msg else path or msg


def redact(text: str, key: str) -> str:
    """`text` without `key`. A short key is only cut where it stands alone, so a toy key such
    as "k" does not mangle every word; a real key (8+ characters) is cut wherever it occurs."""
    if not key:
        return text
    if len(key) >= MIN_PLAIN_REDACT:
        return text.replace(key, REDACTED)
    return re.sub(rf"(?<![\w-]){re.escape(key)}(?![\w-])", REDACTED, text)


def refused(exc: BaseException) -> bool:
    """Whether a network error was a refused connection (nothing listens at that port), as
    opposed to a timeout or a dropped connection, which waiting may mend."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, ConnectionRefusedError):
            return True
        os_error = getattr(seen, "os_error", None)  # aiohttp's ClientConnectorError
        if isinstance(os_error, ConnectionRefusedError):
            return True
        seen = seen.__cause__ or seen.__context__
    return False
