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
from evalpipe.planning import Packer, field_prefix, keep_packing, known_packing


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
