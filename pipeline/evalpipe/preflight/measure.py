"""Agreement measured before packing: `packing.rows: auto` and `plan --calibrate N`.

Packing rows costs accuracy when the service lets a row's neighbours sway its answers, and money
when it bills a pack dearly. So before it packs, the job asks a sample of the corpus (its first
distinct rows that go in one request) both alone and packed, and compares:

- per question, how often the decision agrees (noul: p >= 0.5; choice: the option; score: the
  most probable level), with a 95% Wilson interval (`scipy.stats.binomtest`), and the mean
  absolute change of p (noul), of the chosen option's probability (choice), of the score;
- the cost per row packed / alone, from the service's own `usage.input_tokens`, measured on the
  first pack before the rest of the sample is asked packed (a dear service costs one pack).

It packs at the largest k that the limits allow (the context limits, the learned questions cap),
that is no larger than the k at which tokens per second, not requests per minute, bind (more
rows per request then gain nothing), whose cost ratio is at most `packing.max_cost_ratio`, and
whose every question's agreement has a lower bound of at least `packing.min_agreement`; a k that
fails is halved. If no k of 2 or more passes, rows go alone, and the reason names the question
and the figure. The sample rows keep their answers alone (the run writes them as they are).

The measurement is kept per service and model (with a digest of the questions) beside the token
ratio (`evalpipe.planning.packing`), so `plan` shows what `run` will do, and `run` measures only
when nothing is kept for its questions.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from evalpipe.config import RetryPolicy
from evalpipe.contract import validate_questions
from evalpipe.errors import EvalpipeError, RejectedError, TooManyQuestionsError
from evalpipe.limits import LocalPacer
from evalpipe.planning import (
    Answered,
    Learned,
    Packer,
    PackingChoice,
    PreparedJob,
    Request,
    Sampled,
)
from evalpipe.preflight.agreement import Agreement, agreements
from evalpipe.send import (
    INTERACTIVE_POLICY,
    CallResult,
    EvalClient,
    Pack,
    StateJob,
    api_key,
    pack_payload,
    request_body,
)

IN_FLIGHT = 8  # measurement requests sent at once
MAX_AUTO_ROWS = 64  # auto never packs more rows than this a request


@dataclass
class Measurement:
    """What the sample showed, and the choice it makes."""

    rows: int  # rows per request chosen (1: alone)
    reason: str
    sample_rows: int
    tried: list[dict[str, Any]] = field(default_factory=list)  # each k tried and its figures
    agreement: list[Agreement] = field(default_factory=list)  # at the chosen k (or the last)
    cost_ratio: float | None = None
    requests: int = 0  # measurement requests (alone and packed), billed
    billed_tokens: int = 0
    sampled: list[Sampled] = field(default_factory=list)  # the rows' answers alone
    # Requests like the run's (packs at the chosen k, or rows alone): how many, their tokens
    # by evalpipe's count, and billed. The run's pacing starts from their ratio.
    usage: Answered | None = None
    per_row: dict[str, float] = field(default_factory=dict)  # billed tokens a row: alone, packed

    def figures(self) -> dict[str, Any]:
        return {
            "rows": self.rows,
            "reason": self.reason,
            "sample_rows": self.sample_rows,
            "cost_ratio": None if self.cost_ratio is None else round(self.cost_ratio, 4),
            "agreement": [a.shown() for a in self.agreement],
            "tried": self.tried,
            "measurement_requests": self.requests,
            "measurement_billed_tokens": self.billed_tokens,
            "tokens_per_row": self.per_row,
            "usage": None if self.usage is None else self.usage.shown(),
        }


# --------------------------------------------------------------------------- asking


class _Asker:
    """Measurement requests to the service, a few at a time, counted."""

    def __init__(self, client: EvalClient, prepared: PreparedJob) -> None:
        self.client = client
        self.prepared = prepared
        self.parsed = validate_questions(prepared.questions)
        self.slots = asyncio.Semaphore(IN_FLIGHT)
        self.requests = 0
        self.billed = 0

    async def send(self, body: dict[str, Any], parsed: dict[str, Any], tokens: int) -> CallResult:
        async with self.slots:
            result = await self.client.evaluate(body, parsed, tokens)
        self.requests += result.attempts
        if result.response is not None:
            self.billed += result.response.usage.input_tokens
        return result

    async def alone(self, state: Any, request: Request) -> Sampled | None:
        prepared = self.prepared
        body = request_body(state, prepared.config.model, prepared.questions, request.keys)
        result = await self.send(body, {k: self.parsed[k] for k in request.keys}, request.tokens)
        if result.response is None:
            return None  # a row in error is left out of the sample (the run sends it)
        response = result.response
        answers = {k: a.model_dump() for k, a in response.answers.items()}
        return Sampled(
            state, request, answers, response.model, response.usage.input_tokens,
            result.attempts, result.rate_limited,
        )  # fmt: skip

    async def packed(self, rows: list[Sampled], packer: Packer) -> tuple[list[Any], Answered]:
        """One pack of `rows`, as the run packs them: each row's answers, and the request's
        usage. TooManyQuestionsError is raised for the caller to pack fewer."""
        jobs = tuple(StateJob(i, r.state, (r.request,)) for i, r in enumerate(rows))
        plan = packer.one([r.request for r in rows])
        fields = tuple(packer.field(i) for i in range(len(rows)))
        pack = Pack(jobs, fields, plan.tokens, plan.shares)
        body, back = pack_payload(pack, self.prepared.config.model, self.prepared.questions)
        parsed = {k: self.parsed[key] for k, (_, key) in back.items()}
        result = await self.send(body, parsed, pack.tokens)
        if isinstance(result.error, RejectedError):
            raise result.error
        if result.response is None:
            message = result.error.message if result.error else "no answer"
            raise EvalpipeError(f"packing measurement: a packed request failed: {message}")
        answers: list[dict[str, Any]] = [{} for _ in rows]
        for packed_key, answer in result.response.answers.items():
            i, key = back[packed_key]
            answers[i][key] = answer.model_dump()
        return answers, Answered(1, len(rows), pack.tokens, result.response.usage.input_tokens)


# --------------------------------------------------------------------------- choosing


def largest_k(prepared: PreparedJob, sample: list[Sampled], cap: int | None) -> tuple[int, str]:
    """The most rows a request the limits allow for this sample, and no more than make tokens
    per second the binding limit; with why."""
    requests = [s.request for s in sample]
    if len(requests) < 2:
        return 1, "the sample has fewer than 2 rows that go in one request"
    p = Packer.of(prepared, min(MAX_AUTO_ROWS, len(requests)), cap)
    by_limits = max(len(plan.members) for plan in p.groups(requests))
    limits = prepared.config.limits
    per_row = sum(s.billed for s in sample) / len(sample)  # billed alone: the floor packed
    tps_binds = math.ceil(limits.tokens_per_second * 60 / (limits.requests_per_minute * per_row))
    if tps_binds < by_limits:
        return max(1, tps_binds), (
            f"at {tps_binds} rows per request tokens per second bind "
            f"({per_row:.0f} tokens a row), so more gain nothing"
        )
    return by_limits, f"the context limits and the questions cap allow {by_limits}"


async def _measure(asker: _Asker, prepared: PreparedJob, n: int) -> Measurement:
    config = prepared.config
    drawn = prepared.sample(n, whole=True)
    asked = await asyncio.gather(*(asker.alone(state, request) for state, request in drawn))
    sample = [s for s in asked if s is not None]
    learned = Learned.of(prepared)
    cap = learned.cap()
    k, why = largest_k(prepared, sample, cap)
    m = Measurement(1, "", len(sample), sampled=sample)
    p = Packer.of(prepared, max(k, 1), cap)
    keys = list(prepared.questions)
    reasons = [] if k >= 2 else [why]
    alone = sum(s.billed for s in sample)
    m.per_row = {"alone": round(alone / len(sample), 1)} if sample else {}
    while k >= 2:
        try:
            first, used = await asker.packed(sample[:k], p)
        except TooManyQuestionsError:
            cap = k * len(keys) // 2
            learned.keep_cap(cap, "packing measurement")
            reasons.append(f"the service refused {k * len(keys)} questions in one request")
            k = cap // len(keys)
            continue
        except RejectedError as exc:  # over its context limit by its own count, or other
            reasons.append(f"the service refused a pack of {k} rows ({exc.message})")
            k //= 2
            continue
        except EvalpipeError as exc:
            reasons.append(f"a pack of {k} rows failed ({exc.message})")
            break
        alone_billed = sum(s.billed for s in sample[:k])
        ratio = used.billed / alone_billed if alone_billed else math.inf
        tried: dict[str, Any] = {"rows": k, "cost_ratio": round(ratio, 4)}
        m.tried.append(tried)
        m.cost_ratio = ratio
        m.per_row["packed"] = round(ratio * alone / len(sample), 1)  # at the first pack's ratio
        if ratio > config.packing.max_cost_ratio:
            reasons.append(
                f"at {k} rows per request a row costs {ratio:.2f} times its cost alone "
                f"(packing.max_cost_ratio is {config.packing.max_cost_ratio})"
            )
            k //= 2
            continue
        packs = [sample[i : i + k] for i in range(k, len(sample), k)]
        try:
            done = await asyncio.gather(*(asker.packed(rows, p) for rows in packs))
        except EvalpipeError as exc:
            reasons.append(f"at {k} rows per request a pack failed ({exc.message})")
            k //= 2
            continue
        packed = first + [a for answers, _ in done for a in answers]
        for _, more in done:
            used += more
        m.cost_ratio = used.billed / (alone or 1)
        m.per_row["packed"] = round(used.billed / used.rows, 1)  # every sample row, packed
        tried["cost_ratio"] = round(m.cost_ratio, 4)
        m.agreement = agreements(keys, [s.answers for s in sample], packed)
        tried["lowest_agreement_bound"] = round(min(a.low for a in m.agreement), 4)
        worst = min(m.agreement, key=lambda a: a.low)
        if m.cost_ratio > config.packing.max_cost_ratio:
            reasons.append(
                f"at {k} rows per request a row costs {m.cost_ratio:.2f} times its cost alone "
                f"(packing.max_cost_ratio is {config.packing.max_cost_ratio})"
            )
        elif worst.low < config.packing.min_agreement:
            reasons.append(
                f"at {k} rows per request question {worst.question!r} agrees with its answer "
                f"alone on {worst.agree} of {worst.rows} rows (95% interval {worst.low:.3f}-"
                f"{worst.high:.3f}; packing.min_agreement is {config.packing.min_agreement})"
            )
        else:
            m.rows, m.usage = k, used
            m.reason = (
                "every question agrees with its answers alone (lowest "
                f"bound {worst.low:.3f} >= {config.packing.min_agreement}), a row costs "
                f"{m.cost_ratio:.2f} times alone; {why}"
            )
            break
        k //= 2
    if m.rows == 1:
        m.reason = "rows go alone: " + ("; ".join(reasons) or why)
        estimated = sum(s.request.tokens for s in sample)
        m.usage = Answered(len(sample), len(sample), estimated, alone) if sample else None
    m.requests, m.billed_tokens = asker.requests, asker.billed
    return m


@contextlib.asynccontextmanager
async def paced_client(
    prepared: PreparedJob, url: str, key: str, policy: RetryPolicy | None = None
) -> AsyncIterator[EvalClient]:
    """A client for requests before the run (a measurement, the canary), probed: on the
    account's schedule (the shared tier's, when the job has one), as the run's Budget, which
    takes up where it ends."""
    service = prepared.config.service
    policy = policy or prepared.config.retries.policy()
    async with (
        LocalPacer.for_job(prepared.config, url, key, prepared.tier) as pacer,
        EvalClient(
            url, key, policy=policy, pacer=pacer, max_response_bytes=service.max_response_bytes
        ) as client,
    ):
        await client.probe(wait=service.connect_wait)
        yield client


def measure(prepared: PreparedJob, url: str, key: str, n: int) -> Measurement:
    """Ask `n` sample rows alone and packed on the service at `url`; keep the measurement."""

    async def run() -> Measurement:
        policy = prepared.config.retries.policy() if n else INTERACTIVE_POLICY
        async with paced_client(prepared, url, key, policy) as client:
            return await _measure(_Asker(client, prepared), prepared, n)

    measured = asyncio.run(run())
    kept = {**measured.figures(), "questions": prepared.questions_digest()}
    Learned.of(prepared).keep_measurement(kept, "packing measurement")
    return measured


def auto_choice(prepared: PreparedJob, url: str, warn: Any, started: float) -> PackingChoice:
    """`packing.rows: auto` at the start of a run with nothing kept for its questions: a
    measurement made now on `packing.sample_rows` rows (begun at `started`, monotonic), whose
    answers alone the run then writes."""
    n = prepared.config.packing.sample_rows
    measured = measure(prepared, url, api_key(prepared.config.service), n)
    if measured.rows == 1:
        warn(f"packing.rows is auto: {measured.reason}")
    figures = {k: v for k, v in measured.figures().items() if k not in ("rows", "reason")}
    cap = Learned.of(prepared).cap()
    return PackingChoice(
        measured.rows, measured.reason, figures, cap, tuple(measured.sampled), started,
        measured.usage,
    )  # fmt: skip
