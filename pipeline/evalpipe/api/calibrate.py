"""`ep.calibrate`: the judge of an output fitted to people's labels, from a notebook.

The same fitting, figures and file as `evalpipe calibrate` (`evalpipe.analysis`); the figures
come back as the command's `--json` document, a dict.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from evalpipe.analysis import calibrate_output


def calibrate(
    output: str | Path,
    labels: str | Path,
    *,
    out: str | Path | None = "calibration.json",
    by: str | None = None,
    method: str = "platt",
    folds: int = 5,
    target_agreement: float | None = None,
    confidence: float = 0.9,
    config: str | Path | None = None,
) -> dict[str, Any]:
    """Fit, per question, a map from the judge's probabilities in `output` (a job output: a
    folder, an object-store URI or a Delta table) to probabilities that mean what they say,
    on people's `labels` (Parquet or CSV: the output's id column and a column per question key),
    and write it to `out` (None: not written) for a job's `calibration.file`.

    Yes/no questions are mapped by Platt scaling (`method="platt"`) or isotonic regression
    (`"isotonic"`), choice and score questions by temperature scaling. The figures are held
    out (cross-fitted over `folds`): ECE, Brier and log loss before and after, each with a 95%
    bootstrap interval; `by` adds them per value of a column of the labels or the output;
    `target_agreement` (at `confidence`) shows the abstention threshold a job would choose.
    `config`: the job that wrote an output too old to record its questions.

    Returns `evalpipe calibrate --json`'s document: per question its map, figures, reliability
    bins and abstention, and `file`, where the calibration went.
    """
    return calibrate_output(
        str(output), str(labels), None if out is None else Path(out),
        None if config is None else Path(config), by=by, method=method, folds=folds,
        target=target_agreement, confidence=confidence,
    )  # fmt: skip
