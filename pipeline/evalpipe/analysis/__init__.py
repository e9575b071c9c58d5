"""Analysts' questions of output tables: what a column means (`describe`), what changed
between two runs (`diff`), how often the judge agrees with people (`agree`), and how the
answers move across a nightly series of outputs (`series`).
"""

from evalpipe.analysis.agree import agreement
from evalpipe.analysis.describe import data_dictionary, render
from evalpipe.analysis.diff import Diff, compare, side_only
from evalpipe.analysis.labels import read_labels
from evalpipe.analysis.rounds import Sequential, run_sequential
from evalpipe.analysis.sampling import STRATUM
from evalpipe.analysis.sampling import estimate as estimate_sample
from evalpipe.analysis.series import model_changes, nightly_series
from evalpipe.analysis.text import render_agree, render_diff, render_estimate

# Outputs are read by `evalpipe.reading` (its `open_output`, under the name the analysts' commands
# and `evalpipe.job.sampled` call it by); lent here for them.
from evalpipe.reading import nights, questions_of
from evalpipe.reading import open_output as open_table

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
    "nights",
    "open_table",
    "questions_of",
    "read_labels",
    "render",
    "render_agree",
    "render_diff",
    "render_estimate",
    "run_sequential",
    "side_only",
]
