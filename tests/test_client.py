"""The HTTP client over real loopback HTTP: retries, backoff, retry-after, error mapping, secrecy.

Two servers play the far end. The embedded reference service covers what it can produce
(answers, 422, 401, 429 from a low limit, injected 529/500/drop/truncate/slow faults). A tiny
aiohttp server with canned answers, started in each test's own loop, covers what the service
never sends (retry-after as an HTTP date, retry-after-ms precedence, every error-body shape,
408, answers that break the contract). The delay and parsing functions are also tested pure.
"""

from __future__ import annotations

import asyncio
import contextlib
import email.utils
import pickle
import random
import socket
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from typing import Any

import orjson
import pytest
from aiohttp import web
from conftest import API_KEY as SERVICE_KEY  # the key of the session's `service`

from pipeline import errors
from pipeline.client import (
    CallResult,
    EvalClient,
    RetryPolicy,
    backoff_delay,
    env_proxy,
    redact,
    retry_after,
    retry_delay,
    service_message,
)
from pipeline.contract import validate_questions
from pipeline.service import EmbeddedService, ServiceSettings
from pipeline.tokens import count_request

KEY = "sk-test-7f3a9c1e5b2d4068"
TRANSPORTS = ("aiohttp", "httpx")
FAST = RetryPolicy(max_attempts=4, base_delay=0.01, max_delay=0.05, attempt_timeout=5.0)

QUESTIONS = {
    "helpful": {
        "type": "noul",
        "instructions": "Does the review help a buyer decide?",
        "criteria": {"true": "it gives concrete reasons", "false": "it is vague"},
    },
    "sentiment": {
        "type": "choice",
        "instructions": "What is the overall sentiment?",
        "criteria": {"positive": None, "negative": "complaints dominate", "neutral": None},
    },
    "quality": {
        "type": "score",
        "instructions": "How well written is the review?",
        "criteria": ["poor", "fair", "good"],
    },
}
PARSED = validate_questions(QUESTIONS)
PAYLOAD = {
    "state": "The kettle boils fast and looks good, but the lid broke after a week.",
    "model": "model-1.13.0",
    "questions": QUESTIONS,
}


def good_answer() -> dict[str, Any]:
    return {
        "model": "model-1.13.0",
        "answers": {
            "helpful": {"type": "noul", "noul": 0.8},
            "sentiment": {
                "type": "choice",
                "choice": "negative",
                "probabilities": {"positive": 0.2, "negative": 0.5, "neutral": 0.3},
                "confidence": 0.25,
            },
            "quality": {
                "type": "score",
                "score": 1.1,
                "legend": {"0": "poor", "1": "fair", "2": "good"},
                "probabilities": {"0": 0.2, "1": 0.5, "2": 0.3},
                "confidence": 0.25,
            },
        },
        "usage": {"input_tokens": 57, "output_tokens": 0},
    }


# --------------------------------------------------------------------------- test doubles


@dataclass
class Reply:
    """One canned answer; `action` misbehaves at the socket level."""

    status: int = 200
    body: Any = field(default_factory=good_answer)  # dict/list -> JSON, str/bytes as they are
    headers: dict[str, str] = field(default_factory=dict)
    action: str = "answer"  # answer | drop | truncate
    delay: float = 0.0

    def raw(self, auth: str) -> bytes:
        """The body; "{auth}" in it becomes the request's Authorization header (an echo)."""
        if isinstance(self.body, bytes):
            raw = self.body
        elif isinstance(self.body, str):
            raw = self.body.encode()
        else:
            raw = orjson.dumps(self.body)
        return raw.replace(b"{auth}", auth.encode())


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
        if reply.delay:
            await asyncio.sleep(reply.delay)
        if reply.action == "drop":
            assert request.transport is not None
            request.transport.close()
            return web.Response()
        raw = reply.raw(request.headers.get("Authorization", ""))
        headers = {"content-type": "application/json", **reply.headers}
        if reply.action == "truncate":
            response = web.StreamResponse(status=reply.status, headers=headers)
            response.content_length = len(raw)
            await response.prepare(request)
            await response.write(raw[: len(raw) // 2])
            assert request.transport is not None
            request.transport.close()
            return response
        return web.Response(status=reply.status, body=raw, headers=headers)


@pytest.fixture
async def canned() -> AsyncIterator[Canned]:
    server = Canned()
    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", server.handle)
    # Handlers stop when their client hangs up, so a slow reply cannot hold up the teardown.
    runner = web.AppRunner(app, access_log=None, handler_cancellation=True)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    server.url = f"http://127.0.0.1:{runner.addresses[0][1]}"
    yield server
    await runner.cleanup()


class RecordingPacer:
    """A Pacer that lets everything through and remembers what it was told."""

    def __init__(self, fail_with: Exception | None = None) -> None:
        self.acquired: list[int] = []
        self.successes: list[tuple[int, int]] = []
        self.rate_limited: list[float | None] = []
        self._fail_with = fail_with

    async def acquire(self, tokens: int) -> None:
        if self._fail_with is not None:
            raise self._fail_with
        self.acquired.append(tokens)

    def on_success(self, estimated_tokens: int, input_tokens: int) -> None:
        self.successes.append((estimated_tokens, input_tokens))

    def on_rate_limited(self, delay: float | None) -> None:
        self.rate_limited.append(delay)


async def call(
    url: str,
    *,
    policy: RetryPolicy = FAST,
    pacer: RecordingPacer | None = None,
    transport: str = "aiohttp",
    payload: dict[str, Any] = PAYLOAD,
    key: str = KEY,
) -> CallResult:
    async with EvalClient(url, key, policy=policy, pacer=pacer, transport=transport) as client:
        return await client.evaluate(payload, PARSED, 50)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


# --------------------------------------------------------------------------- pure functions


def test_default_policy_is_patient_for_minutes_and_bounded() -> None:
    policy = RetryPolicy()
    caps = [policy.backoff_cap(n) for n in range(policy.max_attempts - 1)]
    assert caps == [0.5, 1, 2, 4, 8, 16, 32, 60, 60, 60, 60]
    assert policy.worst_case_backoff == pytest.approx(303.5)  # ~5 min, ~2.5 min on average
    assert policy.worst_case_wait == pytest.approx(660.0)  # retry-after capped at max_delay
    assert 5 * 60 <= policy.worst_case_backoff <= 10 * 60
    assert RetryPolicy(max_attempts=1).worst_case_backoff == 0.0
    assert RetryPolicy().backoff_cap(10_000) == 60.0  # no float overflow


@pytest.mark.parametrize("bad", [{"max_attempts": 0}, {"base_delay": -1}, {"attempt_timeout": 0}])
def test_policy_refuses_nonsense(bad: dict[str, Any]) -> None:
    with pytest.raises(ValueError):
        RetryPolicy(**bad)


def test_backoff_is_full_jitter_under_the_cap() -> None:
    policy = RetryPolicy(base_delay=0.5, max_delay=60.0)
    rng = random.Random(1)
    for retry in range(12):
        draws = [backoff_delay(retry, policy, rng) for _ in range(300)]
        cap = policy.backoff_cap(retry)
        assert all(0.0 <= d <= cap for d in draws)
        # Full jitter spreads over the whole range, not just near the cap.
        assert min(draws) < 0.1 * cap and max(draws) > 0.9 * cap


def test_retry_after_ms_takes_precedence() -> None:
    assert retry_after({"retry-after-ms": "1500", "retry-after": "30"}) == 1.5
    assert retry_after({"Retry-After-Ms": "20"}) == 0.02
    # A broken ms header falls back to retry-after.
    assert retry_after({"retry-after-ms": "soon", "retry-after": "3"}) == 3.0


def test_retry_after_seconds_and_http_date() -> None:
    assert retry_after({"retry-after": "7"}) == 7.0
    assert retry_after({"Retry-After": " 2.5 "}) == 2.5
    now = 1_700_000_000.0
    date = email.utils.formatdate(now + 42, usegmt=True)
    assert retry_after({"retry-after": date}, now=now) == pytest.approx(42.0)
    assert retry_after({"retry-after": email.utils.formatdate(now - 60)}, now=now) == 0.0


@pytest.mark.parametrize(
    "headers",
    [
        {},
        {"retry-after": "soon"},
        {"retry-after": "-3"},
        {"retry-after": "nan"},
        {"retry-after": "inf"},
        {"retry-after": "Fri, 31 Dec 99999 23:59:59 GMT"},
        {"retry-after-ms": "-5"},
    ],
)
def test_retry_after_absent_or_nonsense_is_none(headers: dict[str, str]) -> None:
    assert retry_after(headers) is None


def test_retry_delay_honours_the_header_up_to_max_delay() -> None:
    policy = RetryPolicy(base_delay=1.0, max_delay=10.0)
    assert retry_delay(0, policy, 3.0) == 3.0
    assert retry_delay(0, policy, 3600.0) == 10.0  # one header cannot park a row for an hour
    assert 0.0 <= retry_delay(3, policy, None, random.Random(0)) <= 8.0


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b"upstream went away", "upstream went away"),
        (b'{"error": "bad key"}', "bad key"),
        (b'{"error": {"type": "overloaded", "message": "try later"}}', "try later"),
        (b'{"message": "slow down"}', "slow down"),
        (b'{"detail": "Not authenticated"}', "Not authenticated"),
        (b'{"detail": {"message": "too many tokens"}}', "too many tokens"),
        (
            b'{"detail": [{"loc": ["body", "questions", "q", "criteria"], '
            b'"msg": "Field required", "type": "missing"}]}',
            "questions.q.criteria: Field required",
        ),
        (
            b'{"detail": [{"loc": ["body", "state"], "msg": "bad"}, '
            b'{"loc": ["body", "questions", "body", "type"], "msg": "worse"}]}',
            "state: bad; questions.body.type: worse",
        ),
        (b'{"detail": [{"loc": [], "msg": "whole body"}]}', "whole body"),
        (b'"just a string"', "just a string"),
        (b'{"weird": true}', '{"weird": true}'),
        (b"", ""),
        (b"line one\n\n  line two", "line one line two"),
    ],
)
def test_service_message_reads_every_published_shape(body: bytes, message: str) -> None:
    assert service_message(body) == message


def test_service_message_is_one_bounded_line() -> None:
    text = service_message(b"x" * 5000 + b"\n" + b"\xff\xfe")
    assert "\n" not in text and len(text) <= 400 and text.endswith("...")


def test_redact() -> None:
    assert redact(f"Bearer {KEY} was refused", KEY) == "Bearer [redacted] was refused"
    assert redact("check the key k", "k") == "check the key [redacted]"  # a toy key stays usable
    assert redact("anything", "") == "anything"


# --------------------------------------------------------------------------- answers


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_success_sends_auth_json_and_checks_all_question_types(
    canned: Canned, transport: str
) -> None:
    pacer = RecordingPacer()
    result = await call(canned.url, pacer=pacer, transport=transport)
    assert result.error is None and result.ok
    assert (result.attempts, result.retries, result.rate_limited) == (1, 0, 0)
    assert result.response is not None
    assert result.response.answers["sentiment"].choice == "negative"
    assert result.response.answers["quality"].score == 1.1
    assert result.response.answers["helpful"].noul == 0.8
    (seen,) = canned.seen
    assert (seen.method, seen.path) == ("POST", "/v1/evaluate")
    assert seen.headers["Authorization"] == f"Bearer {KEY}"
    assert seen.headers["Content-Type"] == "application/json"
    assert orjson.loads(seen.body) == PAYLOAD
    assert seen.headers["Content-Length"] == str(len(seen.body))  # sent whole, not chunked
    assert "Transfer-Encoding" not in seen.headers
    assert pacer.acquired == [50] and pacer.successes == [(50, 57)]


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_a_base_url_with_a_path_prefix_keeps_it(canned: Canned, transport: str) -> None:
    # e.g. a gateway that serves the API under /eval; the trailing slash is tolerated.
    result = await call(canned.url + "/eval/", transport=transport)
    assert result.ok
    (seen,) = canned.seen
    assert seen.path == "/eval/v1/evaluate"
    assert seen.headers["Host"] == canned.url.removeprefix("http://")


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_connections_are_reused(canned: Canned, transport: str) -> None:
    async with EvalClient(canned.url, KEY, policy=FAST, transport=transport) as client:
        for _ in range(5):
            assert (await client.evaluate(PAYLOAD, PARSED, 1)).ok
    assert len({seen.peer for seen in canned.seen}) == 1


# --------------------------------------------------------------------------- refusals


async def test_401_raises_auth_error_at_once_without_the_key(canned: Canned) -> None:
    canned.play(Reply(401, {"error": {"message": f"invalid key {KEY}"}}))
    pacer = RecordingPacer()
    start = time.monotonic()
    with pytest.raises(errors.AuthError) as caught:
        await call(canned.url, pacer=pacer, policy=RetryPolicy(base_delay=5.0))
    assert time.monotonic() - start < 2.0 and len(canned.seen) == 1
    assert str(caught.value) == "the service refused the API key (401): invalid key [redacted]"
    assert caught.value.exit_code == 3


async def test_422_is_a_rejected_row_with_the_service_message(canned: Canned) -> None:
    detail = [{"loc": ["body", "questions", "q", "criteria"], "msg": "Field required"}]
    canned.play(Reply(422, {"detail": detail}))
    result = await call(canned.url)
    assert isinstance(result.error, errors.RejectedError)
    assert result.error.error_type == "rejected" and result.error.status == 422
    assert "questions.q.criteria: Field required" in result.error.message
    assert (result.attempts, result.retries, len(canned.seen)) == (1, 0, 1)


@pytest.mark.parametrize("status", [400, 403, 404, 409, 413, 302])
async def test_other_client_errors_are_rejected_and_not_retried(
    canned: Canned, status: int
) -> None:
    canned.play(Reply(status, "nope", headers={"location": "http://elsewhere.invalid/"}))
    result = await call(canned.url)
    assert isinstance(result.error, errors.RejectedError)
    assert result.error.status == status and "nope" in result.error.message
    assert result.attempts == 1 and len(canned.seen) == 1


async def test_unencodable_payload_is_rejected_before_sending(canned: Canned) -> None:
    result = await call(canned.url, payload={**PAYLOAD, "state": {1j}})
    assert isinstance(result.error, errors.RejectedError)
    assert result.attempts == 0 and canned.seen == []


# --------------------------------------------------------------------------- retries


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_429_waits_for_retry_after_ms_then_succeeds(canned: Canned, transport: str) -> None:
    limited = Reply(429, {"error": "slow down"}, {"retry-after-ms": "150", "retry-after": "30"})
    canned.play(limited, Reply())
    pacer = RecordingPacer()
    start = time.monotonic()
    policy = RetryPolicy(max_attempts=4, base_delay=0.01, max_delay=1.0, attempt_timeout=5.0)
    result = await call(canned.url, policy=policy, pacer=pacer, transport=transport)
    elapsed = time.monotonic() - start
    assert result.ok and (result.attempts, result.retries, result.rate_limited) == (2, 1, 1)
    assert pacer.rate_limited == [0.15]  # ms took precedence over the 30 s
    assert pacer.acquired == [50, 50]  # the pacer is asked before every attempt
    assert 0.15 <= elapsed < 5.0


async def test_429_retry_after_as_http_date(canned: Canned) -> None:
    date = email.utils.formatdate(time.time() + 1, usegmt=True)
    canned.play(Reply(429, "later", {"retry-after": date}), Reply())
    pacer = RecordingPacer()
    result = await call(canned.url, pacer=pacer, policy=RetryPolicy(4, 0.01, 2.0, 5.0))
    assert result.ok and result.rate_limited == 1
    (delay,) = pacer.rate_limited
    assert delay is not None and 0.0 <= delay <= 1.0


async def test_429_without_header_backs_off_and_reports_no_delay(canned: Canned) -> None:
    canned.play(Reply(429, "busy"), Reply(429, "busy"), Reply())
    pacer = RecordingPacer()
    result = await call(canned.url, pacer=pacer)
    assert result.ok and result.rate_limited == 2 and pacer.rate_limited == [None, None]


async def test_429_until_attempts_run_out_is_rate_limited(canned: Canned) -> None:
    canned.play(Reply(429, {"message": "limit"}, {"retry-after-ms": "1"}))
    result = await call(canned.url)
    assert isinstance(result.error, errors.RateLimitedError)
    assert result.error.error_type == "rate_limited" and result.error.status == 429
    assert (result.attempts, result.rate_limited, len(canned.seen)) == (4, 4, 4)
    assert "gave up after 4 attempts" in result.error.message


@pytest.mark.parametrize(
    ("status", "kind"),
    [
        (529, errors.OverloadedError),
        (500, errors.ServerError),
        (502, errors.ServerError),
        (503, errors.ServerError),
        (408, errors.ServerError),
    ],
)
async def test_transient_statuses_retry_then_succeed_or_run_out(
    canned: Canned, status: int, kind: type[errors.CallError]
) -> None:
    canned.play(Reply(status, "try again"), Reply())
    assert (await call(canned.url)).attempts == 2
    canned.play(Reply(status, "try again"))
    result = await call(canned.url)
    assert type(result.error) is kind and result.error.status == status
    assert result.attempts == FAST.max_attempts and result.rate_limited == 0


async def test_529_honours_retry_after(canned: Canned) -> None:
    canned.play(Reply(529, "overloaded", {"retry-after": "0.3"}), Reply())
    start = time.monotonic()
    result = await call(canned.url, policy=RetryPolicy(4, 0.001, 5.0, 5.0))
    assert result.ok and time.monotonic() - start >= 0.3


BROKEN_BODIES = {
    "not json": "<html>oops</html>",
    "truncated json": orjson.dumps(good_answer())[:40],
    "choice not argmax": {
        **good_answer(),
        "answers": {
            **good_answer()["answers"],
            "sentiment": {
                "type": "choice",
                "choice": "positive",
                "probabilities": {"positive": 0.2, "negative": 0.5, "neutral": 0.3},
                "confidence": 0.25,
            },
        },
    },
    "probabilities not summing to 1": {
        **good_answer(),
        "answers": {
            **good_answer()["answers"],
            "quality": {
                "type": "score",
                "score": 1.0,
                "legend": {"0": "poor", "1": "fair", "2": "good"},
                "probabilities": {"0": 0.2, "1": 0.5, "2": 0.5},
                "confidence": 0.25,
            },
        },
    },
    "missing answer": {**good_answer(), "answers": {"helpful": {"type": "noul", "noul": 0.5}}},
    "no usage": {"model": "m", "answers": good_answer()["answers"]},
}


@pytest.mark.parametrize("name", BROKEN_BODIES)
async def test_contract_breaking_bodies_are_retried_then_invalid(canned: Canned, name: str) -> None:
    broken = Reply(200, BROKEN_BODIES[name])
    canned.play(broken, Reply())
    assert (await call(canned.url)).attempts == 2
    canned.play(broken)
    result = await call(canned.url)
    assert isinstance(result.error, errors.InvalidResponseError)
    assert result.error.error_type == "invalid_response"
    assert result.attempts == FAST.max_attempts and "\n" not in result.error.message


@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize("action", ["drop", "truncate"])
async def test_dropped_and_truncated_answers_retry(
    canned: Canned, transport: str, action: str
) -> None:
    canned.play(Reply(action=action), Reply())
    result = await call(canned.url, transport=transport)
    assert result.ok and result.attempts == 2
    canned.play(Reply(action=action))
    result = await call(canned.url, transport=transport)
    assert isinstance(result.error, errors.NetworkError)
    assert result.error.error_type == "network" and result.attempts == FAST.max_attempts


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_slow_answers_time_out_after_bounded_attempts(canned: Canned, transport: str) -> None:
    canned.play(Reply(delay=2.0))
    policy = RetryPolicy(max_attempts=3, base_delay=0.01, max_delay=0.01, attempt_timeout=0.2)
    start = time.monotonic()
    result = await call(canned.url, policy=policy, transport=transport)
    elapsed = time.monotonic() - start
    assert isinstance(result.error, errors.NetworkError) and result.attempts == 3
    assert 0.6 <= elapsed < 1.5


async def test_refused_connection_is_a_network_error() -> None:
    result = await call(f"http://127.0.0.1:{free_port()}", policy=RetryPolicy(2, 0.01, 0.01, 2.0))
    assert isinstance(result.error, errors.NetworkError) and result.attempts == 2
    assert "ConnectorError" in result.error.message  # the real cause, not httpx's relabel


def _set_proxy_env(monkeypatch: pytest.MonkeyPatch, proxy: str, no_proxy: str = "") -> None:
    for name in ("http_proxy", "HTTP_PROXY"):
        monkeypatch.setenv(name, proxy)
    for name in ("no_proxy", "NO_PROXY"):
        monkeypatch.setenv(name, no_proxy)


UNREACHABLE = "192.0.2.1:9"  # TEST-NET-1: never routed, so only a proxy can answer for it


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_a_proxy_named_by_the_environment_is_used(
    canned: Canned, transport: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    _set_proxy_env(monkeypatch, canned.url)
    result = await call(f"http://{UNREACHABLE}", transport=transport)
    assert result.ok
    (seen,) = canned.seen
    assert seen.path == "/v1/evaluate" and seen.headers["Host"] == UNREACHABLE


@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize("target", [UNREACHABLE, "loopback"])
async def test_no_proxy_and_loopback_bypass_the_proxy(
    canned: Canned, transport: str, target: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    if target == "loopback":
        target = f"127.0.0.1:{free_port()}"  # refused: nothing listens there
        _set_proxy_env(monkeypatch, canned.url)
    else:
        _set_proxy_env(monkeypatch, canned.url, no_proxy=target.split(":")[0])
    policy = RetryPolicy(1, 0.01, 0.01, 0.5)
    result = await call(f"http://{target}", policy=policy, transport=transport)
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


async def test_mixed_failures_then_success_count_every_attempt(canned: Canned) -> None:
    canned.play(
        Reply(529, "busy"), Reply(500, "oops"), Reply(action="drop"), Reply(429, "x"), Reply()
    )
    pacer = RecordingPacer()
    result = await call(canned.url, pacer=pacer, policy=RetryPolicy(5, 0.01, 0.02, 5.0))
    assert result.ok and (result.attempts, result.retries, result.rate_limited) == (5, 4, 1)
    assert pacer.acquired == [50] * 5 and pacer.successes == [(50, 57)]


async def test_an_aborted_budget_stops_the_call(canned: Canned) -> None:
    pacer = RecordingPacer(fail_with=errors.AuthError("the service refused the API key (401): x"))
    with pytest.raises(errors.AuthError):
        await call(canned.url, pacer=pacer)
    assert canned.seen == []


# --------------------------------------------------------------------------- models and probe


async def test_list_models(canned: Canned) -> None:
    models = {
        "models": [{"name": "model-latest", "description": "d", "release_date": "2025-06-02"}]
    }
    canned.play(Reply(200, models))
    async with EvalClient(canned.url, KEY, policy=FAST) as client:
        listed = await client.list_models()
    assert [m.name for m in listed.models] == ["model-latest"]
    assert canned.seen[0].method == "GET" and canned.seen[0].path == "/v1/models"


@pytest.mark.parametrize(
    ("reply", "kind"),
    [
        (Reply(500, "down"), errors.ServerError),
        (Reply(200, {"models": [{"name": "x"}]}), errors.InvalidResponseError),
        (Reply(404, {"detail": "Not Found"}), errors.RejectedError),
    ],
)
async def test_list_models_failures_raise_call_errors(
    canned: Canned, reply: Reply, kind: type[errors.CallError]
) -> None:
    canned.play(reply)
    async with EvalClient(canned.url, KEY, policy=FAST) as client:
        with pytest.raises(kind):
            await client.list_models()
    canned.play(Reply(401, "who are you"))
    async with EvalClient(canned.url, KEY, policy=FAST) as client:
        with pytest.raises(errors.AuthError):
            await client.list_models()


async def test_probe(canned: Canned) -> None:
    canned.play(Reply(200, {"models": []}))
    async with EvalClient(canned.url, KEY) as client:
        await client.probe(wait=1.0)
    canned.play(Reply(401, {"detail": "Not authenticated"}))
    async with EvalClient(canned.url, KEY) as client:
        with pytest.raises(errors.AuthError, match="Not authenticated"):
            await client.probe(wait=1.0)


async def test_probe_gives_up_within_the_wait() -> None:
    url = f"http://127.0.0.1:{free_port()}"
    start = time.monotonic()
    async with EvalClient(url, KEY) as client:
        with pytest.raises(errors.ServiceUnreachable) as caught:
            await client.probe(wait=0.5)
    assert 0.3 <= time.monotonic() - start < 2.0
    assert url in str(caught.value) and caught.value.exit_code == 2


async def test_probe_waits_for_a_service_that_comes_up_late() -> None:
    port = free_port()

    async def models(_: web.Request) -> web.Response:
        return web.json_response({"models": []})

    app = web.Application()
    app.router.add_get("/v1/models", models)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()

    async def start_late() -> None:
        await asyncio.sleep(0.4)
        await web.TCPSite(runner, "127.0.0.1", port).start()

    task = asyncio.create_task(start_late())
    try:
        async with EvalClient(f"http://127.0.0.1:{port}", KEY) as client:
            await client.probe(wait=5.0)
    finally:
        await task
        await runner.cleanup()


# --------------------------------------------------------------------------- plain data, no key


def every_error() -> Iterator[errors.EvalpipeError]:
    yield errors.AuthError("the service refused the API key (401): no")
    yield errors.ServiceUnreachable("cannot reach")
    for kind in (
        errors.RejectedError,
        errors.RateLimitedError,
        errors.OverloadedError,
        errors.ServerError,
        errors.NetworkError,
        errors.InvalidResponseError,
    ):
        yield kind("it failed", 503)


@pytest.mark.parametrize("error", list(every_error()), ids=lambda e: type(e).__name__)
def test_errors_pickle(error: errors.EvalpipeError) -> None:
    again = pickle.loads(pickle.dumps(error))
    assert type(again) is type(error) and again.message == error.message
    assert getattr(again, "status", None) == getattr(error, "status", None)


def same_result(a: CallResult, b: CallResult) -> bool:
    if (a.response, a.attempts, a.retries, a.rate_limited) != (
        b.response,
        b.attempts,
        b.retries,
        b.rate_limited,
    ):
        return False
    if a.error is None or b.error is None:
        return a.error is b.error
    return (type(a.error), a.error.message, a.error.status) == (
        type(b.error),
        b.error.message,
        b.error.status,
    )


async def test_call_results_pickle(canned: Canned) -> None:
    canned.play(Reply(529, "busy"), Reply())
    ok = await call(canned.url)
    canned.play(Reply(503, "down"))
    failed = await call(canned.url)
    assert ok.response is not None and failed.error is not None
    for result in (ok, failed):
        assert same_result(pickle.loads(pickle.dumps(result)), result)


async def test_the_key_never_appears_in_errors_or_results(canned: Canned) -> None:
    # A careless server (or proxy) that echoes the Authorization header back in every body.
    echo = {"error": {"message": "got {auth}"}}
    replies = [
        Reply(400, echo),
        Reply(422, {"detail": [{"loc": ["body", "{auth}"], "msg": "{auth}"}]}),
        Reply(429, echo, {"retry-after-ms": "1"}),
        Reply(500, "plain {auth}"),
        Reply(529, {"message": "{auth}"}),
        Reply(200, "not json {auth}"),
        Reply(200, {"detail": "{auth}"}, action="truncate"),
    ]
    texts: list[str] = []
    async with EvalClient(canned.url, KEY, policy=RetryPolicy(2, 0.001, 0.001, 2.0)) as client:
        texts.append(repr(client))
        for reply in replies:
            canned.play(reply)
            result = await client.evaluate(PAYLOAD, PARSED, 1)
            assert result.error is not None
            texts += [repr(result), str(result.error), result.error.one_line()]
            texts.append(repr(pickle.loads(pickle.dumps(result))))
        canned.play(Reply(401, {"detail": "bad key {auth}"}))
        with pytest.raises(errors.AuthError) as caught:
            await client.evaluate(PAYLOAD, PARSED, 1)
        texts += [str(caught.value), repr(caught.value), caught.value.one_line()]
    assert canned.seen[0].headers["Authorization"] == f"Bearer {KEY}"
    assert all(KEY not in text for text in texts), [t for t in texts if KEY in t]
    assert sum("[redacted]" in text for text in texts) >= 7


async def test_a_choice_outside_the_options_is_an_invalid_response(canned: Canned) -> None:
    body = good_answer()
    body["answers"]["sentiment"]["choice"] = "sarcastic"
    canned.play(Reply(200, body))
    result = await call(canned.url)
    assert isinstance(result.error, errors.InvalidResponseError)


# --------------------------------------------------------------------------- the embedded service


@contextlib.contextmanager
def own_service(**options: Any) -> Iterator[str]:
    """An embedded reference service of the test's own (thread mode) with these settings."""
    with EmbeddedService(ServiceSettings(api_key=KEY, **options)) as service:
        yield service.base_url


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_service_answers_every_question_type(
    service: EmbeddedService, transport: str
) -> None:
    pacer = RecordingPacer()
    result = await call(service.base_url, key=SERVICE_KEY, pacer=pacer, transport=transport)
    assert result.error is None and result.response is not None and result.attempts == 1
    assert result.response.model == "model-1.13.0"
    assert {k: a.type for k, a in result.response.answers.items()} == {
        "helpful": "noul",
        "sentiment": "choice",
        "quality": "score",
    }
    billed = count_request(PAYLOAD["state"], QUESTIONS)
    assert result.response.usage.input_tokens == billed and pacer.successes == [(50, billed)]


async def test_service_422_is_rejected_with_its_message(service: EmbeddedService) -> None:
    broken = {**QUESTIONS, "sentiment": {"type": "choice", "instructions": "Which?"}}
    result = await call(service.base_url, key=SERVICE_KEY, payload={**PAYLOAD, "questions": broken})
    assert isinstance(result.error, errors.RejectedError) and result.error.status == 422
    assert "questions.sentiment.criteria" in result.error.message
    assert result.attempts == 1


async def test_service_refuses_a_wrong_key_at_once(service: EmbeddedService) -> None:
    start = time.monotonic()
    with pytest.raises(errors.AuthError) as caught:
        await call(service.base_url, key=KEY, policy=RetryPolicy(base_delay=5.0))
    assert time.monotonic() - start < 2.0
    assert str(caught.value).startswith("the service refused the API key (401): ")
    assert KEY not in str(caught.value) and SERVICE_KEY not in str(caught.value)


async def test_service_models_and_probe(service: EmbeddedService) -> None:
    async with EvalClient(service.base_url, SERVICE_KEY) as client:
        await client.probe(wait=2.0)
        listed = await client.list_models()
    assert {m.name for m in listed.models} >= {"model-latest"}


async def test_service_429_is_waited_out() -> None:
    # 60 rpm: a bucket of one request refilled once a second, so the second call gets a 429.
    with own_service(rpm=60) as url:
        pacer = RecordingPacer()
        policy = RetryPolicy(max_attempts=5, base_delay=0.01, max_delay=3.0, attempt_timeout=5.0)
        async with EvalClient(url, KEY, policy=policy, pacer=pacer) as client:
            first = await client.evaluate(PAYLOAD, PARSED, 50)
            start = time.monotonic()
            second = await client.evaluate(PAYLOAD, PARSED, 50)
    assert first.ok and second.ok and second.rate_limited >= 1
    assert pacer.rate_limited and all(d is not None and 0 < d <= 1.0 for d in pacer.rate_limited)
    assert 0.5 <= time.monotonic() - start < 3.0


SERVICE_FAULTS = [
    ("fault_529", errors.OverloadedError),
    ("fault_500", errors.ServerError),
    ("fault_drop", errors.NetworkError),
    ("fault_truncate", errors.InvalidResponseError),
]


@pytest.mark.parametrize("fault", [fault for fault, _ in SERVICE_FAULTS])
async def test_service_faults_are_retried_until_they_pass(fault: str) -> None:
    policy = RetryPolicy(max_attempts=10, base_delay=0.001, max_delay=0.01, attempt_timeout=5.0)
    with own_service(rpm=1_000_000, **{fault: 0.5, "fault_seed": 3}) as url:
        async with EvalClient(url, KEY, policy=policy) as client:
            results = [await client.evaluate(PAYLOAD, PARSED, 50) for _ in range(8)]
    assert all(r.ok for r in results)
    assert sum(r.attempts for r in results) > 8  # some of them needed retries


@pytest.mark.parametrize(("fault", "kind"), SERVICE_FAULTS)
async def test_service_faults_exhaust_the_attempts(
    fault: str, kind: type[errors.CallError]
) -> None:
    policy = RetryPolicy(max_attempts=3, base_delay=0.001, max_delay=0.01, attempt_timeout=5.0)
    with own_service(rpm=1_000_000, **{fault: 1.0}) as url:
        result = await call(url, policy=policy)
    assert type(result.error) is kind and result.attempts == 3 and result.response is None


async def test_service_slow_answers_end_as_network_errors() -> None:
    policy = RetryPolicy(max_attempts=2, base_delay=0.001, max_delay=0.01, attempt_timeout=0.2)
    with own_service(rpm=1_000_000, fault_slow=1.0, slow_seconds=1.0) as url:
        start = time.monotonic()
        result = await call(url, policy=policy)
        elapsed = time.monotonic() - start
    assert isinstance(result.error, errors.NetworkError) and result.attempts == 2
    assert "within 0.2s" in result.error.message or "timed out" in result.error.message
    assert 0.4 <= elapsed < 1.0
