"""The client over real loopback HTTP, with each production transport: what only sockets show.

A tiny aiohttp server with canned answers, started in each test's own loop, shows what goes on
the wire (headers, Content-Length, the path), pooled connections, answers dropped or cut short
at the socket, and proxies. The embedded reference service shows the client against the real
far end: answers, 422, 401, a real 429 waited out, injected faults and slow answers. The retry
and mapping logic itself is tested on a virtual clock in test_client.py; nothing here asserts
how long anything took at most.
"""

from __future__ import annotations

import asyncio
import socket
import ssl
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any, get_args

import httpx
import orjson
import pytest
from aiohttp import web
from httpx_aiohttp import AiohttpTransport

from client_doubles import KEY, PARSED, PAYLOAD, QUESTIONS, RecordingPacer, good_answer
from conftest import (
    API_KEY as SERVICE_KEY,  # the key of the session's `service`
    billed_tokens,
    embedded,
)
from evalpipe import errors
from evalpipe.config import RetryPolicy, TransportKind
from evalpipe.send.client import CallResult, EvalClient
from evalpipe.send.transport import env_proxy, new_transport, tls_context
from evalpipe.service import EmbeddedService

KINDS: tuple[TransportKind, ...] = get_args(TransportKind)
# Quick retries, and an attempt timeout no busy machine reaches by accident.
FAST = RetryPolicy(max_attempts=4, base_delay=0.01, max_delay=0.05, attempt_timeout=60.0)


# --------------------------------------------------------------------------- a canned server


@dataclass
class Reply:
    """One canned answer; `action` misbehaves at the socket level."""

    status: int = 200
    body: Any = field(default_factory=good_answer)
    action: str = "answer"  # answer | drop | truncate


@dataclass
class Seen:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes
    peer: Any  # the client's (host, port): a new port means a new connection


class Canned:
    """Answers with `script` in order; the last reply repeats. Records every request."""

    def __init__(self) -> None:
        self.script: list[Reply] = [Reply()]
        self.seen: list[Seen] = []
        self.url = ""

    def play(self, *replies: Reply) -> Canned:
        self.script = list(replies)
        return self

    async def handle(self, request: web.Request) -> web.StreamResponse:
        body = await request.read()
        peer = request.transport.get_extra_info("peername") if request.transport else None
        self.seen.append(Seen(request.method, request.path, dict(request.headers), body, peer))
        reply = self.script.pop(0) if len(self.script) > 1 else self.script[0]
        assert request.transport is not None
        if reply.action == "drop":
            request.transport.close()
            return web.Response()
        raw = orjson.dumps(reply.body)
        if reply.action == "truncate":
            response = web.StreamResponse(status=reply.status)
            response.content_length = len(raw)
            await response.prepare(request)
            await response.write(raw[: len(raw) // 2])
            request.transport.close()
            return response
        return web.Response(status=reply.status, body=raw, content_type="application/json")


@pytest.fixture
async def canned() -> AsyncIterator[Canned]:
    server = Canned()
    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", server.handle)
    runner = web.AppRunner(app, access_log=None, handler_cancellation=True)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    server.url = f"http://127.0.0.1:{runner.addresses[0][1]}"
    yield server
    await runner.cleanup()


def real_client(url: str, kind: TransportKind, key: str = KEY, **options: Any) -> EvalClient:
    return EvalClient(url, key, transport=new_transport(url, kind), **options)


async def call(
    url: str,
    kind: TransportKind = "aiohttp",
    *,
    key: str = KEY,
    policy: RetryPolicy = FAST,
    pacer: RecordingPacer | None = None,
    payload: dict[str, Any] = PAYLOAD,
) -> CallResult:
    async with real_client(url, kind, key, policy=policy, pacer=pacer) as client:
        return await client.evaluate(payload, PARSED, 50)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


# --------------------------------------------------------------------------- on the wire


@pytest.mark.parametrize("kind", KINDS)
async def test_the_request_on_the_wire(canned: Canned, kind: TransportKind) -> None:
    # Under a path prefix (a gateway serving the API under /eval; the trailing slash tolerated).
    result = await call(canned.url + "/eval/", kind)
    assert result.error is None and result.response is not None
    (seen,) = canned.seen
    assert (seen.method, seen.path) == ("POST", "/eval/v1/evaluate")
    assert seen.headers["Host"] == canned.url.removeprefix("http://")
    assert seen.headers["Authorization"] == f"Bearer {KEY}"
    assert seen.headers["Content-Type"] == "application/json"
    assert orjson.loads(seen.body) == PAYLOAD
    assert seen.headers["Content-Length"] == str(len(seen.body))  # sent whole, not chunked
    assert "Transfer-Encoding" not in seen.headers


@pytest.mark.parametrize("kind", KINDS)
async def test_connections_are_reused(canned: Canned, kind: TransportKind) -> None:
    async with real_client(canned.url, kind, policy=FAST) as client:
        for _ in range(5):
            assert (await client.evaluate(PAYLOAD, PARSED, 1)).error is None
    assert len({seen.peer for seen in canned.seen}) == 1


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("action", ["drop", "truncate"])
async def test_dropped_and_truncated_answers_retry(
    canned: Canned, kind: TransportKind, action: str
) -> None:
    canned.play(Reply(action=action), Reply())
    result = await call(canned.url, kind)
    assert result.error is None and result.attempts == 2
    canned.play(Reply(action=action))
    result = await call(canned.url, kind)
    assert isinstance(result.error, errors.NetworkError)
    assert result.error.error_type == "network" and result.attempts == FAST.max_attempts


async def test_refused_connection_is_a_network_error() -> None:
    result = await call(f"http://127.0.0.1:{free_port()}", policy=RetryPolicy(2, 0.01, 0.01, 60))
    assert isinstance(result.error, errors.NetworkError) and result.attempts == 2
    assert "ConnectorError" in result.error.message  # the real cause, not httpx's relabel


def test_transports_share_one_tls_context_that_verifies() -> None:
    """Loading the certificate bundle cost 20-40 ms of CPU per transport; now once a process."""
    aio, own = new_transport("https://eval.example.com"), new_transport("https://e.com", "httpx")
    assert isinstance(aio, AiohttpTransport) and isinstance(own, httpx.AsyncHTTPTransport)
    assert aio.ssl_context is own._pool._ssl_context is tls_context()
    assert tls_context().verify_mode is ssl.CERT_REQUIRED and tls_context().check_hostname


def test_an_unknown_transport_kind_is_refused() -> None:
    with pytest.raises(ValueError, match="'aiohttp' or 'httpx'"):
        new_transport("http://127.0.0.1:1", "requests")  # type: ignore[arg-type]


# --------------------------------------------------------------------------- proxies


def _set_proxy_env(monkeypatch: pytest.MonkeyPatch, proxy: str, no_proxy: str = "") -> None:
    for name in ("http_proxy", "HTTP_PROXY"):
        monkeypatch.setenv(name, proxy)
    for name in ("no_proxy", "NO_PROXY"):
        monkeypatch.setenv(name, no_proxy)


UNREACHABLE = "192.0.2.1:9"  # TEST-NET-1: never routed, so only a proxy can answer for it


@pytest.mark.parametrize("kind", KINDS)
async def test_a_proxy_named_by_the_environment_is_used(
    canned: Canned, kind: TransportKind, monkeypatch: pytest.MonkeyPatch
) -> None:
    _set_proxy_env(monkeypatch, canned.url)
    result = await call(f"http://{UNREACHABLE}", kind)
    assert result.error is None
    (seen,) = canned.seen
    assert seen.path == "/v1/evaluate" and seen.headers["Host"] == UNREACHABLE


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("target", [UNREACHABLE, "loopback"])
async def test_no_proxy_and_loopback_bypass_the_proxy(
    canned: Canned, kind: TransportKind, target: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    if target == "loopback":
        target = f"127.0.0.1:{free_port()}"  # refused: nothing listens there
        _set_proxy_env(monkeypatch, canned.url)
    else:
        _set_proxy_env(monkeypatch, canned.url, no_proxy=target.split(":")[0])
    policy = RetryPolicy(1, 0.01, 0.01, 0.5)  # TEST-NET-1 never answers: 0.5 s is enough
    result = await call(f"http://{target}", kind, policy=policy)
    assert isinstance(result.error, errors.NetworkError)
    assert canned.seen == []


def test_env_proxy(monkeypatch: pytest.MonkeyPatch) -> None:
    _set_proxy_env(monkeypatch, "http://proxy.example:3128", no_proxy="internal.example")
    monkeypatch.setenv("https_proxy", "http://tls-proxy.example:3128")
    assert env_proxy("http://eval.example.com") == "http://proxy.example:3128"
    assert env_proxy("https://eval.example.com") == "http://tls-proxy.example:3128"
    assert env_proxy("https://api.internal.example") is None
    assert env_proxy("http://localhost:8000") is None
    assert env_proxy("http://[::1]:8000") is None


# --------------------------------------------------------------------------- the embedded service


@pytest.mark.parametrize("kind", KINDS)
async def test_service_answers_every_question_type(
    service: EmbeddedService, kind: TransportKind
) -> None:
    pacer = RecordingPacer()
    result = await call(service.base_url, kind, key=SERVICE_KEY, pacer=pacer)
    assert result.error is None and result.response is not None and result.attempts == 1
    assert result.response.model == "model-1.13.0"
    assert {k: a.type for k, a in result.response.answers.items()} == {
        "helpful": "noul",
        "sentiment": "choice",
        "quality": "score",
    }
    billed = billed_tokens(PAYLOAD["state"], QUESTIONS)
    assert result.response.usage.input_tokens == billed and pacer.successes == [(50, billed)]


async def test_service_422_is_rejected_with_its_message(service: EmbeddedService) -> None:
    broken = {**QUESTIONS, "sentiment": {"type": "choice", "instructions": "Which?"}}
    result = await call(service.base_url, key=SERVICE_KEY, payload={**PAYLOAD, "questions": broken})
    assert isinstance(result.error, errors.RejectedError) and result.error.status == 422
    assert "questions.sentiment.criteria" in result.error.message
    assert result.attempts == 1


async def test_service_refuses_a_wrong_key_at_once(service: EmbeddedService) -> None:
    before = service.stats()["responses"].get("401", 0)
    with pytest.raises(errors.AuthError) as caught:
        await call(service.base_url, key=KEY, policy=RetryPolicy(base_delay=5.0))
    assert service.stats()["responses"]["401"] == before + 1  # asked once, never again
    assert str(caught.value).startswith("the service refused the API key (401): ")
    assert KEY not in str(caught.value) and SERVICE_KEY not in str(caught.value)


async def test_service_models_and_probe(service: EmbeddedService) -> None:
    async with real_client(service.base_url, "aiohttp", SERVICE_KEY) as client:
        await client.probe(wait=60.0)
        listed = await client.list_models()
    assert {m.name for m in listed.models} >= {"model-latest"}


class LiftingPacer(RecordingPacer):
    """Lifts the service's limit when told of a 429, so the next attempt must get through."""

    def __init__(self, service: EmbeddedService) -> None:
        super().__init__()
        self._service = service

    def on_rate_limited(self) -> None:
        super().on_rate_limited()
        self._service.set_limits(rpm=6_000_000, tps=None)


async def test_service_429_is_waited_out() -> None:
    # 1 rpm: the first call takes the bucket's one request, which comes back only in 60 s, so
    # the second call's first attempt is refused however slowly the test runs.
    with embedded(rpm=1) as service:
        pacer = LiftingPacer(service)
        url = service.base_url
        async with real_client(url, "aiohttp", SERVICE_KEY, policy=FAST, pacer=pacer) as client:
            first = await client.evaluate(PAYLOAD, PARSED, 50)
            second = await client.evaluate(PAYLOAD, PARSED, 50)
        stats = service.stats()
    assert first.error is None and (first.attempts, first.rate_limited) == (1, 0)
    assert second.error is None and (second.attempts, second.rate_limited) == (2, 1)
    assert pacer.rate_limited == 1 and stats["rate_limited"] == 1


SERVICE_FAULTS = [
    ("fault_529", errors.OverloadedError),
    ("fault_500", errors.ServerError),
    ("fault_drop", errors.NetworkError),
    ("fault_truncate", errors.InvalidResponseError),
]


@pytest.mark.parametrize("fault", [fault for fault, _ in SERVICE_FAULTS])
async def test_service_faults_are_retried_until_they_pass(fault: str) -> None:
    policy = RetryPolicy(max_attempts=10, base_delay=0.001, max_delay=0.01, attempt_timeout=60.0)
    with embedded(**{fault: 0.5, "fault_seed": 3}) as service:
        async with real_client(service.base_url, "aiohttp", SERVICE_KEY, policy=policy) as client:
            results = [await client.evaluate(PAYLOAD, PARSED, 50) for _ in range(8)]
    assert all(r.error is None for r in results)
    assert sum(r.attempts for r in results) > 8  # some of them needed retries


@pytest.mark.parametrize(("fault", "kind"), SERVICE_FAULTS)
async def test_service_faults_exhaust_the_attempts(
    fault: str, kind: type[errors.CallError]
) -> None:
    policy = RetryPolicy(max_attempts=3, base_delay=0.001, max_delay=0.01, attempt_timeout=60.0)
    with embedded(**{fault: 1.0}) as service:
        result = await call(service.base_url, key=SERVICE_KEY, policy=policy)
    assert type(result.error) is kind and result.attempts == 3 and result.response is None


@pytest.mark.parametrize("kind", KINDS)
async def test_service_slow_answers_end_as_network_errors(kind: TransportKind) -> None:
    policy = RetryPolicy(max_attempts=2, base_delay=0.001, max_delay=0.01, attempt_timeout=0.2)
    # Each answer is held 1 s, five times the attempt timeout: it cannot come in time.
    with embedded(fault_slow=1.0, slow_seconds=1.0) as service:
        loop = asyncio.get_running_loop()
        start = loop.time()
        result = await call(service.base_url, kind, key=SERVICE_KEY, policy=policy)
        waited = loop.time() - start
        stats = service.stats()
    assert isinstance(result.error, errors.NetworkError) and result.attempts == 2
    assert "no complete answer within 0.2s" in result.error.message
    assert waited >= 2 * 0.2  # each attempt was given its whole timeout
    assert stats["faults"]["slow"] == 2  # both attempts reached the service and were held
