"""How many rows a run packs into one request: chosen before the run, shown by `plan`.

`packing.rows: N` packs up to N rows a request (`evalpipe.planning.packing`), within the limits;
`auto` decides from a measurement (`evalpipe.preflight.measure`: a sample of the corpus asked
alone and packed) kept per service and model like the token ratio, so `plan` shows what `run`
will do. The run's engine is handed the choice as a value (`evalpipe.planning.PackingChoice`).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

from evalpipe.planning import (
    PackingChoice,
    PreparedJob,
    Price,
    Request,
    minimum_seconds,
)
from evalpipe.preflight.measure import Measurement, auto_choice, measure
from evalpipe.send import api_key, service_url


def _unsaid(message: str) -> None:
    """Where `plan` sends the warnings of a measurement it never makes."""


def choose_packing(
    prepared: PreparedJob, url: Future[str] | None = None, warn: Callable[[str], None] = _unsaid
) -> PackingChoice:
    """Rows per request: `packing.rows` N as it is; for `auto`, the kept measurement of these
    questions, else one made now on the service at `url` (once it answered; `warn` says why
    rows go alone), or without a `url` (`plan`, which sends nothing) alone until a run or
    `plan --calibrate N` measures."""
    if not _measured(prepared):
        return PackingChoice.fixed(prepared)
    kept = PackingChoice.kept(prepared)
    if kept is not None:
        return kept
    if url is not None:
        return auto_choice(prepared, url.result(), warn, time.monotonic())
    n = prepared.config.packing.sample_rows
    return PackingChoice(
        1,
        f"auto, not measured yet: the run first asks {n} rows alone and packed "
        "(plan --calibrate N measures now)",
    )


def calibrate_packing(prepared: PreparedJob, n: int) -> Measurement | None:
    """`plan --calibrate N`: with `packing.rows: auto`, measure on N rows now, and keep it;
    None for a fixed `packing.rows` (nothing to measure)."""
    if not _measured(prepared):
        return None
    service = prepared.config.service
    key = api_key(service)
    with service_url(service, prepared.config.limits, key) as url:
        return measure(prepared, url, key, n)


def _measured(prepared: PreparedJob) -> bool:
    """Whether the rows per request are measured (`packing.rows: auto`), not given."""
    return prepared.config.packing.rows == "auto"


class Packs:
    """The plan's count of requests and tokens, packed as the run will pack and alone, and
    what a row costs each way: what a packed row adds is its field's name and the JSON around
    it, and the pointer in each of its questions (`evalpipe.planning.packing`), as a kept
    measurement found it by the service's count, else by evalpipe's."""

    def __init__(self, prepared: PreparedJob, choice: PackingChoice) -> None:
        self.choice = choice
        self.packer = choice.packer(prepared)
        self._priced = choice.packer(prepared, max(2, choice.rows))  # a row's part of a pack
        self.rows = self.requests = self.tokens = 0
        self.alone_requests = self.alone_tokens = 0
        self.packable = self.added = 0  # rows of one request, and what packing them adds
        self.in_packs = 0  # rows the run packs with others

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
        self.packable += len(singles)
        self.added += sum(self._priced.one([r, r]).shares[1] - r.tokens for r in singles)
        if self.choice.rows == 1:
            self.requests += len(singles)
            self.tokens += sum(r.tokens for r in singles)
            return
        for plan in self.packer.groups(singles):
            self.requests += 1
            packed = len(plan.members) > 1
            self.in_packs += len(plan.members) if packed else 0
            self.tokens += plan.tokens if packed else singles[plan.members[0]].tokens

    def per_row(self, scale: float) -> dict[str, Any]:
        """Tokens a row alone and packed, and what packing adds to a row (by the service's
        count as measured, or by evalpipe's times `scale`, the kept token ratio)."""
        if not self.rows:
            return {}
        alone = self.alone_tokens * scale / self.rows
        measured = self.choice.figures.get("tokens_per_row") or {}
        if "alone" in measured and "packed" in measured:
            added = float(measured["packed"]) - float(measured["alone"])
            rows = self.choice.figures.get("sample_rows")
            counted = f"the service's count, measured on {rows} rows"
        else:
            added = self.added * scale / self.packable if self.packable else 0.0
            counted = "evalpipe's count" + (" with the token ratio" if scale != 1.0 else "")
        return {
            "alone": round(alone, 1),
            "packed": round(alone + added, 1),
            "added": round(added, 1),
            "ratio": round((alone + added) / alone, 3) if alone else None,
            "counted_by": counted,
        }

    def figures(self, ratio: float | None, price: Price, rpm: float, tps: float) -> dict[str, Any]:
        scale = ratio if ratio is not None else 1.0
        per_row = self.per_row(scale)
        packed = round(self.tokens * scale)
        if per_row.get("counted_by", "").startswith("the service's"):
            packed = round(self.alone_tokens * scale + self.in_packs * per_row["added"])

        def way(requests: int, billed: int) -> dict[str, Any]:
            seconds = minimum_seconds(requests, billed, rpm, tps)
            tokens_bind = billed / tps >= requests / (rpm / 60)
            return {
                "requests": requests,
                "rows_per_request": self.rows / requests if requests else 0.0,
                "input_tokens": billed,
                "cost_usd": price.cost(billed),
                "minimum_seconds": round(seconds, 1),
                "binding_limit": "tokens_per_second" if tokens_bind else "requests_per_minute",
            }

        return {
            **self.choice.shown(),
            "per_row": per_row,
            "packed": way(self.requests, packed),
            "alone": way(self.alone_requests, round(self.alone_tokens * scale)),
        }
