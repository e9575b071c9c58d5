"""`agree`'s statistics over a whole batch of bootstrap resamples at once.

scipy's `bootstrap` calls a statistic once per resample unless the statistic is vectorized:
its 1,000 calls of scikit-learn's `cohen_kappa_score` for one interval cost 4 ms each (mostly
its argument checks), which made `evalpipe agree` take seconds per question. Each function
here computes the figure its library namesake reports, for arrays of shape (..., n) along
`axis`, so scipy hands it all resamples of a batch in one call. tests/test_agree.py holds
each equal to the library's on random and degenerate samples.

Labels and judged answers are category codes (0, 1, ...); an undefined figure (kappa or rho
when only one category occurs) is NaN, as the libraries give it.
"""

from __future__ import annotations

import numpy as np

BINS = 10  # reliability bins of equal width on [0, 1], as `agree` reports them


def accuracy(y: np.ndarray, judged: np.ndarray, axis: int = -1) -> np.ndarray:
    return np.mean(y == judged, axis=axis)


def kappa(y: np.ndarray, judged: np.ndarray, axis: int = -1) -> np.ndarray:
    """Cohen's kappa, as `sklearn.metrics.cohen_kappa_score(y, judged)`."""
    y, judged, k = _codes(y, judged, axis)
    n = y.shape[-1]
    labels, answers = _counts(y, k), _counts(judged, k)
    disagree = n - (y == judged).sum(axis=-1)
    by_chance = n - (labels * answers).sum(axis=-1) / n
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.asarray(1.0 - disagree / by_chance)


def quadratic_kappa(y: np.ndarray, judged: np.ndarray, axis: int = -1) -> np.ndarray:
    """Kappa with quadratic weights, as `cohen_kappa_score(..., weights="quadratic")`: the
    weight of a pair is the squared distance of the two labels' places among the labels that
    occur in the sample (scikit-learn's, not the levels' own distance)."""
    y, judged, k = _codes(y, judged, axis)
    n = y.shape[-1]
    labels, answers = _counts(y, k), _counts(judged, k)
    place = np.cumsum((labels + answers) > 0, axis=-1) - 1.0  # among the labels that occur
    gap = np.take_along_axis(place, y, axis=-1) - np.take_along_axis(place, judged, axis=-1)
    disagree = (gap**2).sum(axis=-1)
    # sum over pairs (i, j) of (place_i - place_j)^2 * labels_i * answers_j / n
    spread = (labels * place**2).sum(axis=-1) + (answers * place**2).sum(axis=-1)
    by_chance = spread - 2 * (labels * place).sum(axis=-1) * (answers * place).sum(axis=-1) / n
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.asarray(1.0 - disagree / by_chance)


def brier(y: np.ndarray, p: np.ndarray, axis: int = -1) -> np.ndarray:
    """As `sklearn.metrics.brier_score_loss(y, p, pos_label=1)`."""
    return np.mean(((y == 1) - p) ** 2, axis=axis)


def ece(y: np.ndarray, p: np.ndarray, axis: int = -1) -> np.ndarray:
    """The expected calibration error of `agree.ece`: over `sklearn.calibration.
    calibration_curve`'s uniform bins, sum of (n_bin / n) * |observed - predicted|, which is
    the sum of |yes in the bin - sum of p in the bin| / n."""
    y, p = np.moveaxis(y, axis, -1), np.moveaxis(p, axis, -1)
    edges = np.linspace(0.0, 1.0, BINS + 1)
    bins = _flat_codes(np.searchsorted(edges[1:-1], p), BINS)
    size = bins.size // p.shape[-1] * BINS
    yes = np.bincount(bins, weights=(y == 1).ravel().astype(float), minlength=size)
    predicted = np.bincount(bins, weights=p.ravel().astype(float), minlength=size)
    gaps = np.abs(yes - predicted).reshape(*p.shape[:-1], BINS)
    return np.asarray(gaps.sum(axis=-1) / p.shape[-1])


def spearman(y: np.ndarray, score: np.ndarray, axis: int = -1) -> np.ndarray:
    """Spearman's rho of `score` and `y`, as `scipy.stats.spearmanr(score, y).statistic`: the
    correlation of their ranks (ties take their mean rank)."""
    from scipy.stats import rankdata  # here: scipy takes a second to import

    a = rankdata(np.moveaxis(score, axis, -1), axis=-1)
    b = rankdata(np.moveaxis(y, axis, -1), axis=-1)
    a -= a.mean(axis=-1, keepdims=True)
    b -= b.mean(axis=-1, keepdims=True)
    with np.errstate(invalid="ignore", divide="ignore"):
        rho = (a * b).sum(axis=-1) / np.sqrt((a * a).sum(axis=-1) * (b * b).sum(axis=-1))
    return np.clip(rho, -1.0, 1.0)


def _flat_codes(codes: np.ndarray, k: int) -> np.ndarray:
    """Codes 0..k-1 of shape (..., n), offset by k per leading row, flattened (one bincount
    then counts every row's codes apart)."""
    rows = int(np.prod(codes.shape[:-1], dtype=np.int64))
    offsets = (np.arange(rows, dtype=np.int64) * k).reshape(*codes.shape[:-1], 1)
    return np.asarray((codes.astype(np.int64) + offsets).ravel())


def _codes(y: np.ndarray, judged: np.ndarray, axis: int) -> tuple[np.ndarray, np.ndarray, int]:
    """Both samples as integer codes along the last axis, and how many codes there are."""
    y = np.moveaxis(y, axis, -1).astype(np.int64)
    judged = np.moveaxis(judged, axis, -1).astype(np.int64)
    return y, judged, int(max(y.max(), judged.max())) + 1


def _counts(codes: np.ndarray, k: int) -> np.ndarray:
    """How often each of the codes 0..k-1 occurs along the last axis: shape (..., k). Each
    kappa needs only these margins and the pairs that agree, never the k x k table of every
    resample (255 options over a batch of resamples took gigabytes)."""
    flat = _flat_codes(codes, k)
    counts = np.bincount(flat, minlength=flat.size // codes.shape[-1] * k)
    return counts.reshape(*codes.shape[:-1], k).astype(float)
