"""What an HTTP answer or a lower-layer exception turns into: the one place where the client's
failures become `evalpipe.errors`, with messages safe to show.

Kept apart from the client so the mapping can be read (and tested) as one table, without the
retry loop around it:

    2xx                                              -> success (the body is checked by the client)
    401                                              -> AuthError raised at once (the job stops)
    422 naming the context or token limit            -> ContextLengthError, not retried: the
                                                        worker splits the request instead
    422 whose detail names `questions` itself        -> TooManyQuestionsError, not retried: a
                                                        pack is halved instead
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
errors in `translated` (`raise ... from`). A connection error whose cause is known is told in
one sentence that names the cause and its fix (`evalpipe.send.diagnosis`, this table's
sub-table for connection errors); the first contact (`EvalClient.probe`) stops on it at once.
Messages are one line and never hold the API key, nor a proxy's password, nor a URL's user or
password: every text that came from the service or a lower layer passes through a `clean`
function, `safe` with the client's key, which redacts them (`evalpipe.stores.scrubbed`)
before cutting the line to length.
"""

from __future__ import annotations

import contextlib
import copy
import re
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
    ContextLengthError,
    InvalidResponseError,
    NetworkError,
    OverloadedError,
    RateLimitedError,
    RejectedError,
    ServerError,
    TooManyQuestionsError,
    one_line,
)
from evalpipe.send.diagnosis import Where, diagnose
from evalpipe.send.retry import retry_after
from evalpipe.stores import scrubbed

MAX_MESSAGE = 400  # characters of a service message kept in a row's `_error`

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
    """`text` made fit to show: the key and the proxies' passwords redacted (in case the
    service or a proxy echoed them), URLs without their userinfo, then one line of at most
    MAX_MESSAGE characters."""
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
    if status == 422 and questions_refusal(reply.body):
        error = TooManyQuestionsError(f"too many questions (422): {message}", status)
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


def questions_refusal(body: bytes) -> bool:
    """Does a 422 body refuse the `questions` map as a whole (its size), not one question in
    it? FastAPI-style: a detail entry whose `loc` ends at `questions`, not of type `missing`."""
    with contextlib.suppress(orjson.JSONDecodeError):
        data = orjson.loads(body)
        details = data.get("detail") if isinstance(data, dict) else None
        for entry in details if isinstance(details, list) else ():
            if not isinstance(entry, Mapping):
                continue
            loc = entry.get("loc")
            if isinstance(loc, list) and loc and loc[-1] == "questions":
                return entry.get("type") != "missing"
    return False


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
    """`text` without `key` (nor the proxies' passwords), nor any URL's user or password
    (`evalpipe.stores.scrubbed`, the one rule). A short key is only cut where it stands alone,
    so a toy key such as "k" does not mangle every word; a real key (8+ characters) is cut
    wherever it occurs."""
    return scrubbed(text, (key,))


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
