"""People's labels drawn from true answers, for the trust tests (test_judge, test_judge_job).

The truth is the reference evaluator's own answer (what the embedded service says with
`overconfidence` 1): a noul label is yes with its p(yes), a choice or score label is drawn from
its distribution, as a person would answer if the judge's true probabilities were right.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import polars as pl

from conftest import QUESTIONS


def drawn(truths: Mapping[Any, Mapping[str, Any]], ids: Sequence[Any], seed: int) -> pl.DataFrame:
    """Labels of rows `ids` (an `id` column and one per question of `QUESTIONS`), drawn from
    `truths`, each row's true answers by id."""
    rng = np.random.default_rng(seed)
    found: dict[str, list[Any]] = {"id": list(ids), **{key: [] for key in QUESTIONS}}
    for i in ids:
        truth = truths[i]
        found["helpful"].append(bool(rng.random() < truth["helpful"]["noul"]))
        for key in ("sentiment", "quality"):
            p = truth[key]["probabilities"]
            pick = int(rng.choice(len(p), p=list(p.values())))
            found[key].append(list(p)[pick] if key == "sentiment" else pick)
    return pl.DataFrame(found)
