"""`evalpipe calibrate OUTPUT --labels LABELS`: the judge's probabilities fitted to people's
labels, written as a calibration file a job's `calibration.file` (or `--calibration`) takes.

Thin over `evalpipe.analysis` (the fitting, the held-out figures, the file): this module parses
the flags, prints text or `--json`, and says where the file went. Bad input (an output that is
not one, a labels file that does not match it, labelled rows of two models) is one line naming
what is wrong, exit code 2.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click

from evalpipe.cli.options import LABELS, file_flag, reports_errors

SHARE = click.FloatRange(0.0, 1.0, min_open=True, max_open=True)


@click.command()
@click.argument("output")
@LABELS
@file_flag(
    "--out",
    default=Path("calibration.json"),
    show_default=True,
    help="Where the calibration file is written (a job's calibration.file).",
)
@click.option(
    "--by",
    default=None,
    metavar="COL",
    help="Also give the held-out figures per value of this column of the labels (or of the "
    "output), so a group the calibration does not fit is seen.",
)
@click.option(
    "--method",
    type=click.Choice(["platt", "isotonic"]),
    default="platt",
    show_default=True,
    help="The map of yes/no questions: Platt scaling (a logistic regression on the judge's "
    "log-odds; a few hundred labels fit it) or isotonic regression (any non-decreasing map; "
    "needs more). Choice and score questions take temperature scaling.",
)
@click.option(
    "--folds",
    type=click.IntRange(2, 20),
    default=5,
    show_default=True,
    help="The labelled rows are cut into this many folds; each fold's figures come from the "
    "map fitted on the others (held out).",
)
@click.option(
    "--target-agreement",
    type=SHARE,
    default=None,
    metavar="T",
    help="Also show the abstention a job with calibration.target_agreement T would make: "
    "the threshold, the bound it promises and the share of rows kept.",
)
@click.option(
    "--confidence",
    type=SHARE,
    default=0.9,
    show_default=True,
    help="The confidence of --target-agreement's promise (calibration.confidence).",
)
@file_flag(
    "--config",
    metavar="CONFIG",
    help="The job that wrote OUTPUT: its questions tie the file to them, for an output "
    "written before outputs recorded them.",
)
@click.option("--json", "as_json", is_flag=True, help="Print the figures as JSON.")
@reports_errors
def calibrate(output: str, labels: str, as_json: bool, target_agreement: float | None,
              **options: Any) -> None:  # fmt: skip
    """Fit the judge in OUTPUT (a job output, a directory or an object-store URI) to people's
    labels: per question, a map from its probabilities to ones that mean what they say,
    written to --out for a job's calibration.file.

    \b
    The figures are held out (cross-fitted over --folds), each with a 95% bootstrap interval:
      ECE       expected calibration error (10 equal bins; choice and score: of the
                probability of the judge's answer against whether it was right);
      Brier     the Brier score (choice and score: summed over options);
      log loss  of the probability given to what the person said;
    before (the judge's own) and after (calibrated), and the change. The file is tied to the
    service, the versioned model and each question as asked: a job asking another is refused.
    """
    from evalpipe.analysis import calibrate_output, render_calibrate

    document = calibrate_output(output, labels, target=target_agreement, **options)
    if as_json:
        click.echo(json.dumps(document, indent=2, ensure_ascii=False, default=str))
    else:
        click.echo(render_calibrate(document))
