"""`evalpipe agree OUTPUT --labels LABELS`: how often the judge agrees with people.

Per question, over the rows the judge answered and a person labelled (n):

- noul: accuracy (the judge says yes when p > 0.5), Cohen's kappa at 0.5, the Brier score of
  p against the labels, and the expected calibration error (ECE) with its reliability bins;
  with a calibration's `K__p_true_calibrated`, its Brier score and ECE on the same rows too;
- choice: accuracy and Cohen's kappa;
- score: exact agreement of the most probable level with the label, Cohen's kappa with
  quadratic weights (near misses count as partly right on an ordered scale), and Spearman's
  rho between the expected level and the label.

Each comes with a 95% bootstrap interval over the labelled rows, and kappa beside the base
rate (the share of the most common label: what always answering it would score), since a high
accuracy on a skewed question can be chance. The statistics are scikit-learn's and scipy's
(`cohen_kappa_score`, `brier_score_loss`, `calibration_curve`, `spearmanr`); an interval
takes the same figure over all its resamples at once (`resampled`). scikit-learn has
no ECE: it is the calibration curve's bins (10 of equal width on [0, 1], empty bins dropped),
each bin's |observed share of yes - mean predicted p| weighted by its share of the rows:
ECE = sum over bins of (n_bin / n) * |observed - predicted|. A statistic that is undefined
(kappa or rho when only one category occurs) is null, and a note says why.
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import polars as pl

from evalpipe.analysis import resampled
from evalpipe.analysis.intervals import interval
from evalpipe.analysis.labels import (
    REVIEWER,
    coerced,
    labelled_ids,
    matched,
    per_reviewer,
    question_keys,
)
from evalpipe.analysis.resampled import BINS
from evalpipe.analysis.reviewers import reviewer_agreement
from evalpipe.reading import Output, Question


def _finite(value: float) -> float | None:
    return None if value is None or not np.isfinite(value) else float(value)


def _quiet(statistic: Any) -> Any:
    """A statistic with scikit-learn's and scipy's warnings on degenerate samples silenced
    (they give NaN, reported as null)."""

    def run(*samples: np.ndarray) -> float:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return float(statistic(*samples))

    return run


def _metric(name: str, statistic: Any, *samples: np.ndarray) -> dict[str, Any]:
    """One figure (the library's) and its 95% interval (null when undefined), from the
    same figure over all resamples at once (`resampled`, named as `statistic`)."""
    value = _finite(_quiet(statistic)(*samples))
    over_resamples = getattr(resampled, statistic.__name__)
    ci = (
        interval(samples, _quiet_arrays(over_resamples), vectorized=True, per_resample=True)
        if value is not None
        else None
    )
    low, high = (None, None) if ci is None else (_finite(ci[0]), _finite(ci[1]))
    return {"name": name, "value": value, "low": low, "high": high}


def _quiet_arrays(statistic: Any) -> Any:
    """A vectorized statistic with NumPy's warnings on degenerate resamples silenced."""

    def run(*samples: np.ndarray, axis: int = -1) -> np.ndarray:
        with np.errstate(all="ignore"):
            return np.asarray(statistic(*samples, axis=axis))

    return run


def accuracy(y: np.ndarray, judged: np.ndarray) -> float:
    return float(np.mean(y == judged))


# scikit-learn and scipy are imported where they are used: they take 1-3 s to import, which
# every `evalpipe report` (it reaches this package for a nightly series) would pay otherwise.


def kappa(y: np.ndarray, judged: np.ndarray) -> float:
    from sklearn.metrics import cohen_kappa_score

    return float(cohen_kappa_score(y, judged))


def quadratic_kappa(y: np.ndarray, judged: np.ndarray) -> float:
    from sklearn.metrics import cohen_kappa_score

    return float(cohen_kappa_score(y, judged, weights="quadratic"))


def brier(y: np.ndarray, p: np.ndarray) -> float:
    from sklearn.metrics import brier_score_loss

    return float(brier_score_loss(y, p, pos_label=1)) if len(y) else float("nan")


def reliability(y: np.ndarray, p: np.ndarray) -> list[dict[str, float]]:
    """The calibration curve's non-empty bins, each with its rows (binned as scikit-learn
    bins: edges at 0.1, 0.2, ..., a p on an edge goes to the upper bin)."""
    from sklearn.calibration import calibration_curve

    observed, predicted = calibration_curve(y, p, n_bins=BINS, strategy="uniform")
    edges = np.linspace(0.0, 1.0, BINS + 1)
    ids = np.searchsorted(edges[1:-1], p)
    counts = np.bincount(ids, minlength=BINS)
    used = np.nonzero(counts)[0]
    return [
        {"low": float(edges[b]), "high": float(edges[b + 1]), "rows": int(counts[b]),
         "predicted": float(pred), "observed": float(obs)}
        for b, pred, obs in zip(used, predicted, observed, strict=True)
    ]  # fmt: skip


def ece(y: np.ndarray, p: np.ndarray) -> float:
    """Expected calibration error from `reliability`'s bins (see the module docstring)."""
    bins = reliability(y, p)
    return sum(b["rows"] / len(y) * abs(b["observed"] - b["predicted"]) for b in bins)


def spearman(y: np.ndarray, score: np.ndarray) -> float:
    from scipy import stats

    return float(stats.spearmanr(score, y).statistic)


def _base_rate(y: np.ndarray, names: list[str]) -> dict[str, Any]:
    """The most common label (by its name) and its share: what always answering it scores."""
    values, counts = np.unique(y, return_counts=True)
    top = int(np.argmax(counts))
    return {"majority": names[int(values[top])], "share": float(counts[top] / len(y))}


def _noul(y: np.ndarray, p: np.ndarray) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    judged = (p > 0.5).astype(np.int64)
    metrics = [
        _metric("accuracy", accuracy, y, judged),
        _metric("kappa", kappa, y, judged),
        _metric("brier", brier, y, p),
        _metric("ece", ece, y, p),
    ]
    extra: dict[str, Any] = {
        "yes_rate_labels": float(y.mean()),
        "yes_rate_judge": float(judged.mean()),
        "reliability": reliability(y, p),
    }
    return metrics, extra


def _question(q: Question, rows: pl.DataFrame, notes: list[str]) -> dict[str, Any]:
    label = f"{q.key}\x00label"
    usable = rows.filter(pl.col("_error_type").is_null() & pl.col(label).is_not_null())
    usable = usable.filter(pl.col(q.head).is_not_null())
    out: dict[str, Any] = {"key": q.key, "kind": q.kind, "n": usable.height, "metrics": []}
    if usable.height == 0:
        notes.append(f"question '{q.key}': no row is both answered and labelled")
        return out
    y_series = coerced(q, usable[label])
    if q.kind == "noul":
        y, p = y_series.to_numpy(), usable[q.head].to_numpy()
        out["metrics"], extra = _noul(y, p)
        out.update(extra)
        calibrated = f"{q.key}__p_true_calibrated"  # a calibration's column, on the same rows
        if calibrated in usable.columns and usable[calibrated].null_count() == 0:
            p = usable[calibrated].to_numpy()
            out["metrics"] += [_metric("brier (calibrated)", brier, y, p),
                               _metric("ece (calibrated)", ece, y, p)]  # fmt: skip
            out["reliability_calibrated"] = reliability(y, p)
    elif q.kind == "choice":
        codes = {label: i for i, label in enumerate(q.labels)}
        y = y_series.replace_strict(codes, return_dtype=pl.Int64).to_numpy()
        judged = usable[q.head].replace_strict(codes, return_dtype=pl.Int64).to_numpy()
        out["metrics"] = [
            _metric("accuracy", accuracy, y, judged),
            _metric("kappa", kappa, y, judged),
        ]
    else:
        y = y_series.to_numpy()
        levels = usable.select(pl.concat_list(q.prob_columns).list.arg_max())
        judged = levels.to_series().cast(pl.Int64).to_numpy()
        score = usable[q.head].to_numpy()
        out["metrics"] = [
            _metric("exact agreement", accuracy, y, judged),
            _metric("kappa (quadratic)", quadratic_kappa, y, judged),
            _metric("spearman rho", spearman, y, score),
        ]
    out["base_rate"] = _base_rate(y, ["no", "yes"] if q.kind == "noul" else list(q.labels))
    if len(np.unique(y)) < 2:
        notes.append(f"question '{q.key}': the labels hold one category only; kappa is undefined")
    return out


def agreement(table: Output, labels: pl.DataFrame) -> dict[str, Any]:
    """The agreement of `table`'s answers with `labels` (`labels.read_labels`)."""
    notes: list[str] = []
    rows = matched(table, labels, notes)
    keys = {c.split("\x00")[0] for c in rows.columns if c.endswith("\x00label")}
    questions = [_question(q, rows, notes) for q in table.questions if q.key in keys]
    questions_out = [q.key for q in table.questions if q.key not in keys]
    if questions_out:
        notes.append(f"questions without a label column: {', '.join(questions_out)}: left out")
    return {
        "output": table.shown,
        "id_column": table.id_column,
        "labelled_rows": labelled_ids(table, labels),
        "matched_rows": rows.height,
        "questions": questions,
        "reviewers": _reviewers(table, labels),
        "notes": notes,
    }


def _reviewers(table: Output, labels: pl.DataFrame) -> list[dict[str, Any]]:
    """The reviewers' agreement among themselves (`reviewers`), where the labels name some."""
    if REVIEWER not in labels.columns:
        return []
    keys = question_keys(table, labels, [])
    return reviewer_agreement(per_reviewer(table, labels, keys), table.id_column, keys)
