"""The calibration maps `evalpipe calibrate` fits, and the figures it holds them to.

A yes/no question is mapped by Platt scaling by default: scikit-learn's logistic regression of
the label on the judge's log-odds, unpenalised, p' = sigmoid(a * logit(p) + b). Two numbers,
so a few hundred labels fit it well, and it undoes the usual ways a judge is off (too sure or
not sure enough, leaning to yes or no). `isotonic` (scikit-learn's isotonic regression: any
non-decreasing map) bends where Platt cannot, and needs more labels to do it without noise.
A choice or score question is mapped by temperature scaling (Guo et al. 2017): one number t,
p'_k = p_k^(1/t) normalised, fitted by the least log loss (scipy's bounded scalar search), so
the choice and the most probable level never change and only how sure the judge is moves.
The map's numbers are applied by `evalpipe.output` (`calibrated`), the one place they are.

The figures, per row of the labelled rows (so that the bootstrap takes the mean of them):
the Brier score (yes/no: (y - p)^2; choice and score: the sum over options of (p_k - y_k)^2),
the log loss (-log of the probability given to what the person said, probabilities clipped to
[1e-15, 1]); the ECE is `agree`'s: over the 10 equal bins of p (yes/no) or of the probability
of the judge's answer, whether it was right (choice, score: the top-label ECE).
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np

from evalpipe.calibration import CalibratedQuestion

CLIP = 1e-15
NOUL_METHODS = ("platt", "isotonic")


def logit(p: np.ndarray) -> np.ndarray:
    q = np.clip(p, 1e-12, 1 - 1e-12)
    return np.asarray(np.log(q / (1 - q)))


def fit(kind: str, method: str, probs: np.ndarray, y: np.ndarray) -> dict[str, Any]:
    """A map's numbers, fitted on judge's `probs` and people's `y` (0/1, or the index of the
    option or level)."""
    if kind != "noul":
        return {"t": _temperature(probs, y)}
    if method == "isotonic":
        from sklearn.isotonic import IsotonicRegression

        iso = IsotonicRegression(y_min=0.0, y_max=1.0, out_of_bounds="clip").fit(probs, y)
        return {"x": iso.X_thresholds_.tolist(), "y": iso.y_thresholds_.tolist()}
    from sklearn.linear_model import LogisticRegression

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a separable sample: the fit is as good as it gets
        model = LogisticRegression(penalty=None, max_iter=1000).fit(logit(probs)[:, None], y)
    return {"a": float(model.coef_[0, 0]), "b": float(model.intercept_[0])}


def _temperature(probs: np.ndarray, y: np.ndarray) -> float:
    from scipy.optimize import minimize_scalar

    logs = np.log(np.clip(probs, CLIP, 1.0))
    rows = np.arange(len(y))

    def loss(log_t: float) -> float:
        z = logs / np.exp(log_t)
        z = z - z.max(axis=1, keepdims=True)
        return float(-np.mean(z[rows, y] - np.log(np.exp(z).sum(axis=1))))

    found = minimize_scalar(loss, bounds=(-4.0, 4.0), method="bounded")
    return float(np.exp(found.x))


def apply(kind: str, method: str, params: dict[str, Any], probs: np.ndarray) -> np.ndarray:
    """`probs` through a fitted map, as a job applies it (`evalpipe.output`)."""
    return CalibratedQuestion(kind, "", method, params, (), 0).apply(probs)


def confidence(kind: str, probs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(the judge's answer, the probability it gives that answer) per row: yes (1) when
    p >= 0.5 else no (0), and max(p, 1 - p); the most probable option or level, and its p."""
    if kind == "noul":
        return (probs >= 0.5).astype(np.int64), np.maximum(probs, 1 - probs)
    return np.argmax(probs, axis=1), np.max(probs, axis=1)


def per_row(kind: str, probs: np.ndarray, y: np.ndarray) -> dict[str, np.ndarray]:
    """Each row's Brier score and log loss (module docstring)."""
    if kind == "noul":
        said = np.where(y == 1, probs, 1 - probs)
        brier = (y - probs) ** 2
    else:
        said = probs[np.arange(len(y)), y]
        onehot = np.zeros_like(probs)
        onehot[np.arange(len(y)), y] = 1.0
        brier = ((probs - onehot) ** 2).sum(axis=1)
    return {"brier": brier, "log_loss": -np.log(np.clip(said, CLIP, 1.0))}
