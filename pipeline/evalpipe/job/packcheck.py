"""How many rows a run packs into one request, and what it measured before it decided.

`packing.rows: N` packs up to N rows a request (`evalpipe.planning.packing`), within the limits;
`auto` decides from a measurement (`evalpipe.job.packmeasure`: a sample of the corpus asked
alone and packed) kept per service and model like the token ratio, so `plan` shows what `run`
will do. The most questions per request the service accepts, learned from its 422s, is kept the
same way.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from evalpipe.config import JobConfig
from evalpipe.job.prepared import PreparedJob
from evalpipe.planning import (
    Packer,
    Price,
    Request,
    field_prefix,
    keep_packing,
    known_packing,
    minimum_seconds,
)


@dataclass
class PackingChoice:
    """Rows per request for a run, and the figures behind it (for the summary and manifest)."""

    rows: int
    reason: str
    figures: dict[str, Any] = field(default_factory=dict)
    max_questions: int | None = None

    def shown(self) -> dict[str, Any]:
        shown: dict[str, Any] = {"rows": self.rows, "reason": self.reason}
        if self.max_questions is not None:
            shown["max_questions_per_request"] = self.max_questions
        return {**shown, **self.figures}


def packer(prepared: PreparedJob, rows: int, max_questions: int | None) -> Packer:
    return Packer(
        prepared.planner.question_tokens, field_prefix(prepared.questions), rows, max_questions
    )


def fixed_choice(config: JobConfig) -> PackingChoice:
    """The choice for `packing.rows` 1 or N (no measurement needed), with the kept cap."""
    rows = config.packing.rows
    assert isinstance(rows, int)
    known = known_packing(config.service.identity, config.model)
    cap = known.max_questions if known is not None else None
    reason = "packing.rows is 1" if rows == 1 else f"packing.rows is {rows}"
    return PackingChoice(rows, reason, max_questions=cap)


def keep_learned(config: JobConfig, learned: Packer | None, run_id: str) -> None:
    """The most questions per request the run learned, kept for the next plan and run."""
    if learned is None or learned.max_questions is None:
        return
    known = known_packing(config.service.identity, config.model)
    if known is not None and known.max_questions == learned.max_questions:
        return
    keep_packing(
        config.service.identity,
        config.model,
        f"run {run_id}",
        max_questions=learned.max_questions,
    )


def choose_packing(prepared: PreparedJob, url: Any, log: Any) -> tuple[PackingChoice, list[Any]]:
    """The run's rows per request: `packing.rows` as it is, or for `auto` the measurement;
    with the sample rows the measurement asked alone (`packmeasure.Sampled`), if it did."""
    if prepared.config.packing.rows == "auto":
        from evalpipe.job.packmeasure import auto_choice

        return auto_choice(prepared, url.result(), log)
    return fixed_choice(prepared.config), []


def planned_packing(prepared: PreparedJob) -> PackingChoice:
    """What the run will pack, as far as `plan` can know without sending: N, or for `auto`
    the kept measurement of these questions (else: alone, until a run or `plan --calibrate`
    measures)."""
    if prepared.config.packing.rows != "auto":
        return fixed_choice(prepared.config)
    from evalpipe.job.packmeasure import kept_choice

    kept = kept_choice(prepared)
    if kept is not None:
        return kept
    n = prepared.config.packing.sample_rows
    return PackingChoice(
        1,
        f"auto, not measured yet: the run first asks {n} rows alone and packed "
        "(plan --calibrate N measures now)",
    )


class Packs:
    """The plan's count of requests and tokens, packed as the run will pack and alone."""

    def __init__(self, prepared: PreparedJob, choice: PackingChoice) -> None:
        self.choice = choice
        self.packer = packer(prepared, choice.rows, choice.max_questions)
        self.packer.scale = prepared.planner.scale
        self.rows = self.requests = self.tokens = 0
        self.alone_requests = self.alone_tokens = 0

    def alone(self, requests: tuple[Request, ...]) -> None:
        self.rows += 1
        self.requests += len(requests)
        self.tokens += sum(r.tokens for r in requests)
        self.alone_requests += len(requests)
        self.alone_tokens += sum(r.tokens for r in requests)

    def add(self, singles: list[Request]) -> None:
        self.rows += len(singles)
        self.alone_requests += len(singles)
        self.alone_tokens += sum(r.tokens for r in singles)
        if self.choice.rows == 1:
            self.requests += len(singles)
            self.tokens += sum(r.tokens for r in singles)
            return
        for plan in self.packer.groups(singles):
            self.requests += 1
            self.tokens += plan.tokens if len(plan.members) > 1 else singles[plan.members[0]].tokens

    def figures(self, ratio: float | None, price: Price, rpm: float, tps: float) -> dict[str, Any]:
        def way(requests: int, tokens: int) -> dict[str, Any]:
            billed = round(tokens * ratio) if ratio is not None else tokens
            return {
                "requests": requests,
                "rows_per_request": self.rows / requests if requests else 0.0,
                "input_tokens": billed,
                "cost_usd": price.cost(billed),
                "minimum_seconds": round(minimum_seconds(requests, billed, rpm, tps), 1),
            }

        return {
            **self.choice.shown(),
            "packed": way(self.requests, self.tokens),
            "alone": way(self.alone_requests, self.alone_tokens),
        }
