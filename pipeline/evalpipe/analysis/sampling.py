"""Estimates for a whole corpus from a stratified random sample of it, with honest intervals.

`evalpipe estimate` scores a sample instead of the corpus; this module is its statistics, pure
functions of the sampled rows' answers and the strata's sizes (no file, no service), so a test
can draw thousands of samples from a corpus whose answers are all known and count how often the
intervals cover the truth (tests/test_sampling.py, bench/estimate_coverage.py).

What is estimated, per question (`variables`), over the rows that have an answer:
  noul    the share of yes (p(yes) >= 0.5) and the mean p(yes);
  choice  each option's share (the chosen option);
  score   the mean expected level, and each level's share (the most probable level).

How (Cochran, *Sampling Techniques*, ch. 5): a stratum h of N_h rows is sampled without
replacement, n_h rows answered; the corpus's figure is the stratified mean sum_h W_h ybar_h
(W_h = N_h / N), its variance sum_h W_h^2 (1 - n_h / N_h) s_h^2 / n_h with the finite population
correction (1 - n_h / N_h): a stratum scored whole adds no uncertainty. The interval:
  mean    stratified estimate +- t(df = n - strata) * standard error ("stratified");
  share   the same normal interval ("stratified") while the rarer outcome is expected at least
          `WALD_MIN` times in the effective sample; nearer 0 or 1, where that interval is too
          short (or empty: a sample of all yes has no spread), the Wilson score interval on the
          effective sample size n_eff = p (1 - p) / variance ("wilson", Kish's design effect:
          Korn & Graubard 1998), which stays inside [0, 1] and never shrinks to a point;
  every row of the stratum (or corpus) answered: the figure itself ("exact").
The per-stratum intervals hold together (Bonferroni, `strata_confidence`): of k of them, each is
at 1 - (1 - confidence) / k, so all k cover their strata's true values with the confidence asked
(a table scanned for the stratum that stands out would otherwise show one by chance); each
corpus-wide interval is at the confidence asked, and only those are held to the margin.

The margin is on a 0-1 scale: shares and p(yes) are held to it as they are, a mean level (from 0
to levels - 1) to the margin times (levels - 1), the same precision on its own scale.

Sequential design (`run_sequential`): a first round of proportional allocation, `PILOT` of the
size a share of one half would call for; then, from the spread each stratum shows, the Neyman
allocation (n_h in proportion to N_h s_h) that brings every corpus-wide interval within the
margin; another round when it is not reached; stop at the margin, `max_rows`, a budget, or when
every row is sampled.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import polars as pl

from evalpipe.analysis.read import Question

STRATUM = "_stratum"  # the sampled rows' stratum label, a column of the rows handed in
OVERALL = None  # the stratum of a corpus-wide estimate
WALD_MIN = 10.0  # expected count of the rarer outcome below which a share gets Wilson's interval
PILOT = 0.4  # the first round: this share of the sample a share of 0.5 would need
MIN_PER_STRATUM = 8  # the first round draws at least this many rows of each stratum
CUSHION = 0.98  # the rounds after the first aim at this share of the margin
MAX_ROUNDS = 12


@dataclass(frozen=True)
class Variable:
    """One figure estimated per question: a share or a mean of a per-row value."""

    question: str
    what: str  # "share yes", "mean p(yes)", "share 'positive'", "mean level", "share level 'good'"
    kind: str  # "share" or "mean"
    expr: pl.Expr  # the per-row value (null where the row has no answer)
    scale: float = 1.0  # the range of the value: 1, or levels - 1 for a mean level

    @property
    def name(self) -> str:
        return f"{self.question}\x00{self.what}"


def variables(questions: Sequence[Question]) -> list[Variable]:
    """The figures estimated for each question (the module docstring)."""
    out: list[Variable] = []
    for q in questions:
        head = pl.col(q.head)
        if q.kind == "noul":
            yes = (head >= 0.5).cast(pl.Float64)
            out += [Variable(q.key, "share yes", "share", yes)]
            out += [Variable(q.key, "mean p(yes)", "mean", head.cast(pl.Float64))]
        elif q.kind == "choice":
            for label in q.labels:
                chosen = pl.when(head.is_null()).then(None).otherwise(head == label)
                out.append(Variable(q.key, f"share '{label}'", "share", chosen.cast(pl.Float64)))
        else:
            top = max(1, len(q.labels) - 1)
            out.append(Variable(q.key, "mean level", "mean", head.cast(pl.Float64), float(top)))
            level = pl.concat_list([pl.col(c) for c in q.probs]).list.arg_max()
            for i, label in enumerate(q.labels):
                at = pl.when(head.is_null()).then(None).otherwise(level == i).cast(pl.Float64)
                out.append(Variable(q.key, f"share level '{label}'", "share", at))
    return out


@dataclass(frozen=True)
class Stratum:
    """One stratum's figures for one variable: its size and the sample's n, mean, variance."""

    size: int  # N_h: rows of the corpus in it
    n: int  # answered sample rows
    mean: float | None = None
    var: float | None = None  # sample variance (ddof 1); None below two rows


def stratum_stats(
    rows: pl.DataFrame, sizes: Mapping[str, int], found: Sequence[Variable]
) -> dict[str, dict[str, Stratum]]:
    """Per variable (by `Variable.name`), per stratum: the sample's n, mean and variance.
    `rows`: the answered sample rows with their `STRATUM`; a stratum with none has n = 0."""
    aggs = []
    for i, v in enumerate(found):
        aggs += [
            v.expr.count().alias(f"n{i}"),
            v.expr.mean().alias(f"m{i}"),
            v.expr.var(ddof=1).alias(f"v{i}"),
        ]
    grouped = {r[STRATUM]: r for r in rows.group_by(STRATUM).agg(aggs).iter_rows(named=True)}
    out: dict[str, dict[str, Stratum]] = {}
    for i, v in enumerate(found):
        per: dict[str, Stratum] = {}
        for label, size in sizes.items():
            r = grouped.get(label)
            if r is None:
                per[label] = Stratum(size, 0)
                continue
            n = int(r[f"n{i}"])
            per[label] = Stratum(size, n, r[f"m{i}"] if n else None, r[f"v{i}"] if n > 1 else None)
        out[v.name] = per
    return out


# --------------------------------------------------------------------------- intervals


@functools.cache
def z_value(confidence: float) -> float:
    from scipy.stats import norm  # here: scipy takes a second to import

    return float(norm.ppf(0.5 + confidence / 2))


@functools.cache
def _t_value(confidence: float, df: int) -> float:
    from scipy.stats import t

    return float(t.ppf(0.5 + confidence / 2, max(1, df)))


def wilson(p: float, n_eff: float, z: float) -> tuple[float, float]:
    """The Wilson score interval of a share `p` seen in an (effective) sample of `n_eff`."""
    z2 = z * z
    centre = (p + z2 / (2 * n_eff)) / (1 + z2 / n_eff)
    half = z / (1 + z2 / n_eff) * math.sqrt(p * (1 - p) / n_eff + z2 / (4 * n_eff * n_eff))
    return max(0.0, centre - half), min(1.0, centre + half)


@dataclass(frozen=True)
class Interval:
    estimate: float
    low: float
    high: float
    se: float  # the standard error of the estimate
    method: str  # "stratified", "wilson" or "exact"

    @property
    def half_width(self) -> float:
        return (self.high - self.low) / 2


def _variance(s: Stratum, scale: float) -> float:
    """The sample variance of a stratum; a stratum of one row (of several) gets the largest
    variance a value of this range can have, scale^2 / 4: unknown, so assumed the worst."""
    if s.var is not None:
        return float(s.var)
    return 0.0 if s.n >= s.size else scale * scale / 4


def interval(strata: Mapping[str, Stratum], kind: str, scale: float, confidence: float) -> Interval:
    """The stratified estimate over `strata` (one stratum: that stratum's own) and its
    interval (module docstring). Strata without an answered row are left out (the estimate
    is then of the strata that have one)."""
    present = [s for s in strata.values() if s.n > 0]
    total = sum(s.size for s in present)
    n = sum(s.n for s in present)
    estimate = sum(s.size / total * float(s.mean or 0.0) for s in present)
    variance = sum(
        (s.size / total) ** 2 * (1 - s.n / s.size) * _variance(s, scale) / s.n for s in present
    )
    se = math.sqrt(max(0.0, variance))
    if n >= total:
        return Interval(estimate, estimate, estimate, 0.0, "exact")
    if kind == "mean":
        half = _t_value(confidence, n - len(present)) * se
        return Interval(estimate, max(0.0, estimate - half), min(scale, estimate + half), se,
                        "stratified")  # fmt: skip
    return _share_interval(estimate, variance, n, total, confidence)


def _share_interval(p: float, variance: float, n: int, total: int, confidence: float) -> Interval:
    z = z_value(confidence)
    p = min(1.0, max(0.0, p))
    if variance > 0 and 0 < p < 1:
        n_eff = p * (1 - p) / variance
    else:  # no spread seen: the effective size of a simple random sample of n
        n_eff = max(1.0, n - 1.0) / (1 - n / total)
    se = math.sqrt(max(0.0, variance))
    if min(p, 1 - p) * n_eff >= WALD_MIN:
        return Interval(p, max(0.0, p - z * se), min(1.0, p + z * se), se, "stratified")
    low, high = wilson(p, n_eff, z)
    return Interval(p, low, high, se, "wilson")


# --------------------------------------------------------------------------- estimates


@dataclass
class Estimates:
    """Every figure of a sample, overall and per stratum (`rows`), and how far the widest
    corpus-wide interval is from the margin."""

    rows: list[dict[str, Any]]
    confidence: float
    sample_rows: int  # answered sample rows
    corpus_rows: int
    stats: dict[str, dict[str, Stratum]] = field(default_factory=dict)  # per variable, stratum

    def overall(self) -> list[dict[str, Any]]:
        return [r for r in self.rows if r["stratum"] is OVERALL]

    def precision(self) -> float:
        """The widest corpus-wide half-width, on the 0-1 scale (a mean level's divided by its
        levels - 1): what the margin is compared with."""
        widths = [r["half_width"] for r in self.overall()]
        if any(w is None for w in widths):
            return math.inf  # a figure without a single answered row
        return max((r["half_width"] / r["scale"] for r in self.overall()), default=0.0)


def estimate(
    rows: pl.DataFrame,
    sizes: Mapping[str, int],
    questions: Sequence[Question],
    confidence: float = 0.95,
) -> Estimates:
    """Every figure of `variables(questions)`, corpus-wide and per stratum, with its interval.
    `rows`: the answered sample rows (an answer column null where the row has none) with their
    `STRATUM` label; `sizes`: every stratum's rows in the corpus."""
    found = variables(questions)
    stats = stratum_stats(rows, sizes, found)
    each = strata_confidence(confidence, len(found) * len(sizes))
    out = []
    for v in found:
        per = stats[v.name]
        out.append(_row(v, OVERALL, per, confidence))
        if len(per) > 1:
            out += [_row(v, label, {label: s}, each) for label, s in per.items()]
    return Estimates(out, confidence, rows.height, sum(sizes.values()), stats)


def strata_confidence(confidence: float, intervals: int) -> float:
    """The confidence of each per-stratum interval. The per-stratum table is read by scanning
    it for the stratum that stands out, so its intervals hold together (Bonferroni): all of
    them cover their true values with `confidence`, each with 1 - (1 - confidence) / their
    number. (Each per-stratum interval alone is wider than a 95% one would be.)"""
    return 1 - (1 - confidence) / max(1, intervals)


def _row(
    v: Variable, stratum: str | None, strata: Mapping[str, Stratum], confidence: float
) -> dict[str, Any]:
    n = sum(s.n for s in strata.values())
    size = sum(s.size for s in strata.values())
    row: dict[str, Any] = {
        "question": v.question,
        "what": v.what,
        "kind": v.kind,
        "stratum": stratum,
        "rows": size,
        "n": n,
        "scale": v.scale,
        "confidence": confidence,
    }
    if n == 0:
        return {**row, "estimate": None, "low": None, "high": None, "half_width": None,
                "se": None, "method": None}  # fmt: skip
    found = interval(strata, v.kind, v.scale, confidence)
    return {**row, "estimate": found.estimate, "low": found.low, "high": found.high,
            "half_width": found.half_width, "se": found.se, "method": found.method}  # fmt: skip


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
    return max(math.sqrt(_variance(s, scale)), scale * 0.01)


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
