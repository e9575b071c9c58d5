"""A corpus whose truth is known, judged by a judge miscalibrated in a known way, written as an
output by the sink: for the sampler's and the prediction-powered estimate's tests.

The truth of each row is a probability per answer; a person's label is drawn from it. The judge
reports it distorted: a yes/no answer's log-odds times `power` plus `shift` (shift > 0: says yes
too easily), a distribution raised to `power` and its first option's weight times e^shift.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import pyarrow as pa

from evalpipe.output import Sink, output_schema
from evalpipe.output.table import RowResult

OPTIONS = ["positive", "mixed", "negative"]
LEVELS = ["poor", "fair", "good"]
QUESTIONS: dict[str, dict[str, Any]] = {
    "helpful": {"type": "noul", "instructions": "x"},
    "sentiment": {"type": "choice", "instructions": "x", "criteria": dict.fromkeys(OPTIONS)},
    "quality": {"type": "score", "instructions": "x", "criteria": LEVELS},
}


@dataclass
class Corpus:
    out: Path
    p: np.ndarray  # true p(yes) per row
    choice: np.ndarray  # true distributions (rows x options)
    score: np.ndarray  # true distributions (rows x levels)
    judged_p: np.ndarray

    def labels(self, ids: np.ndarray, seed: int) -> pl.DataFrame:
        """A person's labels of rows `ids`, drawn from the truth."""
        rng = np.random.default_rng(seed)
        helpful = rng.random(len(ids)) < self.p[ids]
        pick = [rng.choice(len(OPTIONS), p=self.choice[i]) for i in ids]
        level = [int(rng.choice(len(LEVELS), p=self.score[i])) for i in ids]
        return pl.DataFrame(
            {"id": ids.tolist(), "helpful": helpful.tolist(),
             "sentiment": [OPTIONS[k] for k in pick], "quality": level}
        )  # fmt: skip


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-x))


def distorted(probs: np.ndarray, power: float, shift: float) -> np.ndarray:
    w = probs**power
    w[:, 0] *= np.exp(shift)
    return w / w.sum(axis=1, keepdims=True)


def corpus(tmp: Path, n: int, *, power: float = 2.0, shift: float = 1.0, seed: int = 0,
           errors: int = 0) -> Corpus:  # fmt: skip
    """`n` rows (ids 0..n-1; the first `errors` of them error rows) written to `tmp/out`."""
    rng = np.random.default_rng(seed)
    logit = rng.normal(-0.8, 1.6, n)
    p = _sigmoid(logit)
    judged_p = _sigmoid(power * logit + shift)
    choice = rng.dirichlet([2.0, 1.0, 1.5], n)
    score = rng.dirichlet([1.0, 2.0, 1.0], n)
    judged_c, judged_s = distorted(choice, power, shift), distorted(score, power, shift)
    rows = []
    options = [dict(zip(OPTIONS, map(float, c), strict=True)) for c in judged_c]
    for i in range(n):
        if i < errors:
            rows.append(RowResult(i, None, None, 0, "network", "lost", position=i))
            continue
        answers = {
            "helpful": {"type": "noul", "noul": float(judged_p[i])},
            "sentiment": {"type": "choice", "choice": OPTIONS[int(np.argmax(judged_c[i]))],
                          "confidence": 0.5,
                          "probabilities": options[i]},
            "quality": {"type": "score", "score": float(np.dot(range(3), judged_s[i])),
                        "confidence": 0.5,
                        "probabilities": {str(k): float(v) for k, v in enumerate(judged_s[i])}},
        }  # fmt: skip
        rows.append(RowResult(i, answers, "m-1", 1, position=i))
    schema = output_schema("id", pa.int64(), QUESTIONS)
    sink = Sink.open(tmp / "out", schema, "fp", run_id="r", write_seconds=0)
    sink.resume(None)
    sink.append(rows)
    sink.finish({}, "finished")
    return Corpus(tmp / "out", p, choice, score, judged_p)
