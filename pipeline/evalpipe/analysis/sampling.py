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

The rounds that draw the sample until the margin is met are `evalpipe.analysis.rounds`'.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from statistics import NormalDist
from typing import Any

import polars as pl

from evalpipe.reading import Question

STRATUM = "_stratum"  # the sampled rows' stratum label, a column of the rows handed in
OVERALL = None  # the stratum of a corpus-wide estimate
WALD_MIN = 10.0  # expected count of the rarer outcome below which a share gets Wilson's interval


@dataclass(frozen=True)
class Variable:
    """One figure estimated per question: a share or a mean of a per-row value."""

    question: str
    what: str  # "share yes", "mean p(yes)", "share 'positive'", "mean level", "share level 'good'"
    kind: str  # "share" or "mean"
    expr: pl.Expr  # the per-row value (null where the row has no answer)
    scale: float = 1.0  # the range of the value: 1, or levels - 1 for a mean level
    of: str = ""  # what is counted or averaged: "yes", an option, a level's label, "p(yes)"...

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
            out += [Variable(q.key, "share yes", "share", yes, of="yes")]
            out += [Variable(q.key, "mean p(yes)", "mean", head.cast(pl.Float64), of="p(yes)")]
        elif q.kind == "choice":
            for label in q.labels:
                chosen = pl.when(head.is_null()).then(None).otherwise(head == label)
                share = chosen.cast(pl.Float64)
                out.append(Variable(q.key, f"share '{label}'", "share", share, of=label))
        else:
            top = float(max(1, len(q.labels) - 1))
            mean = head.cast(pl.Float64)
            out.append(Variable(q.key, "mean level", "mean", mean, top, of="level"))
            level = pl.concat_list([pl.col(c) for c in q.prob_columns]).list.arg_max()
            for i, label in enumerate(q.labels):
                at = pl.when(head.is_null()).then(None).otherwise(level == i).cast(pl.Float64)
                out.append(Variable(q.key, f"share level '{label}'", "share", at, of=label))
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
    # The standard library's inverse normal (Wichura's AS241: scipy's to a few ulps), not
    # scipy's, whose import (1-9 s) was the packing measurement's last step before the run.
    return NormalDist().inv_cdf(0.5 + confidence / 2)


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


def share_interval(k: int, n: int, confidence: float) -> tuple[float, float]:
    """The Wilson score interval of `k` successes in `n` trials (n > 0)."""
    return wilson(k / n, n, z_value(confidence))


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


def variance_of(s: Stratum, scale: float) -> float:
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
        (s.size / total) ** 2 * (1 - s.n / s.size) * variance_of(s, scale) / s.n for s in present
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
        "of": v.of,
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


def sampled_changes(a: Mapping[str, Any], b: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The change of each estimate two samples share (`_sample.json`'s `estimates`, by
    question, figure and stratum), B minus A, with its interval at A's confidence: the normal
    interval of the difference of two independent estimates, sqrt(se_a^2 + se_b^2)."""
    z = z_value(float(a.get("confidence", 0.95)))
    theirs = {(r["question"], r["what"], r["stratum"]): r for r in b["estimates"]}
    out = []
    for r in a["estimates"]:
        other = theirs.get((r["question"], r["what"], r["stratum"]))
        if other is None or r["estimate"] is None or other["estimate"] is None:
            continue
        change = other["estimate"] - r["estimate"]
        se = math.sqrt((r["se"] or 0.0) ** 2 + (other["se"] or 0.0) ** 2)
        out.append({"question": r["question"], "what": r["what"], "stratum": r["stratum"],
                    "a": r["estimate"], "b": other["estimate"], "change": change,
                    "low": change - z * se, "high": change + z * se})  # fmt: skip
    return out
