"""`ep.infer` and `ep.label_sample`: which rows to label, and the corpus's shares from the
judge corrected by the labels, from a notebook: the same as `evalpipe sample` and
`evalpipe infer` (`evalpipe.analysis`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import polars as pl

from evalpipe.analysis import infer_output, sample_output


def infer(
    output: str | Path, labels: str | Path, *, confidence: float = 0.9, by: str | None = None,
    record: bool = False,
) -> dict[str, Any]:  # fmt: skip
    """The corpus's true share of each answer of each question (the mean, for a score), from
    the judge's answers in `output` corrected by people's `labels` (prediction-powered
    inference, PPI++): per question and answer the corrected estimate and its interval at
    `confidence`, the judge alone and how far off it is, the labels alone, and how many labels
    alone the estimate is worth; per value of the output's column `by` when given.

    `labels`: Parquet or CSV, the output's id column and a column per question key, with the
    sampler's `_design`, `_inclusion_prob`, `_stratum` when `label_sample` drew the rows (else
    they are taken as a uniform random sample), and `_reviewer` where several people labelled.
    `record`: also keep the document in the output (`_corrected.json`), where
    `evalpipe describe` and the report show it. Returns `evalpipe infer --json`'s document."""
    return infer_output(str(output), str(labels), confidence=confidence, by=by, record=record)


def label_sample(
    output: str | Path, question: str, *, n: int = 300, design: str = "stratified",
    seed: int | None = None, out: str | Path | None = None,
) -> pl.DataFrame:  # fmt: skip
    """`n` rows of `output` for people to label for `question`, drawn by `design`
    ("uniform", "stratified" by the judge's probability, or "uncertain": the judge's least
    sure, for review only): the id column, an empty label column named by the question, and
    `_design`, `_inclusion_prob`, `_stratum`. Written to `out` too when given (Parquet, or CSV
    by its suffix)."""
    drawn = sample_output(str(output), question=question, n=n, design=design, seed=seed)
    if out is not None:
        path = Path(out)
        drawn.write_csv(path) if path.suffix.lower() == ".csv" else drawn.write_parquet(path)
    return drawn
