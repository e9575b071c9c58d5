"""The client's logic on `httpx.MockTransport` and a virtual clock: retries, backoff, retry-after,
timeouts, the error mapping and secrecy.

Each test scripts the far end's answers (`Script`) and runs on an event loop whose clock jumps
to the next timer (tests/virtual_clock.py), so the real default backoff of minutes takes no time,
waits are asserted exactly, and a busy machine cannot fail a test. What only real sockets can
show (headers on the wire, pooled connections, dropped and truncated answers, proxies, the
embedded service) is in test_client_http.py.
"""

from __future__ import annotations

import asyncio
import email.utils
import itertools
import pickle
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import orjson
import pytest

from client_doubles import KEY, PARSED, PAYLOAD, RecordingPacer, good_answer
from evalpipe import errors
from evalpipe.config import RetryPolicy
from evalpipe.send.client import CallResult, EvalClient
from evalpipe.send.failures import MAX_MESSAGE, redact, safe, service_message
from virtual_clock import on_virtual_clock

BASE = "http://eval.test"
POLICY = RetryPolicy(max_attempts=4)  # the default delays (0.5 s doubling, capped at 60 s)


# --------------------------------------------------------------------------- test doubles


@dataclass
class Reply:
    """One scripted answer, or (`error`) a transport failure whose message is the body."""

    status: int = 200
    body: Any = field(default_factory=good_answer)  # dict/list -> JSON, str/bytes as they are
    headers: dict[str, str] = field(default_factory=dict)
    delay: float = 0.0  # virtual seconds before it comes
    error: type[httpx.TransportError] | None = None

    def raw(self, auth: str) -> bytes:
        """The body; "{auth}" in it becomes the request's Authorization header (an echo)."""
        if isinstance(self.body, bytes):
            raw = self.body
        elif isinstance(self.body, str):
            raw = self.body.encode()
        else:
            raw = orjson.dumps(self.body)
        return raw.replace(b"{auth}", auth.encode())


class Script:
    """An httpx.MockTransport handler: plays `replies` in order (the last repeats) and records
    each request with the virtual time it was made."""

    def __init__(self, *replies: Reply) -> None:
        self.replies = list(replies) or [Reply()]
        self.seen: list[httpx.Request] = []
        self.times: list[float] = []

    def play(self, *replies: Reply) -> Script:
        self.replies = list(replies)
        return self

    @property
    def gaps(self) -> list[float]:
        """The waits between consecutive requests."""
        return [later - earlier for earlier, later in itertools.pairwise(self.times)]

    async def __call__(self, request: httpx.Request) -> httpx.Response:
        self.seen.append(request)
        self.times.append(asyncio.get_running_loop().time())
        reply = self.replies.pop(0) if len(self.replies) > 1 else self.replies[0]
        if reply.delay:
            await asyncio.sleep(reply.delay)
        raw = reply.raw(request.headers.get("authorization", ""))
        if reply.error is not None:
            raise reply.error(raw.decode(), request=request)
        headers = {"content-type": "application/json", **reply.headers}
        return httpx.Response(reply.status, headers=headers, content=raw)


def client(script: Script, policy: RetryPolicy = POLICY, **options: Any) -> EvalClient:
    return EvalClient(BASE, KEY, transport=httpx.MockTransport(script), policy=policy, **options)


async def call(
    script: Script,
    *,
    policy: RetryPolicy = POLICY,
    pacer: RecordingPacer | None = None,
    payload: dict[str, Any] = PAYLOAD,
) -> CallResult:
    async with client(script, policy, pacer=pacer) as evaluator:
        return await evaluator.evaluate(payload, PARSED, 50)


def now() -> float:
    return asyncio.get_running_loop().time()


# --------------------------------------------------------------------------- messages


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
    assert "\n" not in text and len(text) <= MAX_MESSAGE and text.endswith("...")


def test_redact() -> None:
    assert redact(f"Bearer {KEY} was refused", KEY) == "Bearer [redacted] was refused"
    assert redact("check the key k", "k") == "check the key [redacted]"  # a toy key stays usable
    assert redact("anything", "") == "anything"


def test_safe_redacts_before_it_cuts() -> None:
    # A key that straddles the cut would leave its first half behind if cut first.
    text = "x" * (MAX_MESSAGE - 10) + KEY + " and more"
    shown = safe(text, KEY)
    assert len(shown) <= MAX_MESSAGE and KEY[:8] not in shown


# --------------------------------------------------------------------------- answers


@on_virtual_clock
async def test_success_sends_auth_json_and_checks_all_question_types() -> None:
    script, pacer = Script(), RecordingPacer()
    result = await call(script, pacer=pacer)
    assert result.error is None and (result.attempts, result.rate_limited) == (1, 0)
    assert result.response is not None
    assert result.response.answers["sentiment"].choice == "negative"
    assert result.response.answers["quality"].score == 1.1
    assert result.response.answers["helpful"].noul == 0.8
    (seen,) = script.seen
    assert (seen.method, str(seen.url)) == ("POST", BASE + "/v1/evaluate")
    assert seen.headers["authorization"] == f"Bearer {KEY}"
    assert seen.headers["content-type"] == "application/json"
    assert orjson.loads(seen.content) == PAYLOAD
    assert pacer.acquired == [50] and pacer.successes == [(50, 57)]


@on_virtual_clock
async def test_a_base_url_with_a_path_prefix_keeps_it() -> None:
    # e.g. a gateway that serves the API under /eval; the trailing slash is tolerated.
    script = Script()
    async with EvalClient(BASE + "/eval/", KEY, transport=httpx.MockTransport(script)) as c:
        assert (await c.evaluate(PAYLOAD, PARSED, 1)).error is None
    (seen,) = script.seen
    assert seen.url.path == "/eval/v1/evaluate" and seen.headers["host"] == "eval.test"


async def test_without_a_transport_the_client_builds_the_default_one() -> None:
    async with EvalClient(BASE, KEY) as default:
        assert repr(default) == f"EvalClient({BASE!r}, transport=AiohttpTransport)"


# --------------------------------------------------------------------------- refusals


@on_virtual_clock
async def test_401_raises_auth_error_at_once_without_the_key() -> None:
    script = Script(Reply(401, {"error": {"message": f"invalid key {KEY}"}}))
    pacer = RecordingPacer()
    with pytest.raises(errors.AuthError) as caught:
        await call(script, pacer=pacer)
    assert len(script.seen) == 1 and pacer.acquired == [50] and now() == 0.0  # no wait
    assert str(caught.value) == "the service refused the API key (401): invalid key [redacted]"
    assert caught.value.exit_code == 3


@on_virtual_clock
async def test_422_is_a_rejected_row_with_the_service_message() -> None:
    detail = [{"loc": ["body", "questions", "q", "criteria"], "msg": "Field required"}]
    script = Script(Reply(422, {"detail": detail}))
    result = await call(script)
    assert isinstance(result.error, errors.RejectedError)
    assert result.error.error_type == "rejected" and result.error.status == 422
    assert "questions.q.criteria: Field required" in result.error.message
    assert (result.attempts, len(script.seen)) == (1, 1)


@pytest.mark.parametrize("status", [400, 403, 404, 409, 413, 302])
@on_virtual_clock
async def test_other_client_errors_are_rejected_and_not_retried(status: int) -> None:
    script = Script(Reply(status, "nope", headers={"location": "http://elsewhere.invalid/"}))
    result = await call(script)
    assert isinstance(result.error, errors.RejectedError)
    assert result.error.status == status and "nope" in result.error.message
    assert result.attempts == 1 and len(script.seen) == 1


@on_virtual_clock
async def test_unencodable_payload_is_rejected_before_sending() -> None:
    script = Script()
    result = await call(script, payload={**PAYLOAD, "state": {1j}})
    assert isinstance(result.error, errors.RejectedError)
    assert result.attempts == 0 and script.seen == []


# --------------------------------------------------------------------------- retries


@on_virtual_clock
async def test_429_waits_for_retry_after_ms_then_succeeds() -> None:
    limited = Reply(429, {"error": "slow down"}, {"retry-after-ms": "150", "retry-after": "30"})
    script, pacer = Script(limited, Reply()), RecordingPacer()
    result = await call(script, pacer=pacer)
    assert result.error is None and (result.attempts, result.rate_limited) == (2, 1)
    assert script.gaps == [pytest.approx(0.15)]  # ms took precedence over the 30 s
    assert pacer.rate_limited == 1
    assert pacer.acquired == [50, 50]  # the pacer is asked before every attempt


@on_virtual_clock
async def test_429_retry_after_as_http_date_is_honoured_up_to_max_delay() -> None:
    in_an_hour = email.utils.formatdate(time.time() + 3600, usegmt=True)
    script = Script(Reply(429, "later", {"retry-after": in_an_hour}), Reply())
    result = await call(script)
    assert result.error is None and result.rate_limited == 1
    assert script.gaps == [POLICY.max_delay]  # the date was read, and capped


@on_virtual_clock
async def test_529_honours_retry_after_seconds() -> None:
    script = Script(Reply(529, "overloaded", {"retry-after": "7"}), Reply())
    result = await call(script)
    assert result.error is None and result.rate_limited == 0 and script.gaps == [7.0]


@on_virtual_clock
async def test_429_without_header_backs_off_within_the_caps() -> None:
    script, pacer = Script(Reply(429, "busy"), Reply(429, "busy"), Reply()), RecordingPacer()
    result = await call(script, pacer=pacer)
    assert result.error is None and result.rate_limited == 2 and pacer.rate_limited == 2
    assert all(0.0 <= gap <= POLICY.backoff_cap(n) for n, gap in enumerate(script.gaps))


@on_virtual_clock
async def test_a_failing_call_sleeps_at_most_the_worst_case_backoff() -> None:
    policy = RetryPolicy()  # the real defaults: 12 attempts, about 5 minutes of backoff
    script = Script(Reply(503, "down"))
    result = await call(script, policy=policy)
    assert isinstance(result.error, errors.ServerError) and result.attempts == 12
    assert len(script.gaps) == 11
    assert all(0.0 <= gap <= policy.backoff_cap(n) for n, gap in enumerate(script.gaps))
    assert now() <= policy.worst_case_backoff
    # Full jitter: the long caps are not slept out in full every time.
    assert now() < policy.worst_case_backoff - 1


@on_virtual_clock
async def test_429_until_attempts_run_out_is_rate_limited() -> None:
    script = Script(Reply(429, {"message": "limit"}, {"retry-after-ms": "1"}))
    result = await call(script)
    assert isinstance(result.error, errors.RateLimitedError)
    assert result.error.error_type == "rate_limited" and result.error.status == 429
    assert (result.attempts, result.rate_limited, len(script.seen)) == (4, 4, 4)
    assert "gave up after 4 attempts" in result.error.message
    assert script.gaps == [pytest.approx(0.001)] * 3


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
@on_virtual_clock
async def test_transient_statuses_retry_then_succeed_or_run_out(
    status: int, kind: type[errors.CallError]
) -> None:
    assert (await call(Script(Reply(status, "try again"), Reply()))).attempts == 2
    result = await call(Script(Reply(status, "try again")))
    assert type(result.error) is kind and result.error.status == status
    assert result.attempts == POLICY.max_attempts and result.rate_limited == 0


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
@on_virtual_clock
async def test_contract_breaking_bodies_are_retried_then_invalid(name: str) -> None:
    broken = Reply(200, BROKEN_BODIES[name])
    assert (await call(Script(broken, Reply()))).attempts == 2
    result = await call(Script(broken))
    assert isinstance(result.error, errors.InvalidResponseError)
    assert result.error.error_type == "invalid_response"
    assert result.attempts == POLICY.max_attempts and "\n" not in result.error.message


@on_virtual_clock
async def test_a_choice_outside_the_options_is_an_invalid_response() -> None:
    body = good_answer()
    body["answers"]["sentiment"]["choice"] = "sarcastic"
    result = await call(Script(Reply(200, body)))
    assert isinstance(result.error, errors.InvalidResponseError)


@pytest.mark.parametrize(
    "error", [httpx.ConnectError, httpx.ReadError, httpx.RemoteProtocolError, httpx.ReadTimeout]
)
@on_virtual_clock
async def test_transport_errors_are_retried_network_errors(
    error: type[httpx.TransportError],
) -> None:
    failing = Reply(body="connection lost", error=error)
    assert (await call(Script(failing, Reply()))).attempts == 2
    result = await call(Script(failing))
    assert isinstance(result.error, errors.NetworkError) and result.error.error_type == "network"
    assert result.attempts == POLICY.max_attempts
    assert f"{error.__name__}: connection lost" in result.error.message


@on_virtual_clock
async def test_slow_answers_time_out_after_bounded_attempts() -> None:
    no_backoff = RetryPolicy(max_attempts=3, base_delay=0.0, max_delay=0.0, attempt_timeout=0.2)
    script = Script(Reply(delay=2.0))
    result = await call(script, policy=no_backoff)
    assert isinstance(result.error, errors.NetworkError) and result.attempts == 3
    assert "no complete answer within 0.2s" in result.error.message
    assert script.gaps == [pytest.approx(0.2)] * 2 and now() == pytest.approx(0.6)


@on_virtual_clock
async def test_mixed_failures_then_success_count_every_attempt() -> None:
    script = Script(
        Reply(529, "busy"),
        Reply(500, "oops"),
        Reply(error=httpx.RemoteProtocolError),
        Reply(429, "x"),
        Reply(),
    )
    pacer = RecordingPacer()
    result = await call(script, pacer=pacer, policy=RetryPolicy(max_attempts=5))
    assert result.error is None and (result.attempts, result.rate_limited) == (5, 1)
    assert pacer.acquired == [50] * 5 and pacer.successes == [(50, 57)]


@on_virtual_clock
async def test_an_aborted_budget_stops_the_call() -> None:
    script = Script()
    pacer = RecordingPacer(fail_with=errors.AuthError("the service refused the API key (401): x"))
    with pytest.raises(errors.AuthError):
        await call(script, pacer=pacer)
    assert script.seen == []


# --------------------------------------------------------------------------- models and probe


MODELS = {"models": [{"name": "model-latest", "description": "d", "release_date": "2025-06-02"}]}


@on_virtual_clock
async def test_list_models() -> None:
    script = Script(Reply(200, MODELS))
    async with client(script) as c:
        listed = await c.list_models()
    assert [m.name for m in listed.models] == ["model-latest"]
    assert script.seen[0].method == "GET" and script.seen[0].url.path == "/v1/models"


@pytest.mark.parametrize(
    ("reply", "kind"),
    [
        (Reply(500, "down"), errors.ServerError),
        (Reply(200, {"models": [{"name": "x"}]}), errors.InvalidResponseError),
        (Reply(404, {"detail": "Not Found"}), errors.RejectedError),
        (Reply(401, "who are you"), errors.AuthError),
    ],
)
@on_virtual_clock
async def test_list_models_failures_raise(reply: Reply, kind: type[errors.EvalpipeError]) -> None:
    async with client(Script(reply)) as c:
        with pytest.raises(kind):
            await c.list_models()


@on_virtual_clock
async def test_probe() -> None:
    async with client(Script(Reply(200, {"models": []}))) as c:
        await c.probe(wait=1.0)
    async with client(Script(Reply(401, {"detail": "Not authenticated"}))) as c:
        with pytest.raises(errors.AuthError, match="Not authenticated"):
            await c.probe(wait=1.0)


@on_virtual_clock
async def test_probe_gives_up_within_the_wait() -> None:
    script = Script(Reply(body="refused", error=httpx.ConnectError))
    async with client(script) as c:
        with pytest.raises(errors.ServiceUnreachable) as caught:
            await c.probe(wait=0.5)
    # Tries at once, then after 0.05 s doubling; gives up when the next try would be too late.
    assert script.times == pytest.approx([0.0, 0.05, 0.15, 0.35]) and now() <= 0.5
    assert BASE in str(caught.value) and caught.value.exit_code == 2


@on_virtual_clock
async def test_probe_waits_for_a_service_that_comes_up_late() -> None:
    refused = Reply(body="refused", error=httpx.ConnectError)
    script = Script(refused, refused, refused, refused, Reply(200, {"models": []}))
    async with client(script) as c:
        await c.probe(wait=60.0)
    assert len(script.seen) == 5 and now() == pytest.approx(0.75)


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
    if (a.response, a.attempts, a.rate_limited) != (b.response, b.attempts, b.rate_limited):
        return False
    if a.error is None or b.error is None:
        return a.error is b.error
    return (type(a.error), a.error.message, a.error.status) == (
        type(b.error),
        b.error.message,
        b.error.status,
    )


@on_virtual_clock
async def test_call_results_pickle() -> None:
    ok = await call(Script(Reply(529, "busy"), Reply()))
    failed = await call(Script(Reply(503, "down")))
    assert ok.response is not None and failed.error is not None
    for result in (ok, failed):
        assert same_result(pickle.loads(pickle.dumps(result)), result)


@on_virtual_clock
async def test_the_key_never_appears_in_errors_or_results() -> None:
    # A careless server (or proxy) that echoes the Authorization header back in every body,
    # and a lower layer that puts it in an exception's text.
    echo = {"error": {"message": "got {auth}"}}
    replies = [
        Reply(400, echo),
        Reply(422, {"detail": [{"loc": ["body", "{auth}"], "msg": "{auth}"}]}),
        Reply(429, echo, {"retry-after-ms": "1"}),
        Reply(500, "plain {auth}"),
        Reply(529, {"message": "{auth}"}),
        Reply(200, "not json {auth}"),
        Reply(200, {"detail": "{auth}"}),
        Reply(body="peer reset while sending {auth}", error=httpx.ReadError),
    ]
    texts: list[str] = []
    script = Script()
    async with client(script, RetryPolicy(max_attempts=2)) as c:
        texts.append(repr(c))
        for reply in replies:
            script.play(reply)
            result = await c.evaluate(PAYLOAD, PARSED, 1)
            assert result.error is not None
            texts += [repr(result), str(result.error), result.error.one_line()]
            texts.append(repr(pickle.loads(pickle.dumps(result))))
        script.play(Reply(401, {"detail": "bad key {auth}"}))
        with pytest.raises(errors.AuthError) as caught:
            await c.evaluate(PAYLOAD, PARSED, 1)
        texts += [str(caught.value), repr(caught.value), caught.value.one_line()]
        script.play(Reply(body="refused {auth}", error=httpx.ConnectError))
        with pytest.raises(errors.ServiceUnreachable) as unreachable:
            await c.probe(wait=0.1)
        texts += [str(unreachable.value), unreachable.value.one_line()]
    assert script.seen[0].headers["authorization"] == f"Bearer {KEY}"
    assert all(KEY not in text for text in texts), [t for t in texts if KEY in t]
    assert sum("[redacted]" in text for text in texts) >= 9
