"""`evalpipe sample` (which rows to label) and `evalpipe infer` (the corpus's shares from the
judge corrected by those labels): thin over `evalpipe.analysis`, text for a person or `--json`
for a program; bad input is one line naming what is wrong, exit code 2.
"""

from __future__ import annotations

import json
from pathlib import Path

import click

from evalpipe.cli.options import LABELS, reports_errors

SHARE = click.FloatRange(0.0, 1.0, min_open=True, max_open=True)


@click.command()
@click.argument("output")
@LABELS
@click.option(
    "--confidence", type=SHARE, default=0.9, show_default=True,
    help="The confidence of the intervals.",
)  # fmt: skip
@click.option(
    "--by", default=None, metavar="COL",
    help="Also estimate per value of this column of the output.",
)  # fmt: skip
@click.option(
    "--record", is_flag=True,
    help="Also keep the estimates in OUTPUT (_corrected.json), where `evalpipe describe` and "
    "the report's Trust section show them; with OpenLineage set up (OPENLINEAGE_URL), also "
    "tell the catalog (a job infer:OUTPUT whose run facet evalpipe_corrected holds them).",
)  # fmt: skip
@click.option("--json", "as_json", is_flag=True, help="Print the estimates as JSON.")
@reports_errors
def infer(
    output: str, labels: str, confidence: float, by: str | None, record: bool, as_json: bool
) -> None:
    """The corpus's true share of each answer (the mean, for a score), from the judge's
    answers in OUTPUT corrected by people's labels on a sample of its rows
    (prediction-powered inference, PPI++ with lambda tuned).

    \b
    Per question and answer:
      corrected     the estimate and its interval (unbiased when the labelled rows were
                    drawn as `evalpipe sample` draws them, or uniformly at random);
      judge         the judge alone (the mean of its probability) and how far off it is;
      labels alone  the labels' own estimate and classical interval;
      worth         how many labels alone would give the corrected interval's precision.
    Labels may carry the sampler's _design, _inclusion_prob and _stratum, and several
    reviewers (_reviewer): each row's label is then their mean, and their agreement (Cohen's
    or Fleiss' kappa) is shown. An OUTPUT that is itself a sample (evalpipe estimate) widens
    the interval by its own sampling.
    """
    from evalpipe.analysis import infer_output, render_infer

    document = infer_output(output, labels, confidence=confidence, by=by, record=record)
    if record:
        from evalpipe.cli.options import warn
        from evalpipe.observe import tell_corrected
        from evalpipe.reading import open_output

        table = open_output(output)
        tell_corrected(output, table.schema, labels, document, lambda m: warn([m]))
    if as_json:
        click.echo(json.dumps(document, indent=2, ensure_ascii=False, default=str))
    else:
        click.echo(render_infer(document))
        if record:
            click.echo(f"\nkept in {document['recorded']}")


@click.command()
@click.argument("output")
@click.option("--question", required=True, metavar="KEY", help="The question to label.")
@click.option("--n", "n", type=click.IntRange(1), default=300, show_default=True,
              help="How many rows to draw.")  # fmt: skip
@click.option(
    "--design", type=click.Choice(["uniform", "stratified", "uncertain"]), default="stratified",
    show_default=True,
    help="uniform: a simple random sample; stratified: strata by the judge's probability, "
    "more rows where it is less sure (unbiased estimates, usually narrower); uncertain: the "
    "rows the judge is least sure of (for review or calibration, not for `evalpipe infer`).",
)  # fmt: skip
@click.option("--seed", type=int, default=None, help="Draw the same rows again.")
@click.option(
    "--out", type=click.Path(path_type=Path, dir_okay=False), required=True,
    help="Where the rows go: Parquet, or CSV by its suffix (.csv).",
)  # fmt: skip
@reports_errors
def sample(output: str, question: str, n: int, design: str, seed: int | None, out: Path) -> None:
    """Draw rows of OUTPUT for people to label for one question, with each row's inclusion
    probability (_inclusion_prob) and stratum (_stratum), which `evalpipe infer` uses to stay
    unbiased. The file has the id column, an empty column named by the question for the
    labels, and the design's columns: fill the label in and pass it as --labels."""
    from evalpipe.analysis import sample_output
    from evalpipe.errors import OutputError

    drawn = sample_output(output, question=question, n=n, design=design, seed=seed)
    try:
        if out.suffix.lower() == ".csv":
            drawn.write_csv(out)
        else:
            drawn.write_parquet(out)
    except OSError as exc:
        raise OutputError(f"--out '{out}' cannot be written: {exc.strerror or exc}") from None
    click.echo(f"{drawn.height:,} rows to label for '{question}' ({design}) written to {out}")
