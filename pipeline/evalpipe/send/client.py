"""The async HTTP client of the batch job: auth, the retry loop, pacing hooks, checked answers.

Retries live here and nowhere else; pacing does not. Before every attempt (first and retries) the
client waits on the `Pacer` it was handed (the job's shared rate budget), reports each 429 to it so
the whole job slows down, and reports each success so token estimates get calibrated. How long to
wait between attempts is `evalpipe.send.retry`'s rule; what a status or an exception turns into is
`evalpipe.send.failures`' table; which library moves the bytes is the transport's business
(`evalpipe.send.transport` builds the production ones; tests hand in `httpx.MockTransport`).

Requests go straight to the transport (`handle_async_request`) with headers and URLs built
once, not through `httpx.AsyncClient`: the client's per-request work (merging base URL,
headers and cookies, the auth and redirect flows, cookie extraction from every answer) is none
of it used here and cost about a third of a worker's CPU (bench/RESULTS.md, d).

An answer's body is read up to `max_response_bytes` (decompressed) and no further: a larger one
is that attempt's `InvalidResponseError`, not retried (the same request would get the same),
so a service or a proxy that answers without end costs one request, never the worker's memory.

A failed call is data (`CallResult.error`); only a refused key raises. Create the client on the
event loop that uses it (its connection pool belongs to that loop), and close it there. Time is
the running loop's (`asyncio.sleep`, `asyncio.timeout`, `loop.time()`), so a test can run the
client on a loop with a virtual clock.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

import httpx
import orjson

from evalpipe.config import MAX_RESPONSE_MB, RetryPolicy
from evalpipe.contract import EvaluationResponse, ModelList, check_response
from evalpipe.errors import (
    CallError,
    InvalidResponseError,
    NetworkError,
    RateLimitedError,
    RejectedError,
    ServiceUnreachable,
)
from evalpipe.send.diagnosis import (
    LASTING,
    Diagnosis,
    Where,
    diagnose,
    first_contact_error,
    hung_up,
    speaks_https,
)
from evalpipe.send.failures import (
    Failure,
    Reply,
    auth_error,
    gave_up,
    judge,
    refused,
    safe,
    translated,
)
from evalpipe.send.retry import retry_delay
from evalpipe.send.transport import answers_tls, env_proxy, new_transport

# RetryPolicy is part of the client's API (it configures one); it is defined in evalpipe.config.
__all__ = ["CallResult", "EvalClient", "Pacer", "RetryPolicy"]

T = TypeVar("T")

EVALUATE_PATH = "/v1/evaluate"
MODELS_PATH = "/v1/models"
PROBE_FIRST_DELAY = 0.05  # seconds between connect attempts of `probe`, doubling ...
PROBE_MAX_DELAY = 1.0  # ... up to this
DEFAULT_POLICY = RetryPolicy()  # frozen, so one shared default is safe
MAX_RESPONSE_BYTES = int(MAX_RESPONSE_MB * 1_000_000)  # service.max_response_mb's default


class Pacer(Protocol):
    """The job's rate budget as the client sees it (`lease.LeasePacer`, behind the worker's
    `actors.StoppablePacer`; before the run's workers send, `evalpipe.limits.LocalPacer`)."""

    async def acquire(self, tokens: int) -> None: ...

    def on_success(self, estimated_tokens: int, input_tokens: int) -> None: ...

    def on_rate_limited(self) -> None: ...


@dataclass
class CallResult:
    """What became of one call: a checked response or the error that ended it. Plain data."""

    response: EvaluationResponse | None
    error: CallError | None
    attempts: int
    rate_limited: int  # 429s seen for this call


@dataclass
class _Tally:
    attempts: int = 0
    rate_limited: int = 0


class EvalClient:
    """Sends evaluate requests with bounded, jittered retries; see the module docstring.

    `transport` is any `httpx.AsyncBaseTransport`, as httpx's own clients take one; the client
    owns it and closes it. Without one it builds the default production transport for
    `base_url` (`evalpipe.send.transport.new_transport`). Made and closed on the event loop that
    uses it:

        async with EvalClient(url, key, pacer=pacer) as client:
            result = await client.evaluate(payload, parsed_questions, estimated_tokens)
            if result.error: ...  # a row error: result.error.error_type, result.error.message
    """

    def __init__(
        self,
        base_url: str,
        api_key: str,
        *,
        transport: httpx.AsyncBaseTransport | None = None,
        policy: RetryPolicy = DEFAULT_POLICY,
        pacer: Pacer | None = None,
        max_response_bytes: int = MAX_RESPONSE_BYTES,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.policy = policy
        self.max_response_bytes = max_response_bytes
        self._key = api_key
        self._pacer = pacer
        self._transport = transport if transport is not None else new_transport(self.base_url)
        # Built once: every request carries the same headers and goes to one of two URLs.
        self._headers = httpx.Headers(
            {
                "host": httpx.URL(self.base_url).netloc.decode("ascii"),
                "authorization": f"Bearer {api_key}",
                "content-type": "application/json",
                "accept": "application/json",
                "user-agent": "evalpipe",
            }
        ).raw
        self._urls = {p: httpx.URL(self.base_url + p) for p in (EVALUATE_PATH, MODELS_PATH)}
        self._where = Where(self.base_url, env_proxy(self.base_url))

    def __repr__(self) -> str:
        return f"EvalClient({self.base_url!r}, transport={type(self._transport).__name__})"

    async def __aenter__(self) -> EvalClient:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._transport.aclose()

    # -- public calls ------------------------------------------------------------------------

    async def evaluate(
        self, payload: dict[str, Any], questions: Mapping[str, Any], estimated_tokens: int
    ) -> CallResult:
        """POST /v1/evaluate with retries. Never raises for a failed call; AuthError on 401.

        `questions` are the parsed questions of this request (contract.validate_questions),
        against which the answer is checked.
        """
        try:
            with translated("the request body", clean=self._safe):
                body = orjson.dumps(payload, option=orjson.OPT_SERIALIZE_NUMPY)
        except RejectedError as exc:
            return CallResult(None, exc, attempts=0, rate_limited=0)
        tally = _Tally()

        def parse(data: bytes) -> EvaluationResponse:
            with translated("response body", clean=self._safe):
                decoded = orjson.loads(data)
            return check_response(questions, decoded)

        response, error = await self._call(
            "POST", EVALUATE_PATH, body, parse, estimated_tokens, tally
        )
        if response is not None and self._pacer is not None:
            self._pacer.on_success(estimated_tokens, response.usage.input_tokens)
        return CallResult(response, error, tally.attempts, tally.rate_limited)

    async def list_models(self) -> ModelList:
        """GET /v1/models with retries; AuthError on 401, a CallError subclass on failure."""

        def parse(data: bytes) -> ModelList:
            with translated("model list", clean=self._safe):
                return ModelList.model_validate(orjson.loads(data))

        models, error = await self._call("GET", MODELS_PATH, None, parse, None, _Tally())
        if error is not None:
            raise error
        assert models is not None
        return models

    async def probe(self, wait: float = 10.0, retrying: Callable[[], None] | None = None) -> None:
        """Return once the service answers; AuthError on 401. The first contact: a failure
        whose cause is known (a name that does not resolve, a certificate, a scheme, a proxy:
        `diagnosis.diagnose`) or a refused connection raises a ServiceUnreachable (of the
        cause's subclass) at once; other connect errors are retried for `wait` seconds, and
        `retrying` is called before the first retry (the first attempt told nothing final)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + wait
        delay = PROBE_FIRST_DELAY
        while True:
            remaining = max(0.01, deadline - loop.time())
            try:
                reply = await self._exchange(
                    "GET", MODELS_PATH, None, min(remaining, self.policy.attempt_timeout)
                )
            except NetworkError as exc:
                told = await self._told(exc)
                if told is not None:  # no retry can mend it: said at once, with the fix
                    raise first_contact_error(told.cause)(self._safe(told.sentence)) from exc
                if refused(exc):  # nothing listens there: waiting would not change that
                    raise self._unreachable(None, exc) from exc
                if loop.time() + delay >= deadline:
                    raise self._unreachable(wait, exc) from exc
                if retrying is not None and delay == PROBE_FIRST_DELAY:
                    retrying()
                await asyncio.sleep(delay)
                delay = min(PROBE_MAX_DELAY, delay * 2)
                continue
            if reply.status == 401:
                raise auth_error(reply, self._safe)
            if await self._plain_to_tls(reply):
                raise first_contact_error("speaks_https")(speaks_https(self._where).sentence)
            return  # any other answer: something is listening and took the key

    async def _plain_to_tls(self, reply: Reply) -> bool:
        """Was the probe's answer a TLS port's to plain HTTP? nginx says so in a 400; a
        forwarding proxy (HTTP_PROXY) answers 502 or 504, so the port is asked directly."""
        if reply.status == 400:
            return b"plain HTTP request was sent to HTTPS port" in reply.body
        proxied = self._where.proxy is not None
        return proxied and reply.status in (502, 504) and await self._speaks_tls()

    async def _speaks_tls(self) -> bool:
        url = httpx.URL(self.base_url)
        return url.scheme == "http" and await answers_tls(url.host, url.port or 80)

    async def _told(self, exc: NetworkError) -> Diagnosis | None:
        """What the first contact's connection error was, if it can be told: as `diagnose`
        says, or http:// to a port that hung up on plain HTTP and speaks TLS (asked directly,
        past any proxy: a server that merely hung up is not taken for one)."""
        cause = exc.__cause__
        told = diagnose(cause, self._where) if cause is not None else None
        if told is not None or cause is None:
            return told
        if hung_up(cause) and await self._speaks_tls():
            return speaks_https(self._where)
        return None

    def _unreachable(self, wait: float | None, exc: NetworkError) -> ServiceUnreachable:
        within = "" if wait is None else f" within {wait:g}s"
        return ServiceUnreachable(
            self._safe(
                f"cannot reach the evaluation service at {self.base_url}{within} "
                f"({exc.message}); check service.base_url and that the service is running"
            )
        )

    # -- the retry loop ----------------------------------------------------------------------

    async def _call(
        self,
        method: str,
        path: str,
        body: bytes | None,
        parse: Callable[[bytes], T],
        tokens: int | None,
        tally: _Tally,
    ) -> tuple[T | None, CallError | None]:
        """Attempts until success, a final failure, or `max_attempts`; (value, error)."""
        policy = self.policy
        for attempt in range(policy.max_attempts):
            if tokens is not None and self._pacer is not None:
                await self._pacer.acquire(tokens)  # every attempt spends budget
            tally.attempts += 1
            outcome = await self._attempt(method, path, body, parse)
            if not isinstance(outcome, Failure):
                return outcome, None
            if isinstance(outcome.error, RateLimitedError):
                tally.rate_limited += 1
                if self._pacer is not None:
                    self._pacer.on_rate_limited()
            if not outcome.retry:
                return None, outcome.error
            if attempt + 1 == policy.max_attempts:
                return None, gave_up(outcome.error, tally.attempts)
            await asyncio.sleep(retry_delay(attempt, policy, outcome.header_delay))
        raise AssertionError("unreachable: the loop returns on its last attempt")

    async def _attempt(
        self, method: str, path: str, body: bytes | None, parse: Callable[[bytes], T]
    ) -> T | Failure:
        """One attempt: a parsed value or why it failed (raises AuthError on 401)."""
        try:
            reply = await self._exchange(method, path, body, self.policy.attempt_timeout)
        except NetworkError as exc:  # a cause no retry can mend ends the call at once
            return Failure(exc, retry=exc.cause not in LASTING)
        except InvalidResponseError as exc:  # too large: the same request gets the same
            return Failure(exc, retry=False)
        failure = judge(reply, self._safe)
        if failure is not None:
            return failure
        try:
            return parse(reply.body)
        except InvalidResponseError as exc:
            return Failure(InvalidResponseError(self._safe(exc.message), reply.status), True)

    async def _exchange(self, method: str, path: str, body: bytes | None, timeout: float) -> Reply:
        """One HTTP round trip, body read in full (InvalidResponseError past
        `max_response_bytes`), bounded by `timeout` seconds overall."""
        request = self._request(method, path, body, timeout)
        with translated(f"{method} {path}", timeout, self._safe, self._where):
            # The transport's timeouts bound each phase; asyncio.timeout bounds the whole attempt
            # (a server that trickles bytes never trips a per-read timeout).
            async with asyncio.timeout(timeout):
                response = await self._transport.handle_async_request(request)
                try:
                    content = await self._read(response, f"{method} {path}")
                finally:
                    await response.aclose()  # back to the pool, or dropped if unread
        return Reply(response.status_code, response.headers, content)

    async def _read(self, response: httpx.Response, what: str) -> bytes:
        """The body, decompressed, if it is at most `max_response_bytes`: a larger one is not
        read further (its connection is dropped, not pooled)."""
        limit = self.max_response_bytes
        headers = response.headers
        declared = headers.get("content-length", "")
        if declared.isdigit() and "content-encoding" not in headers:  # the length is the body's
            if int(declared) <= limit:
                return await response.aread()  # the transport reads no more than the length
            raise self._too_large(what, limit, response.status_code)
        chunks: list[bytes] = []
        size = 0
        async for chunk in response.aiter_bytes():  # chunked, or compressed: counted as read
            size += len(chunk)
            if size > limit:
                raise self._too_large(what, limit, response.status_code)
            chunks.append(chunk)
        return b"".join(chunks)

    def _too_large(self, what: str, limit: int, status: int) -> InvalidResponseError:
        return InvalidResponseError(
            self._safe(
                f"{what}: the answer is over {limit:,} bytes, the most read "
                f"(service.max_response_mb); not read further ({status})"
            ),
            status,
        )

    def _request(self, method: str, path: str, body: bytes | None, timeout: float) -> httpx.Request:
        # Headers and body handed over whole: httpx.Request deriving Host and Content-Length
        # itself (content=) costs about 5x as much (28 vs 6 us).
        headers = self._headers
        if body is not None:
            headers = [*headers, (b"content-length", str(len(body)).encode("ascii"))]
        request = httpx.Request(
            method,
            self._urls[path],
            headers=headers,
            stream=httpx.ByteStream(body or b""),
            extensions={"timeout": dict.fromkeys(("connect", "read", "write", "pool"), timeout)},
        )
        request.read()  # so the aiohttp transport sends bytes, not an async iterator
        return request

    def _safe(self, text: str) -> str:
        return safe(text, self._key)  # and the proxy's password (`scrubbed`)
