"""Which rows a calibrated judge keeps: a threshold on its calibrated confidence, chosen on
labelled rows, with a finite-sample promise of agreement with people on the rows it keeps.

The method is Learn then Test (Angelopoulos, Bates et al. 2021) as "Trust or Escalate" (Jung et
al. 2024) applies it to an LLM judge. Each candidate threshold t (every distinct held-out
calibrated confidence of the labelled rows, strictest first) is a hypothesis "agreement on the
rows kept at t is below the target"; its p-value is the exact binomial tail of the
disagreements among the k rows kept (Clopper-Pearson: the agreement's lower bound at
`confidence` reaches the target exactly when p <= 1 - confidence). Fixed-sequence testing tests
them in that order, each at 1 - confidence, and stops at the first it cannot reject; the loosest
threshold rejected is chosen. The order is fixed by the scores alone, before any label is
looked at, so the family-wise error is at most 1 - confidence: over label sets drawn like these,
agreement on the kept rows reaches the target in at least `confidence` of them. Thresholds that
keep fewer rows than could ever pass (zero errors in k rows still bounded below the target) are
not tested: they would stop the sequence before it starts. tests/test_judge.py and
bench/trust_judge.py count how often the promise holds over many label sets.

When no threshold passes, `labels_needed` estimates how many labelled rows would: the error
rate seen among the surest rows (Laplace-smoothed), held at the same share of rows, with the
same test; none when even the surest rows agree less than the target.

The scores must not have been fitted on the labels they are tested with: `evalpipe calibrate`
stores each labelled row's calibrated confidence from the fold it was left out of.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

MIN_ROWS_FOR_RATE = 10  # kept rows below which an error rate says too little to extrapolate
MAX_LABELS = 1_000_000  # labels_needed looks no further


def clopper_pearson(k: int, n: int, confidence: float) -> tuple[float, float]:
    """One-sided Clopper-Pearson bounds of a share of `k` in `n`: each holds with `confidence`
    on its own (the lower bound is below the true share with that confidence, and so is the
    upper one above it). (0, 1) for no rows."""
    from scipy.stats import beta  # here: scipy takes a second to import

    if n <= 0:
        return 0.0, 1.0
    low = 0.0 if k <= 0 else float(beta.ppf(1 - confidence, k, n - k + 1))
    high = 1.0 if k >= n else float(beta.ppf(confidence, k + 1, n - k))
    return low, high


def upper_errors(errors: np.ndarray, rows: np.ndarray, confidence: float) -> np.ndarray:
    """The one-sided upper bounds of disagreement rates at `confidence`, all at once."""
    from scipy.stats import beta

    errors, rows = np.asarray(errors, dtype=float), np.asarray(rows, dtype=float)
    safe = np.maximum(rows - errors, 1.0)
    bound = beta.ppf(confidence, errors + 1, safe)
    return np.asarray(np.where(errors >= rows, 1.0, bound))


def _curve(scores: Sequence[float], agreed: Sequence[int]) -> tuple[np.ndarray, ...]:
    """(threshold, rows kept, disagreements among them) per distinct score, strictest first."""
    s = np.asarray(scores, dtype=float)
    a = np.asarray(agreed, dtype=int)
    order = np.argsort(-s, kind="stable")
    s, wrong = s[order], np.cumsum(1 - a[order])
    last = np.r_[np.nonzero(np.diff(s))[0], len(s) - 1].astype(int) if len(s) else np.zeros(0, int)
    return s[last], last + 1, wrong[last]


def choose_threshold(
    scores: Sequence[float], agreed: Sequence[int], target: float, confidence: float
) -> dict[str, Any]:
    """The threshold for `target` at `confidence` (module docstring), as the fields of
    `evalpipe.output`'s Abstention: threshold (None: none passes), bound, kept, rows, and
    labels_needed when none passes."""
    rows = len(scores)
    fewest = math.ceil(math.log(1 - confidence) / math.log(target))  # zero errors, then pass
    thresholds, kept, wrong = _curve(scores, agreed)
    tested = kept >= fewest
    thresholds, kept, wrong = thresholds[tested], kept[tested], wrong[tested]
    passes = upper_errors(wrong, kept, confidence) <= 1 - target
    reached = int(np.argmin(passes)) if not passes.all() else len(passes)  # the first failure
    figures: dict[str, Any] = {"target": target, "confidence": confidence, "rows": rows}
    if reached == 0:
        needed = labels_needed(scores, agreed, target, confidence)
        return {**figures, "threshold": None, "bound": None, "kept": 0, "labels_needed": needed}
    at = reached - 1
    bound = 1 - float(upper_errors(wrong[at : at + 1], kept[at : at + 1], confidence)[0])
    return {**figures, "threshold": float(thresholds[at]), "bound": round(bound, 6),
            "kept": int(kept[at])}  # fmt: skip


def labels_needed(
    scores: Sequence[float], agreed: Sequence[int], target: float, confidence: float
) -> int | None:
    """About how many labelled rows like these would let a threshold promise `target` (module
    docstring); None when the surest rows agree less than the target."""
    rows = len(scores)
    _, kept, wrong = _curve(scores, agreed)
    rate = (wrong + 1) / (kept + 2)
    hopeful = (kept >= MIN_ROWS_FOR_RATE) & (rate < 1 - target)
    if not hopeful.any():
        return None
    share, rate = kept[hopeful] / rows, rate[hopeful]

    def passes(labels: np.ndarray) -> np.ndarray:
        k = np.ceil(share * labels)
        return upper_errors(np.round(rate * k), k, confidence) <= 1 - target

    low = np.full(len(share), float(rows))
    high = np.full(len(share), float(MAX_LABELS))
    reachable = passes(high)
    if not reachable.any():
        return None
    for _ in range(40):  # halving the gap: to within one label
        mid = np.floor((low + high) / 2)
        ok = passes(mid)
        high, low = np.where(ok, mid, high), np.where(ok, low, mid)
    return int(high[reachable].min())
