"""How big a stratified sample is, round by round, until its estimates meet the margin.

A first round of proportional allocation, `PILOT` of the size a share of one half would call
for (at least `MIN_PER_STRATUM` rows of each stratum); then, from the spread each stratum shows,
the Neyman allocation (n_h in proportion to N_h s_h, Cochran 5.5) that brings every corpus-wide
interval within the margin (per figure, the largest per stratum); another round when it is not
reached (planning is by the normal interval, the reported one may be Wilson's or Student's);
stop at the margin, `max_rows`, a budget, or when every row is sampled. Pure: the rows are
scored by a callback (`evalpipe.session`'s runs the job; the tests take them from known answers).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import polars as pl

from evalpipe.analysis.sampling import (
    Estimates,
    Stratum,
    Variable,
    estimate,
    variables,
    variance_of,
    z_value,
)
from evalpipe.reading import Question

PILOT = 0.4  # the first round: this share of the sample a share of 0.5 would need
MIN_PER_STRATUM = 8  # the first round draws at least this many rows of each stratum
CUSHION = 0.98  # the rounds after the first aim at this share of the margin
MAX_ROUNDS = 12


# --------------------------------------------------------------------------- allocation


def worst_case_size(total: int, margin: float, confidence: float) -> int:
    """The simple random sample a share of one half needs for `margin`, with the finite
    population correction: the most any share can need."""
    n0 = z_value(confidence) ** 2 * 0.25 / margin**2
    return min(total, math.ceil(n0 / (1 + (n0 - 1) / total)))


def first_round(sizes: Mapping[str, int], margin: float, confidence: float) -> dict[str, int]:
    """Proportional allocation of `PILOT` of the worst case, at least `MIN_PER_STRATUM` rows
    a stratum (or all of a smaller one)."""
    total = sum(sizes.values())
    planned = PILOT * worst_case_size(total, margin, confidence)
    return {
        h: min(size, max(MIN_PER_STRATUM, math.ceil(planned * size / total)))
        for h, size in sizes.items()
    }


def _spread(s: Stratum, kind: str, scale: float) -> float:
    """A stratum's standard deviation for planning: a share seen as 0 or 1 (no spread yet)
    is taken as (x + 0.5) / (n + 1), so a stratum is never planned as certain."""
    if s.n == 0:
        return scale / 2
    if kind == "share":
        p = (float(s.mean or 0.0) * s.n + 0.5) / (s.n + 1)
        return math.sqrt(p * (1 - p))
    return max(math.sqrt(variance_of(s, scale)), scale * 0.01)


def _neyman(
    strata: Mapping[str, Stratum], drawn: Mapping[str, int], spreads: Mapping[str, float],
    target: float,
) -> dict[str, int]:  # fmt: skip
    """The smallest Neyman allocation (n_h in proportion to N_h s_h, at least what is drawn, at
    most N_h) whose variance is at most `target`."""
    total = sum(s.size for s in strata.values())

    def allocation(scale: float) -> dict[str, int]:
        return {
            h: min(s.size, max(drawn[h], math.ceil(scale * s.size * spreads[h])))
            for h, s in strata.items()
        }

    def variance(alloc: Mapping[str, int]) -> float:
        return sum(
            (s.size / total) ** 2 * (1 - alloc[h] / s.size) * spreads[h] ** 2 / alloc[h]
            for h, s in strata.items()
            if alloc[h] > 0
        )

    low, high = 0.0, 1.0
    while variance(allocation(high)) > target and high < 1e12:
        high *= 2
    for _ in range(60):
        middle = (low + high) / 2
        if variance(allocation(middle)) > target:
            low = middle
        else:
            high = middle
    return allocation(high)


def next_round(
    stats: Mapping[str, Mapping[str, Stratum]],
    found: Sequence[Variable],
    drawn: Mapping[str, int],
    margin: float,
    confidence: float,
    aim: float = CUSHION,
) -> dict[str, int]:
    """The rows to have drawn per stratum so that every corpus-wide interval meets the margin:
    per variable the Neyman allocation for its spread, then the largest of them per stratum."""
    z = z_value(confidence)
    wanted = dict(drawn)
    for v in found:
        strata = stats[v.name]
        spreads = {h: _spread(s, v.kind, v.scale) for h, s in strata.items()}
        target = (aim * margin * v.scale / z) ** 2
        for h, n in _neyman(strata, drawn, spreads, target).items():
            wanted[h] = max(wanted[h], n)
    return wanted


def capped(
    sizes: Mapping[str, int], drawn: Mapping[str, int], wanted: Mapping[str, int], rows: int
) -> dict[str, int]:
    """`wanted`, cut to `rows` in all: each stratum's increase scaled down alike."""
    now, more = sum(drawn.values()), sum(wanted[h] - drawn[h] for h in sizes)
    if now + more <= rows:
        return dict(wanted)
    share = max(0, rows - now) / more if more else 0.0
    return {h: drawn[h] + math.floor((wanted[h] - drawn[h]) * share) for h in sizes}


# --------------------------------------------------------------------------- the rounds


Score = Callable[[Mapping[str, int]], pl.DataFrame]


@dataclass
class Sequential:
    """What the rounds did: the rows drawn per stratum, the last estimates, why it stopped."""

    drawn: dict[str, int]
    estimates: Estimates
    rounds: int
    stopped_by: str  # "margin", "max_rows", "max_cost", "corpus" (every row drawn) or "rounds"
    history: list[dict[str, Any]] = field(default_factory=list)

    @property
    def reached(self) -> bool:
        return self.stopped_by in ("margin", "corpus")


def run_sequential(
    sizes: Mapping[str, int],
    questions: Sequence[Question],
    score: Score,
    margin: float,
    confidence: float = 0.95,
    max_rows: int | None = None,
    affordable: Callable[[], int | None] = lambda: None,
    drawn: Mapping[str, int] | None = None,
) -> Sequential:
    """Draw rounds until every corpus-wide interval's half-width is at most `margin`.

    `score(drawn)` scores the first `drawn[h]` rows of each stratum's fixed random order (rows
    it scored before are not paid again) and returns every answered row drawn so far, with its
    `STRATUM`. `affordable()`: how many more rows the budget pays for (None: no budget).
    `drawn`: what an earlier estimate drew (its rounds go on from there)."""
    found = variables(questions)
    total = sum(sizes.values())
    cap = total if max_rows is None else min(total, max_rows)
    earlier = {h: min(sizes[h], (drawn or {}).get(h, 0)) for h in sizes}
    now = first_round(sizes, margin, confidence)
    if any(earlier.values()):  # go on from the earlier sample: first see what it says
        now = {h: earlier[h] or now[h] for h in sizes}
    history: list[dict[str, Any]] = []
    stopped, rounds = "rounds", 0
    while True:
        rows, stop = _limit(sizes, earlier, now, cap, affordable)
        rounds += 1
        result = estimate(score(rows), sizes, questions, confidence)
        history.append({"round": rounds, "drawn": sum(rows.values()),
                        "precision": result.precision()})  # fmt: skip
        earlier = rows
        if result.precision() <= margin:
            stopped = "margin"
        elif all(rows[h] >= sizes[h] for h in sizes):
            stopped = "corpus"
        elif stop is not None:
            stopped = stop
        elif rounds >= MAX_ROUNDS:
            stopped = "rounds"
        else:
            now = _grown(sizes, rows, found, result, margin, confidence)
            continue
        return Sequential(rows, result, rounds, stopped, history)


def _limit(
    sizes: Mapping[str, int],
    drawn: Mapping[str, int],
    wanted: Mapping[str, int],
    cap: int,
    affordable: Callable[[], int | None],
) -> tuple[dict[str, int], str | None]:
    """`wanted` within `max_rows` and the budget; and which of them cut it, if one did."""
    rows, stop = dict(wanted), None
    if sum(rows.values()) > cap:
        rows, stop = capped(sizes, drawn, rows, cap), "max_rows"
    budget = affordable()
    if budget is not None and sum(rows[h] - drawn[h] for h in sizes) > budget:
        rows = capped(sizes, drawn, rows, sum(drawn.values()) + budget)
        stop = "max_cost"
    return rows, stop


def _grown(
    sizes: Mapping[str, int],
    drawn: Mapping[str, int],
    found: Sequence[Variable],
    result: Estimates,
    margin: float,
    confidence: float,
) -> dict[str, int]:
    """The next round's allocation; at least a few rows more than now (the planning is by the
    normal interval, which can be narrower than the Wilson or t interval reported)."""
    stats = result.stats
    step = max(len(sizes), math.ceil(0.02 * sum(drawn.values())))
    aim = CUSHION
    for _ in range(20):
        wanted = next_round(stats, found, drawn, margin, confidence, aim)
        if sum(wanted.values()) >= sum(drawn.values()) + step:
            return wanted
        aim *= 0.9
    return wanted
