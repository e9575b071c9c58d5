"""A corpus's mean (a share is the mean of a 0/1 label) from the judge's answers on every row,
corrected by people's labels on a sample of them: prediction-powered inference, power tuned
(PPI++: Angelopoulos, Duchi & Zrnic, "PPI++: Efficient Prediction-Powered Inference", 2023,
arXiv:2311.01453), under the sampling design the labelled rows were drawn by.

With the judge's prediction f on each of the corpus's N answered rows and a label y on n of
them, the estimate is

    theta = lambda * mean_N(f) + mean_n(y - lambda * f)

unbiased for any fixed lambda, since the labelled rows are a probability sample: the second
term corrects the judge's bias, and lambda (0: labels alone; 1: plain PPI) is tuned to make
the variance smallest, clipped to [0, 1] as ppi_py's `ppi_mean_ci` clips it (so never worse
than the labels alone but for the noise of the tuning itself). Its variance is

    lambda^2 Var(f) / N + Var(y - lambda f) / n,      lambda* = Cov(y, f) / ((1 + n / N) Var(f)),

ppi_py's own formulas (`ppi_mean_ci`, `_calc_lam_glm`), and the interval theta +- z * se.

The labelled rows' design generalises the means (survey sampling: Horvitz & Thompson 1952;
Sarndal, Swensson & Wretman, *Model Assisted Survey Sampling*, 1992, ch. 3, 5 and 9). A row
drawn with inclusion probability pi (`evalpipe.analysis.tolabel`) counts d = 1 / pi rows, and
mean_n becomes the weighted (Hajek) mean sum a_i x_i with a_i = d_i / sum d: of a uniform
sample the plain mean, of a stratified one the stratified mean. Its variance is that of the
linearised values z_i = a_i (e_i - e_bar), e = y - lambda f, between the rows of each stratum:
sum_h n_h / (n_h - 1) sum_{i in h} (z_i - z_bar_h)^2 (with-replacement within a stratum, which
leaves out the finite population correction as the textbook's interval does; a stratum of one
labelled row makes the sample one stratum). For a uniform sample this is Var(e) / n.

Where the output itself is a sample of the corpus (`evalpipe estimate`'s `_sample_weight` w),
every mean over the output is weighted by w and the variance adds the first sample's: of the
judge's mean, sum w^2 (f - f_bar)^2 / (sum w)^2 times lambda^2, and of the correction the
residuals' variance times sum w^2 / (sum w)^2 (the two-phase variance, Sarndal et al. ch. 9,
taking the output's sample as drawn with replacement with probabilities proportional to 1 / w:
a little wide for a stratified sample, never narrow). The labelled rows' own d is then w / pi.
lambda is tuned on this whole variance.

Labels that are all alike (a rare answer no labelled row has) leave no spread to estimate a
variance from: the share then gets the labels' Wilson score interval (on n), which never
shrinks to a point, and lambda 0.

Pure functions of arrays: `evalpipe.analysis.infer` reads the output and the labels.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from statistics import NormalDist

import numpy as np


@dataclass(frozen=True)
class Corrected:
    """The estimate, its interval and standard error, the tuned lambda, and the same from the
    labels alone (lambda = 0, under the same design); `effective_labels`: how many labels
    drawn uniformly at random would give the same variance alone (the labels' variance over
    the estimate's: n x labels-alone variance / variance for a uniform sample)."""

    estimate: float
    low: float
    high: float
    se: float
    lam: float
    judge: float
    labels_estimate: float
    labels_low: float
    labels_high: float
    labels_se: float
    effective_labels: float


def _between_rows(values: np.ndarray, strata: np.ndarray) -> np.ndarray:
    """Each value less its stratum's mean, times sqrt(n_h / (n_h - 1)): so that the sum of a
    product of two such is the stratified (co)variance of their totals."""
    out = np.empty_like(values)
    for h in np.unique(strata):
        at = strata == h
        count = int(at.sum())
        out[at] = (values[at] - values[at].mean()) * math.sqrt(count / (count - 1))
    return out


def ppi_mean(
    y: np.ndarray,
    f_labelled: np.ndarray,
    f_all: np.ndarray,
    *,
    confidence: float,
    design_weight: np.ndarray | None = None,
    strata: np.ndarray | None = None,
    output_weight: np.ndarray | None = None,
    bounds: tuple[float, float] = (0.0, 1.0),
    lam: float | None = None,
) -> Corrected:
    """The PPI++ estimate of the corpus mean of y (module docstring). `y`, `f_labelled`: the
    labelled rows' labels and predictions (n >= 2); `f_all`: the prediction on every answered
    row of the output; `design_weight`: each labelled row's d (None: all equal); `strata`:
    each labelled row's stratum (None: one); `output_weight`: `_sample_weight` of every row of
    `f_all` (None: the output is the corpus); `lam`: fixed (None: tuned)."""
    n = len(y)
    d = np.ones(n) if design_weight is None else np.asarray(design_weight, dtype=np.float64)
    a = d / d.sum()
    groups = np.zeros(n, dtype=np.int64) if strata is None else np.asarray(strata)
    if min(np.unique(groups, return_counts=True)[1]) < 2:
        groups = np.zeros(n, dtype=np.int64)
    w = np.ones(len(f_all)) if output_weight is None else np.asarray(output_weight, np.float64)
    f_bar = float(np.dot(w, f_all) / w.sum())
    spread_f = float(np.sum(w * w * (f_all - f_bar) ** 2) / w.sum() ** 2)  # Var of mean f
    phase1 = 0.0 if output_weight is None else float(np.sum(w * w) / w.sum() ** 2)
    u = _between_rows(a * (y - np.dot(a, y)), groups)
    v = _between_rows(a * (f_labelled - np.dot(a, f_labelled)), groups)
    yc, fc = y - np.dot(a, y), f_labelled - np.dot(a, f_labelled)
    s_uu, s_uv, s_vv = float(u @ u), float(u @ v), float(v @ v)
    s_yy, s_yf, s_ff = (float(np.dot(a, yc * yc)), float(np.dot(a, yc * fc)),
                        float(np.dot(a, fc * fc)))  # fmt: skip

    def variance(at: float) -> float:
        second = s_uu - 2 * at * s_uv + at * at * s_vv
        first = at * at * spread_f + phase1 * (s_yy - 2 * at * s_yf + at * at * s_ff)
        return max(0.0, first + second)

    if lam is None:
        denominator = spread_f + s_vv + phase1 * s_ff
        lam = 0.0 if denominator <= 0 else (s_uv + phase1 * s_yf) / denominator
        lam = min(1.0, max(0.0, lam))
    z = NormalDist().inv_cdf(0.5 + confidence / 2)
    estimate = lam * f_bar + float(np.dot(a, y - lam * f_labelled))
    se, labels_se = math.sqrt(variance(lam)), math.sqrt(variance(0.0))
    labels = float(np.dot(a, y))
    low, high = bounds
    if s_yy == 0.0 and bounds == (0.0, 1.0):  # every label alike: no spread to correct by
        # (a rare answer none of the labelled rows has): the labels' Wilson interval, which
        # never shrinks to a point, rather than a zero-width one
        from evalpipe.analysis.sampling import wilson

        low_w, high_w = wilson(labels, n, z)
        return Corrected(labels, low_w, high_w, 0.0, 0.0, f_bar, labels, low_w, high_w, 0.0, n)
    worth = s_yy * n / (n - 1) / se**2 if se > 0 else math.inf
    return Corrected(
        estimate, max(low, estimate - z * se), min(high, estimate + z * se), se, lam, f_bar,
        labels, max(low, labels - z * labels_se), min(high, labels + z * labels_se), labels_se,
        worth,
    )  # fmt: skip
