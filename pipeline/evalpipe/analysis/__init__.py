"""Analysts' questions of output tables: what a column means (`describe`), what changed
between two runs (`diff`), how often the judge agrees with people (`agree`), and how the
answers move across a nightly series of outputs (`series`), the judge's probabilities
made to mean what they say (`calibrate`), which rows to label (`tolabel`) and the corpus's
shares corrected by those labels (`infer`, `ppi`).
"""

from evalpipe.analysis.agree import agreement
from evalpipe.analysis.calibrate import calibrate_output, fit_calibration
from evalpipe.analysis.describe import data_dictionary, render
from evalpipe.analysis.diff import Diff, compare, side_only
from evalpipe.analysis.infer import infer_output, sample_output
from evalpipe.analysis.labels import coerced as coerce_labels, read_labels
from evalpipe.analysis.rounds import Sequential, run_sequential
from evalpipe.analysis.sampling import STRATUM, estimate as estimate_sample, share_interval
from evalpipe.analysis.series import model_changes, nightly_series
from evalpipe.analysis.text import (
    render_agree,
    render_calibrate,
    render_diff,
    render_estimate,
    render_infer,
)
from evalpipe.analysis.tolabel import draw_label_sample

__all__ = [
    "STRATUM",
    "Diff",
    "Sequential",
    "agreement",
    "calibrate_output",
    "coerce_labels",
    "compare",
    "data_dictionary",
    "draw_label_sample",
    "estimate_sample",
    "fit_calibration",
    "infer_output",
    "model_changes",
    "nightly_series",
    "read_labels",
    "render",
    "render_agree",
    "render_calibrate",
    "render_diff",
    "render_estimate",
    "render_infer",
    "run_sequential",
    "sample_output",
    "share_interval",
    "side_only",
]
