"""Which rows people should label: a sample of an output drawn by a design whose inclusion
probabilities are known, so that the prediction-powered estimate (`evalpipe.analysis.ppi`)
made from those labels stays unbiased.

Designs (`draw_label_sample`):
  uniform     a simple random sample of n rows without replacement: each row's inclusion
              probability is n / N.
  stratified  the rows sorted by the judge's probability for the question (noul: p(yes);
              choice: p of its first option; score: the expected level) and cut into H strata of
              equal size (H = n // 30, between 1 and 10), a simple random sample of n_h rows
              drawn in each: inclusion probability n_h / N_h. The allocation is what is known
              before any label: half proportional (n N_h / N), half Neyman's (n N_h S_h /
              sum N S) with S_h the judge's own spread, sqrt of the stratum's mean 1 - sum_k
              p_k^2 (for a yes/no question 2 p (1 - p)); at least 2 rows a stratum. The half
              kept proportional bounds what a miscalibrated judge's wrong idea of its own
              spread can cost: no stratum is sampled at less than half its share.
  uncertain   the n rows the judge is least sure of (largest 1 - sum_k p_k^2, ties in a seeded
              random order): labels for a calibration or a reviewer's attention, no sample for
              an estimate (`_inclusion_prob` is null, and the estimate leaves these out).

Rows the judge did not answer have no probability and are never drawn. The rows are put in id
order before any draw, so the same output, design and seed give the same sample however its
parts are laid out. What comes back is the id column and `_design`, `_inclusion_prob`,
`_stratum`: the columns a labels file carries with each label (`evalpipe.analysis.labels`).
"""

from __future__ import annotations

import numpy as np
import polars as pl

from evalpipe.errors import InputError
from evalpipe.reading import Question

DESIGNS = ("uniform", "stratified", "uncertain")
DESIGN, INCLUSION, STRATUM = "_design", "_inclusion_prob", "_stratum"
ROWS_PER_STRATUM = 30  # H = n // 30: enough rows a stratum for its variance
MAX_STRATA = 10
MIN_PER_STRATUM = 2  # a stratum's variance needs two rows


def judge_columns(question: Question) -> list[str]:
    """The columns the designs read: the probabilities (noul: p(yes)), and the head."""
    if question.kind == "noul":
        return [question.head]
    return [question.head, *question.prob_columns]


def _probabilities(question: Question, frame: pl.DataFrame) -> np.ndarray:
    """Per row, the judge's probability of each answer (rows x levels)."""
    if question.kind == "noul":
        p = frame[question.head].to_numpy().astype(np.float64)
        return np.column_stack([p, 1.0 - p])
    return frame.select(question.prob_columns).to_numpy().astype(np.float64)


def _order_by(question: Question, frame: pl.DataFrame, probs: np.ndarray) -> np.ndarray:
    """What the strata are cut along (module docstring)."""
    if question.kind == "score":
        return frame[question.head].to_numpy().astype(np.float64)
    return probs[:, 0]


def draw_label_sample(
    rows: pl.LazyFrame | pl.DataFrame,
    *,
    id_column: str,
    question: Question,
    n: int,
    design: str,
    seed: int | None = None,
) -> pl.DataFrame:
    """`n` rows of `rows` (an output's) to label for `question`, drawn by `design` (module
    docstring): the id column, `_design`, `_inclusion_prob` (null for "uncertain") and
    `_stratum` (null but for "stratified"), in id order."""
    if design not in DESIGNS:
        raise InputError(f"design '{design}' is none of {', '.join(DESIGNS)}")
    if n < 1:
        raise InputError(f"n must be at least 1 (got {n})")
    wanted = [id_column, *judge_columns(question)]
    lazy = rows.lazy() if isinstance(rows, pl.DataFrame) else rows
    missing = [c for c in wanted if c not in lazy.collect_schema().names()]
    if missing:
        raise InputError(f"question '{question.key}': the rows have no column '{missing[0]}'")
    frame = (
        lazy.select(wanted).filter(pl.col(question.head).is_not_null()).sort(id_column).collect()
    )
    rng = np.random.default_rng(seed)
    probs = _probabilities(question, frame)
    total = frame.height
    if design == "uniform":
        chosen = rng.permutation(total)[: min(n, total)]
        stratum = np.full(total, -1)
        pi = np.full(total, min(n, total) / max(total, 1))
    elif design == "stratified":
        chosen, stratum, pi = _stratified(_order_by(question, frame, probs), probs, n, rng)
    else:
        spread = 1.0 - np.sum(probs * probs, axis=1)
        order = np.lexsort((rng.random(total), -spread))
        chosen, stratum, pi = order[: min(n, total)], np.full(total, -1), np.full(total, np.nan)
    chosen = np.sort(chosen)
    return pl.DataFrame(
        {
            id_column: frame[id_column].gather(chosen),
            DESIGN: pl.Series([design] * len(chosen), dtype=pl.String),
            INCLUSION: pl.Series(pi[chosen], dtype=pl.Float64, nan_to_null=True),
            STRATUM: pl.Series(stratum[chosen], dtype=pl.Int64).replace(-1, None),
        }
    )


def _stratified(
    along: np.ndarray, probs: np.ndarray, n: int, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The chosen rows, each row's stratum and each row's inclusion probability."""
    total = len(along)
    strata = max(1, min(MAX_STRATA, n // ROWS_PER_STRATUM, total // MIN_PER_STRATUM))
    ranks = np.empty(total, dtype=np.int64)
    ranks[np.lexsort((rng.random(total), along))] = np.arange(total)
    stratum = ranks * strata // max(total, 1)
    sizes = np.bincount(stratum, minlength=strata)
    spread = 1.0 - np.sum(probs * probs, axis=1)
    mean_spread = np.bincount(stratum, weights=spread, minlength=strata) / np.maximum(sizes, 1)
    takes = allocation(sizes, np.sqrt(np.maximum(mean_spread, 0.0)), min(n, total))
    chosen = [
        rng.choice(np.flatnonzero(stratum == h), size=int(takes[h]), replace=False)
        for h in range(strata)
    ]
    pi = (takes / np.maximum(sizes, 1))[stratum]
    return np.concatenate(chosen), stratum, pi


def allocation(sizes: np.ndarray, spreads: np.ndarray, n: int) -> np.ndarray:
    """Rows per stratum summing to `n` (<= the strata's rows): half proportional to the
    sizes, half to sizes x spreads (Neyman), at least `MIN_PER_STRATUM` (or the whole
    stratum), never more than the stratum, rounded by largest remainder."""
    sizes = sizes.astype(np.float64)
    weight = sizes * spreads
    neyman = weight / weight.sum() if weight.sum() > 0 else sizes / sizes.sum()
    share = 0.5 * sizes / sizes.sum() + 0.5 * neyman
    floor = np.minimum(sizes, MIN_PER_STRATUM)
    takes = np.maximum(floor, np.minimum(sizes, np.floor(share * n)))
    while takes.sum() > n:  # the floors took more than the rounding left: trim the largest
        takes[np.argmax(takes - floor)] -= 1
    while takes.sum() < n:  # largest remainder first, into strata that have rows left
        room = takes < sizes
        gap = np.where(room, share * n - takes, -np.inf)
        takes[np.argmax(gap)] += 1
    return takes.astype(np.int64)
