"""`evalpipe estimate`: the corpus's figures from a stratified sample, to a stated precision.

Thin over `evalpipe.session.run_estimate` (the rounds) and `evalpipe.analysis` (the statistics and
the text): parses the flags, installs the signal handlers as `run` does (a stop lets the
requests in flight finish, keeps what was scored, and says so), prints the table or the JSON.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import click

from evalpipe.cli.options import SET, fail, log_format
from evalpipe.engine import StopSignals
from evalpipe.errors import EvalpipeError


@click.command()
@click.argument("config", type=click.Path(path_type=Path))
@click.option(
    "--margin",
    required=True,
    type=click.FloatRange(0, 1, min_open=True, max_open=True),
    metavar="M",
    help="The precision wanted: every corpus-wide interval's half-width at most M (shares and "
    "p(yes) as they are; a mean level on its 0-1 scale, M times levels - 1), e.g. 0.02.",
)
@click.option(
    "--by",
    "by",
    multiple=True,
    metavar="COLUMN",
    help="Stratify by this input column (repeatable): estimates per stratum too, and a "
    "sample spread over every stratum.",
)
@click.option(
    "--confidence",
    type=click.FloatRange(0, 1, min_open=True, max_open=True),
    default=0.95,
    show_default=True,
    metavar="C",
    help="The intervals' confidence level (corpus-wide; the per-stratum intervals hold "
    "together: all of them cover their true values with it).",
)
@click.option(
    "--max-rows",
    type=click.IntRange(min=1),
    default=None,
    metavar="N",
    help="Draw at most N rows in all (the sample so far included); says what precision N gave.",
)
@click.option(
    "--max-cost",
    type=click.FloatRange(min=0),
    default=None,
    metavar="X",
    help="Spend at most X dollars this time (at the cost per row measured so far; needs a "
    "price in the config); says what precision it bought.",
)
@click.option(
    "--seed",
    type=int,
    default=0,
    show_default=True,
    metavar="S",
    help="The sample's seed: the same corpus and seed draw the same rows, in the same order.",
)
@SET
@click.option("--json", "as_json", is_flag=True, help="Print the estimates as JSON.")
@click.option(
    "--ray-address", default=None, metavar="ADDR", help="Join this Ray cluster, as for `run`."
)
@log_format("json: every line on stderr is one JSON object (a `round` event after each round).")
def estimate(config: Path, overrides: tuple[str, ...], as_json: bool, **flags: Any) -> None:
    """Estimate the answers over the corpus of CONFIG from a stratified random sample, scored
    in rounds into the job's output until every corpus-wide interval is within --margin.

    \b
    Per question, corpus-wide and per stratum (--by), each with its interval:
      noul    the share of yes (p(yes) >= 0.5) and the mean p(yes);
      choice  each option's share;
      score   the mean level and each level's share (the most probable level).
    The first round draws in proportion to the strata's sizes; the next ones where the
    answers vary most (Neyman allocation). The sampled rows are real output rows, with a
    `_sample_weight` column; a later estimate (a smaller margin) goes on with the same
    sample, and a later `evalpipe run` pays only for the rows the sample did not score.

    Exit codes as for `run`: 0 done (also at --max-rows / --max-cost: the output says what
    precision was reached), 2 bad config or input, 3 key refused, 130/143 stopped.
    """
    stop = StopSignals()
    stop.install()
    from evalpipe.analysis import render_estimate
    from evalpipe.config import load_config
    from evalpipe.engine import EventLog
    from evalpipe.session import EstimateOptions, run_estimate

    log = EventLog(flags.pop("log_format"))
    log.guard_stderr()  # in JSON form, what Ray or a library prints becomes an event too
    options = EstimateOptions(
        margin=flags["margin"], by=tuple(flags["by"]), confidence=flags["confidence"],
        max_rows=flags["max_rows"], max_cost=flags["max_cost"], seed=flags["seed"],
        ray_address=flags["ray_address"],
    )  # fmt: skip
    try:
        document = run_estimate(load_config(config, overrides), options, log=log, stop=stop)
    except EvalpipeError as exc:
        log.release_stderr()
        fail(exc)
    finally:
        log.release_stderr()
        stop.restore()
    click.echo(json.dumps(document, indent=2) if as_json else render_estimate(document))
    if stop.requested:  # as `run`: leave without tearing down a Ray that is dying under us
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(stop.exit_code)
