"""Analysts' questions of output tables: what a column means (`describe`), what changed
between two runs (`diff`), how often the judge agrees with people (`agree`), and how the
answers move across a nightly series of outputs (`series`).
"""

from evalpipe.analysis.agree import agreement
from evalpipe.analysis.describe import data_dictionary, render
from evalpipe.analysis.diff import Diff, compare, side_only
from evalpipe.analysis.labels import read_labels
from evalpipe.analysis.rounds import Sequential, run_sequential
from evalpipe.analysis.sampling import STRATUM, estimate as estimate_sample, share_interval
from evalpipe.analysis.series import model_changes, nightly_series
from evalpipe.analysis.text import render_agree, render_diff, render_estimate

__all__ = [
    "STRATUM",
    "Diff",
    "Sequential",
    "agreement",
    "compare",
    "data_dictionary",
    "estimate_sample",
    "model_changes",
    "nightly_series",
    "read_labels",
    "render",
    "render_agree",
    "render_diff",
    "render_estimate",
    "run_sequential",
    "share_interval",
    "side_only",
]
