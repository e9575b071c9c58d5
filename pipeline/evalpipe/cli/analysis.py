"""`evalpipe describe`, `diff` and `agree`: analysts' commands, thin over `evalpipe.analysis`.

Each prints text for a person, or with `--json` one JSON document for a program; bad input
(an output that is not one, a missing column, questions that do not match) ends the command
with one `InputError` line naming the offending thing, and exit code 2.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click

from evalpipe.cli.options import LABELS, reports_errors


def _echo_json(document: Any) -> None:
    click.echo(json.dumps(document, indent=2, ensure_ascii=False, default=str))


@click.command()
@click.argument("output")
@click.option("--json", "as_json", is_flag=True, help="Print the dictionary as JSON.")
@reports_errors
def describe(output: str, as_json: bool) -> None:
    """Print the data dictionary of the job output in OUTPUT (a directory or an object-store
    URI): every column, its type, and what it means, as the table's own Parquet field metadata
    says (with each probability column's option or level label)."""
    from evalpipe.analysis import data_dictionary, render

    dictionary = data_dictionary(output)
    if as_json:
        _echo_json(dictionary)
    else:
        click.echo(render(dictionary))


def _write_parquet(frame: Any, path: Path) -> None:
    from evalpipe.errors import OutputError

    try:
        frame.write_parquet(path)
    except OSError as exc:
        raise OutputError(f"--out '{path}' cannot be written: {exc.strerror or exc}") from None


@click.command()
@click.argument("a")
@click.argument("b")
@click.option("--json", "as_json", is_flag=True, help="Print the comparison as JSON.")
@click.option(
    "--out",
    type=click.Path(path_type=Path, dir_okay=False),
    default=None,
    help="Also write the row-level differences as Parquet: per id and question, A's and B's "
    "answer, the change and whether it flipped (ids on one side only: `_only_in`).",
)
@reports_errors
def diff(a: str, b: str, as_json: bool, out: Path | None) -> None:
    """Compare two job outputs of one corpus, A (before) and B (after), directories or
    object-store URIs, joined on the id column.

    \b
    Per question, over the rows both answered: the change in mean (p(yes), expected level,
    share of each option) with a 95% paired bootstrap interval, and the flips, rows whose
    answer changed (choice changed, p(yes) crossed 0.5, most probable level changed), listed.
    Ids on one side only are counted and listed; each side's versioned models are named and
    flagged when they differ. Questions or ids not in both are left out, and it says so.
    """
    from evalpipe.analysis import compare, render_diff, side_only
    from evalpipe.reading import open_output

    result, rows = compare(open_output(a), open_output(b))
    if out is not None:
        import polars as pl

        _write_parquet(pl.concat([rows, side_only(result)], how="diagonal_relaxed"), out)
    document = result.as_json()
    if as_json:
        _echo_json(document)
    else:
        click.echo(render_diff(document))


@click.command()
@click.argument("output")
@LABELS
@click.option("--json", "as_json", is_flag=True, help="Print the agreement as JSON.")
@reports_errors
def agree(output: str, labels: str, as_json: bool) -> None:
    """How often the judge in OUTPUT (a job output, a directory or an object-store URI) agrees
    with people's labels.

    \b
    Per question, over the rows both answered (n), each with a 95% bootstrap interval:
      noul    accuracy (yes is p > 0.5), Cohen's kappa, Brier score, expected calibration
              error (ECE: the calibration curve's 10 bins, each bin's |observed - mean p|
              weighted by its share of rows), and the reliability bins;
      choice  accuracy, Cohen's kappa;
      score   exact agreement of the most probable level, kappa with quadratic weights,
              Spearman's rho of the expected level.
    Kappa is shown beside the base rate (the share of the most common label).
    """
    from evalpipe.analysis import agreement, read_labels, render_agree
    from evalpipe.reading import open_output

    document = agreement(open_output(output), read_labels(labels))
    if as_json:
        _echo_json(document)
    else:
        click.echo(render_agree(document))
