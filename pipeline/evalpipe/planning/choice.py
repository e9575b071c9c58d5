"""How many rows a run packs into one request, as a value the engine is handed.

`packing.rows: N` packs up to N rows a request; `auto` decides from a measurement made before the
run (`evalpipe.preflight`), kept per service and model (`evalpipe.planning.learned`) with a digest
of the questions it was made with. Either way the run's engine receives a `PackingChoice` and
nothing of how it was made: the rows per request, the most questions a request may hold, the
figures for the summary, and the sample rows the measurement asked alone (`Sampled`: the run
writes their answers as they are, never sending them again).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from evalpipe.planning.learned import Learned
from evalpipe.planning.packing import Packer
from evalpipe.planning.prepared import PreparedJob
from evalpipe.planning.requests import Request


@dataclass(frozen=True)
class Sampled:
    """A sample row the packing measurement asked alone: its state, its one request, and what
    it got."""

    state: Any
    request: Request
    answers: dict[str, Any]
    model: str
    billed: int
    attempts: int
    rate_limited: int


@dataclass(frozen=True)
class Answered:
    """Requests the service answered: how many, the rows they held, their input tokens by
    evalpipe's count, and as billed (`usage.input_tokens`)."""

    requests: int
    rows: int
    estimated: int
    billed: int

    def __add__(self, other: Answered) -> Answered:
        return Answered(
            self.requests + other.requests, self.rows + other.rows,
            self.estimated + other.estimated, self.billed + other.billed,
        )  # fmt: skip

    def shown(self) -> dict[str, int]:
        return {"requests": self.requests, "rows": self.rows, "estimated_tokens": self.estimated,
                "billed_tokens": self.billed}  # fmt: skip

    @classmethod
    def read(cls, shown: Any) -> Answered | None:
        """A usage as `shown` gives it (from a kept measurement), None if it is not one."""
        names = ("requests", "rows", "estimated_tokens", "billed_tokens")
        if not isinstance(shown, dict) or not all(isinstance(shown.get(n), int) for n in names):
            return None
        return cls(*(shown[n] for n in names))


@dataclass(frozen=True)
class PackingChoice:
    """Rows per request for a run, and the figures behind it (for the summary and manifest).

    `sampled`: the rows a measurement made for this run asked alone, and `measured_from` when
    it began (`time.monotonic()`: its requests count in the run's rates). `usage`: what the
    measurement's requests like the run's (its packs at `rows`, or its rows alone) cost, by
    evalpipe's count and as billed: the run paces by their ratio from its first request, and
    sends its packs without a first one alone to learn the service's cap (it took these)."""

    rows: int
    reason: str
    figures: dict[str, Any] = field(default_factory=dict)
    max_questions: int | None = None
    sampled: tuple[Sampled, ...] = ()
    measured_from: float | None = None
    usage: Answered | None = None

    @classmethod
    def fixed(cls, prepared: PreparedJob) -> PackingChoice:
        """The choice for `packing.rows` 1 or N (no measurement needed), with the kept cap."""
        rows = prepared.config.packing.rows
        assert isinstance(rows, int), "auto is chosen by a measurement (evalpipe.preflight)"
        reason = "packing.rows is 1" if rows == 1 else f"packing.rows is {rows}"
        return cls(rows, reason, max_questions=Learned.of(prepared).cap())

    @classmethod
    def kept(cls, prepared: PreparedJob) -> PackingChoice | None:
        """The choice a kept measurement of these questions makes, if there is one."""
        known = Learned.of(prepared).packing()
        if known is None or known.measurement is None:
            return None
        kept = known.measurement
        rows = kept.get("rows")
        if kept.get("questions") != prepared.questions_digest():
            return None
        if not isinstance(rows, int) or rows < 1:
            return None
        figures = {k: v for k, v in kept.items() if k not in ("rows", "reason", "questions")}
        figures["measured_at"] = known.measured_at
        usage = Answered.read(kept.get("usage"))
        return cls(rows, str(kept.get("reason", "")), figures, known.max_questions, usage=usage)

    @property
    def proven(self) -> bool:
        """Packs of `rows` rows were answered (measured): the run need not send its first
        pack alone to learn whether the service takes that many questions."""
        return self.rows > 1 and self.usage is not None and self.usage.requests > 0

    def shown(self) -> dict[str, Any]:
        shown: dict[str, Any] = {"rows": self.rows, "reason": self.reason}
        if self.max_questions is not None:
            shown["max_questions_per_request"] = self.max_questions
        return {**shown, **self.figures}

    def packer(self, prepared: PreparedJob, rows: int | None = None) -> Packer:
        """The packer for `prepared`'s questions at `rows` (else the chosen rows) a request,
        planning by the planner's scale as it is now."""
        return Packer.of(prepared, self.rows if rows is None else rows, self.max_questions)

    def measurement_tokens(self) -> int:
        """What the measurement's packed requests were billed (its alone ones are the rows')."""
        if not self.sampled:
            return 0
        billed = int(self.figures.get("measurement_billed_tokens", 0))
        return billed - sum(s.billed for s in self.sampled)
