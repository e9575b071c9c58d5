"""How much people agree with each other: where several reviewers labelled the same rows, the
judge can be held to no more than they manage among themselves.

Per question, over the rows at least two reviewers labelled (`per_reviewer`'s rows):
  two reviewers   Cohen's kappa (scikit-learn's `cohen_kappa_score`) on the rows both labelled;
  three or more   Fleiss' kappa (Fleiss, "Measuring nominal scale agreement among many raters",
                  Psychological Bulletin 76(5), 1971), as in statsmodels' `fleiss_kappa` with
                  the per-row agreement taken over the raters that row has (rows may have
                  different numbers of raters): with n_ij the raters who put row i in category
                  j and n_i = sum_j n_ij, P_i = (sum_j n_ij^2 - n_i) / (n_i (n_i - 1)),
                  P_bar their mean, p_j = sum_i n_ij / sum_i n_i, P_e = sum_j p_j^2,
                  kappa = (P_bar - P_e) / (1 - P_e).
Both treat the answers as categories (a score's levels too, unweighted); a kappa is null when
the reviewers used one category only (P_e = 1).
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import polars as pl

from evalpipe.analysis.labels import REVIEWER


def fleiss(counts: np.ndarray) -> float | None:
    """Fleiss' kappa of a rows x categories table of rater counts (each row >= 2 raters)."""
    raters = counts.sum(axis=1)
    agreement = ((counts * counts).sum(axis=1) - raters) / (raters * (raters - 1))
    shares = counts.sum(axis=0) / raters.sum()
    chance = float((shares * shares).sum())
    if chance >= 1.0:
        return None
    return float((agreement.mean() - chance) / (1.0 - chance))


def cohen(a: np.ndarray, b: np.ndarray) -> float | None:
    from sklearn.metrics import cohen_kappa_score

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        value = float(cohen_kappa_score(a, b))
    return None if not np.isfinite(value) else value


def reviewer_agreement(
    reviewed: pl.DataFrame, id_column: str, keys: list[str]
) -> list[dict[str, Any]]:
    """Per question: the reviewers, the rows two or more of them labelled, and their kappa
    (Cohen's for two reviewers, Fleiss' for more). Empty when the labels name one reviewer."""
    if REVIEWER not in reviewed.columns or reviewed[REVIEWER].drop_nulls().n_unique() < 2:
        return []
    out = []
    for key in keys:
        votes = reviewed.select(id_column, REVIEWER, key).drop_nulls()
        names = votes[REVIEWER].unique(maintain_order=True).to_list()
        shared = votes.filter(pl.len().over(id_column) >= 2)
        found: dict[str, Any] = {"question": key, "reviewers": len(names),
                                 "rows": shared[id_column].n_unique(), "kappa": None}  # fmt: skip
        if found["rows"] and len(names) == 2:
            wide = shared.pivot(on=REVIEWER, index=id_column, values=key).drop_nulls()
            found["method"] = "cohen"
            found["kappa"] = cohen(wide[str(names[0])].to_numpy(), wide[str(names[1])].to_numpy())
        elif found["rows"]:
            codes = shared[key].cast(pl.String)
            table = shared.with_columns(codes.alias(key)).pivot(
                on=key, index=id_column, values=REVIEWER, aggregate_function="len"
            )
            counts = table.drop(id_column).fill_null(0).to_numpy().astype(np.float64)
            found["method"] = "fleiss"
            found["kappa"] = fleiss(counts)
        out.append(found)
    return out
