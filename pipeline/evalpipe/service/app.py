"""The embedded service's HTTP face: the service's two endpoints, its errors, limits and faults.

It exists so evalpipe can be run, tested and benchmarked end to end without the real service,
against something that fails the way the real one does. A request to `POST /v1/evaluate` goes
through the checks in a fixed order, and the first that fails answers:

    auth (401) → body size (413) → JSON, contract, model, context (422) → rate limit (429)
    → in-flight cap (529) → injected fault (529, 500, drop, truncate, slow, hang) → latency → 200

Validation is `evalpipe.contract.resources`'s, so the service refuses exactly what the client-side
checks refuse; 422 bodies are FastAPI-style (`{"detail": [{"loc", "msg", "type"}]}`), other errors
are `{"error": {"type", "message"}}`. Not part of the public contract: `POST /_admin/limits`,
`POST /_admin/faults` and `GET /_admin/stats` (authenticated), which change the limits and the
injected faults at run time and show counters.

A client that hangs up before its answer (a cancelled request) gets none and is not billed: the
server cancels the request's handler (`handler_cancellation`), so it counts no 200; the request
still counts as accepted (`requests_accepted`: it spent the rate limit), not as answered
(`requests_answered`: what the account is billed for).
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import time
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from aiohttp import web

from evalpipe.contract import context_violation, dumps, validate_request
from evalpipe.errors import ConfigError, ContractError
from evalpipe.service.bodies import detail_body, error_body, issue_loc, load_json
from evalpipe.service.counting import ServiceCounter
from evalpipe.service.evaluator import (
    Compiled,
    PointedQuestions,
    answer_request,
)
from evalpipe.service.faults import Fault, FaultInjector, Latency
from evalpipe.service.models import KNOWN, model_list, resolve
from evalpipe.service.ratelimit import Clock, RateLimiter, check_limits
from evalpipe.service.requests import PreparedQuestions, QuestionCache, Stats
from evalpipe.service.settings import FAULT_FIELDS, LimitStep, ServiceSettings

JSON_HEADERS = {"Content-Type": "application/json"}
OVERLOADED_RETRY_SECONDS = 1
_TRUNCATED_HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\n\r\n"
_MODELS_BODY = dumps(model_list())


class _Reply(Exception):
    """Carries an error response out of the checks; only the request handler catches it."""

    def __init__(self, response: web.Response) -> None:
        super().__init__(response.status)
        self.response = response


# --------------------------------------------------------------------------- the service


class ServiceApp:
    """State and request handlers of one running embedded service."""

    def __init__(self, settings: ServiceSettings, clock: Clock = time.monotonic) -> None:
        self.settings = settings
        self.limiter = RateLimiter(settings.rpm, settings.tps, clock)
        self.faults = FaultInjector(settings.fault_rates(), settings.fault_seed)
        self.latency = Latency(settings.latency, settings.fault_seed)
        self.stats = Stats()
        self.counter = ServiceCounter(settings.token_rule, settings.token_factor)
        self.questions = QuestionCache(self.counter)
        self.pointed = PointedQuestions()
        self._key = settings.api_key.encode("utf-8", "surrogateescape")
        self._schedule: asyncio.Task[None] | None = None

    # ----------------------------------------------------------------- replies

    def reply(
        self, status: int, body: bytes, headers: Mapping[str, str] | None = None
    ) -> web.Response:
        self.stats.responses[status] += 1
        all_headers = {**JSON_HEADERS, **headers} if headers else JSON_HEADERS
        return web.Response(status=status, body=body, headers=all_headers)

    def _unprocessable(self, issues: list[tuple[list[str | int], str, str]]) -> _Reply:
        return _Reply(self.reply(422, detail_body(issues)))

    def _overloaded(self, message: str) -> web.Response:
        seconds = OVERLOADED_RETRY_SECONDS
        headers = {"retry-after": str(seconds), "retry-after-ms": str(seconds * 1000)}
        return self.reply(529, error_body("overloaded_error", message), headers)

    # ----------------------------------------------------------------- checks, in order

    def _authorize(self, request: web.Request) -> None:
        scheme, _, token = request.headers.get("Authorization", "").partition(" ")
        given = token.strip().encode("utf-8", "surrogateescape")
        if scheme.lower() != "bearer" or not hmac.compare_digest(given, self._key):
            message = "missing or invalid API key: send the header `Authorization: Bearer <key>`"
            headers = {"WWW-Authenticate": "Bearer"}
            raise _Reply(self.reply(401, error_body("authentication_error", message), headers))

    async def _read_body(self, request: web.Request) -> bytes:
        limit = self.settings.max_body_bytes
        size = request.content_length
        if size is not None and size > limit:
            message = f"request body is {size} bytes; at most {limit} are accepted"
        else:
            try:
                return await request.read()
            except web.HTTPRequestEntityTooLarge:  # chunked, without a Content-Length
                message = f"request body is larger than {limit} bytes, the most accepted"
        raise _Reply(self.reply(413, error_body("request_too_large", message)))

    def _parse(self, raw: bytes) -> dict[str, Any]:
        try:
            body = load_json(raw)
        except ValueError as exc:
            raise self._unprocessable([(["body"], str(exc), "json_invalid")]) from None
        try:
            validate_request(body)
        except ContractError as exc:
            issues = [(issue_loc(body, path), msg, kind) for path, msg, kind in exc.issues]
            raise self._unprocessable(issues) from None
        return body

    def _resolve_model(self, name: str) -> str:
        version = resolve(name)
        if version is None:
            known = ", ".join(KNOWN)
            message = f"unknown model {name!r}; this service knows {known}"
            raise self._unprocessable([(["body", "model"], message, "unknown_model")])
        return version

    def _prepare(self, body: dict[str, Any]) -> tuple[PreparedQuestions, int]:
        """The questions, prepared, and its billed tokens (the state plus every question), after the
        context limits."""
        try:
            prepared = self.questions.prepare(body["questions"])
            state_tokens = self.counter.state(body["state"])
        except RecursionError:
            message = "nested too deeply to count its tokens"
            raise self._unprocessable([(["body"], message, "too_deep")]) from None
        per_question = prepared.tokens
        cap = self.settings.max_questions
        if cap and len(per_question) > cap:
            message = f"too many questions: {len(per_question)} in one request, at most {cap}"
            raise self._unprocessable([(["body", "questions"], message, "too_many_questions")])
        violation = context_violation(state_tokens, per_question)
        if violation is not None:
            raise self._unprocessable([(["body", "state"], violation, "context_limit")])
        times = len(per_question) if self.settings.bill_per_question else 1
        return prepared, state_tokens * times + sum(per_question.values())

    def _admit(self, tokens: int) -> None:
        denial = self.limiter.check(tokens)
        if denial is not None:
            headers = {
                "retry-after": str(denial.retry_after_seconds),
                "retry-after-ms": str(denial.retry_after_ms),
            }
            body = error_body("rate_limit_error", denial.message)
            raise _Reply(self.reply(429, body, headers))
        if self.stats.inflight >= self.settings.max_inflight:
            limit = self.settings.max_inflight
            raise _Reply(self._overloaded(f"overloaded: {limit} requests already in flight"))
        self.limiter.consume(tokens)
        self.stats.accepted += 1
        self.stats.tokens += tokens

    # ----------------------------------------------------------------- handlers

    async def evaluate(self, request: web.Request) -> web.StreamResponse:
        try:
            self._authorize(request)
            body = self._parse(await self._read_body(request))
            model = self._resolve_model(body["model"])
            prepared, tokens = self._prepare(body)
            self._admit(tokens)
        except _Reply as reply:
            return reply.response
        self.stats.enter()
        try:
            return await self._answer(request, body, prepared.compiled, model, tokens)
        finally:
            self.stats.inflight -= 1

    async def _answer(
        self,
        request: web.Request,
        body: dict[str, Any],
        questions: Compiled,
        model: str,
        tokens: int,
    ) -> web.StreamResponse:
        fault = self.faults.draw()
        if fault is not None:
            self.stats.faults[fault.value] += 1
        if fault is Fault.OVERLOADED:
            return self._overloaded("overloaded: try again later (injected fault)")
        if fault is Fault.SERVER_ERROR:
            message = "internal server error (injected fault)"
            return self.reply(500, error_body("api_error", message))
        if fault is Fault.DROP:
            return _hang_up(request, b"")
        if fault is Fault.HANG:  # a stuck backend behind a proxy that gives up on it
            await asyncio.sleep(self.settings.slow_seconds)
            return _hang_up(request, b"")
        delay = self.settings.slow_seconds if fault is Fault.SLOW else self.latency.sample()
        if delay > 0:
            await asyncio.sleep(delay)
        answers = answer_request(
            body["state"],
            body["questions"],
            questions,
            model,
            self.settings.pack_sway,
            self.pointed,
            self.settings.rehearsal(),
        )
        usage = {"input_tokens": tokens, "output_tokens": 0}
        data = dumps({"model": model, "answers": answers, "usage": usage})
        if fault is Fault.TRUNCATE:
            self.stats.responses[200] += 1
            return _hang_up(request, _TRUNCATED_HEAD + data[: len(data) // 2])
        self.stats.answered += 1
        return self.reply(200, data)

    async def list_models(self, request: web.Request) -> web.Response:
        try:
            self._authorize(request)
        except _Reply as reply:
            return reply.response
        return self.reply(200, _MODELS_BODY)

    async def admin_limits(self, request: web.Request) -> web.Response:
        try:
            self._authorize(request)
            rpm, tps = self._limits_from(await self._read_body(request))
        except _Reply as reply:
            return reply.response
        self.limiter.set_limits(rpm, tps)
        return self.reply(200, dumps({"limits": self.limiter.limits()}))

    def _limits_from(self, raw: bytes) -> tuple[float | None, float | None]:
        body = self._admin_body(raw, ("rpm", "tps"))
        try:
            check_limits(body.get("rpm"), body.get("tps"))
        except ConfigError as exc:
            name = exc.message.partition(":")[0]
            raise self._unprocessable([(["body", name], exc.message, "value_error")]) from None
        return body.get("rpm"), body.get("tps")

    async def admin_faults(self, request: web.Request) -> web.Response:
        """Change the injected faults from now on (the fields of `--fault-*` and
        `--slow-seconds`); the draws start again from the service's seed."""
        try:
            self._authorize(request)
            changes = self._admin_body(await self._read_body(request), FAULT_FIELDS)
            try:
                self.set_faults(changes)
            except ConfigError as exc:
                raise self._unprocessable([(["body"], exc.message, "value_error")]) from None
        except _Reply as reply:
            return reply.response
        shown = {name: getattr(self.settings, name) for name in FAULT_FIELDS}
        return self.reply(200, dumps(shown))

    def set_faults(self, changes: Mapping[str, Any]) -> None:
        """Inject these faults from now on (ConfigError for a value the flags would refuse)."""
        self.settings = replace(self.settings, **changes)
        self.faults = FaultInjector(self.settings.fault_rates(), self.settings.fault_seed)

    def _admin_body(self, raw: bytes, known: tuple[str, ...]) -> dict[str, Any]:
        """An admin request's JSON object, each field one of `known` (else a 422)."""
        try:
            body = load_json(raw)
        except ValueError as exc:
            raise self._unprocessable([(["body"], str(exc), "json_invalid")]) from None
        if not isinstance(body, dict):
            raise self._unprocessable([(["body"], "must be a JSON object", "model_type")])
        unknown = sorted(set(body) - set(known))
        if unknown:
            message = "unknown field: set " + ", ".join(f"`{name}`" for name in known)
            raise self._unprocessable([(["body", unknown[0]], message, "extra_forbidden")])
        return body

    async def admin_stats(self, request: web.Request) -> web.Response:
        try:
            self._authorize(request)
        except _Reply as reply:
            return reply.response
        return self.reply(200, dumps(self.snapshot()))

    def snapshot(self) -> dict[str, Any]:
        return self.stats.snapshot(self.limiter.limits())

    # ----------------------------------------------------------------- limit schedule

    def start_schedule(self) -> None:
        """Apply `--limit-schedule` from now on (call once the server is accepting)."""
        steps = self.settings.schedule()
        if steps:
            self._schedule = asyncio.get_running_loop().create_task(self._run_schedule(steps))

    async def _run_schedule(self, steps: tuple[LimitStep, ...]) -> None:
        loop = asyncio.get_running_loop()
        start = loop.time()
        for step in steps:
            await asyncio.sleep(max(0.0, start + step.at - loop.time()))
            self.limiter.set_limits(step.rpm, step.tps)

    async def stop_schedule(self) -> None:
        if self._schedule is not None:
            self._schedule.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._schedule


def _hang_up(request: web.Request, data: bytes) -> web.Response:
    """Write `data` (maybe nothing) straight to the socket and close it: no proper response.

    aiohttp then fails to send the response we return and drops it quietly, as it does when a
    client disconnects."""
    transport = request.transport
    if transport is not None:
        if data:
            transport.write(data)
        transport.close()
    return web.Response()


def build_app(service: ServiceApp) -> web.Application:
    """The aiohttp application serving `service`."""
    # client_max_size makes aiohttp refuse a chunked body past the limit while reading it.
    app = web.Application(client_max_size=service.settings.max_body_bytes)
    app.router.add_post("/v1/evaluate", service.evaluate)
    app.router.add_get("/v1/models", service.list_models)
    app.router.add_post("/_admin/limits", service.admin_limits)
    app.router.add_post("/_admin/faults", service.admin_faults)
    app.router.add_get("/_admin/stats", service.admin_stats)
    return app
