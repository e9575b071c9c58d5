"""How far answers given in a pack agree with the same rows' answers given alone.

Per question, what a user acts on (noul: p >= 0.5; choice: the option; score: the most probable
level) agrees or not, row by row; the share that agrees gets a 95% Wilson interval
(`evalpipe.analysis.share_interval`), and the mean absolute change of p, of the chosen option's
probability or of the score says how far the rest moved. `packing.rows: auto` packs only where
every question's lower bound reaches `packing.min_agreement` (`evalpipe.preflight.measure`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from evalpipe.analysis import share_interval

CONFIDENCE = 0.95


@dataclass
class Agreement:
    """One question's agreement, packed against alone."""

    question: str
    agree: int
    rows: int
    low: float
    high: float
    mean_abs_change: float

    def shown(self) -> dict[str, Any]:
        return {
            "question": self.question,
            "agreement": round(self.agree / self.rows, 4) if self.rows else None,
            "agree": self.agree,
            "rows": self.rows,
            "interval_95": [round(self.low, 4), round(self.high, 4)],
            "mean_abs_change": round(self.mean_abs_change, 6),
        }


def decision(answer: Mapping[str, Any]) -> Any:
    """What a user acts on: yes/no, the option, the most probable level."""
    kind = answer.get("type")
    if kind == "noul" or "noul" in answer:
        return answer["noul"] >= 0.5
    if "choice" in answer:
        return answer["choice"]
    probabilities = answer["probabilities"]
    return max(probabilities, key=probabilities.__getitem__)


def change(alone: Mapping[str, Any], packed: Mapping[str, Any]) -> float:
    """How far the packed answer moved: p, the alone option's probability, or the score."""
    if "noul" in alone:
        return abs(float(alone["noul"]) - float(packed["noul"]))
    if "choice" in alone:
        option = alone["choice"]
        return abs(alone["probabilities"][option] - packed["probabilities"][option])
    return abs(float(alone["score"]) - float(packed["score"]))


def agreements(
    keys: list[str], alone: list[Mapping[str, Any]], packed: list[Mapping[str, Any]]
) -> list[Agreement]:
    found = []
    for key in keys:
        pairs = [(a[key], p[key]) for a, p in zip(alone, packed, strict=True) if key in p]
        agree = sum(decision(a) == decision(p) for a, p in pairs)
        low, high = share_interval(agree, len(pairs), CONFIDENCE) if pairs else (0.0, 0.0)
        moved = sum(change(a, p) for a, p in pairs) / len(pairs) if pairs else 0.0
        found.append(Agreement(key, agree, len(pairs), low, high, moved))
    return found
