"""The job config's `calibration` and `canary` sections: how far the judge is trusted.

`calibration` names a file `evalpipe calibrate` fitted on people's labels: the job adds
calibrated columns beside the judge's own and, with `target_agreement`, a `K__abstain` column
that keeps only the rows whose agreement with people is promised. `canary` names rows with
people's labels, apart from the corpus, that a run asks fresh before the corpus and compares
with the labels and with the last run's answers on the same model; it stops (exit 8) when they
moved beyond what sampling noise allows. Both change what a table holds or whether a run sends
at all, so the calibration (its file's content and the target) is part of the job's
fingerprint: another one needs `--restart` (the answer cache keeps it from costing anything).
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Annotated, Any

from pydantic import Field, model_validator

from evalpipe.config.section import ConfigSection

Share = Annotated[float, Field(gt=0, lt=1)]


class CalibrationConfig(ConfigSection):
    """Calibrated columns from a file of `evalpipe calibrate`, and abstention with a promise."""

    file: Path | None = None
    """A calibration file written by `evalpipe calibrate` (or `ep.calibrate`); also
    `--calibration FILE`. Each question it calibrates gets calibrated columns beside the judge's
    own (`K__p_true_calibrated`, `K__p_calibrated__<option>`, `K__score_calibrated`). It is
    refused, with one line, for another service, model or question than it was fitted on."""
    target_agreement: Share | None = None
    """With `file`: the agreement with people the kept rows must reach (e.g. `0.95`). Each
    calibrated question gets `K__abstain`, true for rows to send to a person; the threshold is
    chosen on the file's labelled rows so that, with `confidence`, agreement on the rows kept
    is at least this (a Clopper-Pearson bound over the candidate thresholds, not a point
    estimate). When no threshold can promise it, every row abstains and the run says how many
    labels would."""
    confidence: Share = 0.9
    """How sure the promise of `target_agreement` is: the share of label sets drawn like the
    file's for which agreement on the kept rows reaches the target."""

    @model_validator(mode="after")
    def _needs_file(self) -> CalibrationConfig:
        if self.target_agreement is not None and self.file is None:
            raise ValueError("calibration.target_agreement needs calibration.file")
        return self


class CanaryConfig(ConfigSection):
    """Canary rows asked fresh before the corpus: a run stops when the judge moved."""

    labels: Path | None = None
    """A Parquet file of canary rows, apart from the corpus: the id column and the state
    column(s) of `input`, and one column per question key holding a person's label (noul:
    true/false, 1/0 or yes/no; choice: the option; score: the level's index or label). Also
    `--canary FILE`. Before the corpus, the run asks them fresh (never from the answer cache)."""
    min_agreement: Share | None = None
    """The least agreement with the labels a question may show: the run stops when the upper
    bound of its interval is below this (a drop beyond sampling noise). Unset: the labels are
    compared and reported, not held to a floor."""
    max_changed: Annotated[float, Field(ge=0, lt=1)] = 0.01
    """The share of the canary's answers (every question's, together) that may change between
    two runs on the same model, a service's own noise: the run stops when the lower bound of the
    share that changed since the last run is above this. The decision counts (yes/no at 0.5,
    the option, the most probable level)."""
    confidence: Share = 0.95
    """How sure a stop must be: an unchanged service passes at least this share of nights. The
    comparisons share it (Bonferroni: the last run's takes half when `min_agreement` holds the
    labels too, each question's agreement a share of the other half)."""
    compare_last: bool = True
    """Compare with the last run's canary answers on the same service and model. `false`
    once: after a change was checked and accepted, this run's answers become the canary's."""


def trust_fingerprint(calibration: CalibrationConfig) -> dict[str, Any]:
    """What of `calibration` makes a table's columns: the file's content digest and the target
    (nothing when no file is set, so the fingerprint of other jobs stays as it was)."""
    if calibration.file is None:
        return {}
    try:
        digest = hashlib.blake2b(calibration.file.read_bytes(), digest_size=16).hexdigest()
    except OSError:
        digest = ""  # prepare refuses the file with one line before a fingerprint is needed
    target = calibration.target_agreement
    return {"calibration": [digest, target, calibration.confidence if target else None]}
