"""`evalpipe init PARQUET`: a commented job config to start from, written from the corpus.

The id and state columns are guessed from the file (`evalpipe.input.guess`); one question of each
type stands as a template to edit; the service's URL is a placeholder that `plan` and `run`
refuse with one line until it is filled in, so a first job never runs by accident on the
embedded reference service (made-up answers) or on a guessed address.

Everything taken from outside (the corpus's path, its column names, the config's path) is
written by the YAML library as one scalar on one line (`scalar`), in values and comments alike,
never pasted into the text: a column named `text`, a line break and `metrics: {pushgateway:
http://elsewhere}` is a column name in the file, not a `metrics` section.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import click
import yaml

from evalpipe.cli.options import reports_errors
from evalpipe.config import BASE_URL_PLACEHOLDER
from evalpipe.errors import ConfigError
from evalpipe.stores import write_bytes

_BREAKS = "\n\r\x85\u2028\u2029"  # what YAML reads as a line break, in a comment too
TEMPLATE = """\
# evalpipe job config, written by `evalpipe init {corpus}`.
# Fill in service.base_url, check the guesses, edit the questions; then
#   evalpipe plan {config}        (validates, counts, estimates; sends nothing)
#   evalpipe run {config} --limit 20   (a few rows first), then without --limit.
input:
  path: {corpus_yaml}
  # Guessed: {id_note}
  id_column: {id_column}
  # Guessed: the text column with the longest values. A list of columns makes a JSON state.
  state: {state}
output:
  path: {output}
service:
  # The evaluation service's URL, scheme://host[:port] (without /v1). 'embedded' runs the
  # reference service that ships with evalpipe: made-up answers, for demos and tests only.
  base_url: {base_url}
  # The environment variable that holds the API key (export it; it is never written down).
  api_key_env: EVAL_API_KEY
# A versioned model ID for scheduled jobs (`evalpipe models --config {config}` lists them);
# an alias such as model-latest moves, and its answers are never cached.
model: model-latest
# pricing:                 # dollars per million input tokens; without it, cost is "unknown"
#   default: 0.042
#   models:
#     model-1.13.0: 0.042
limits:
  requests_per_minute: 1200  # your account's limits
  tokens_per_second: 250000
questions:
  # Templates, one of each type: rename the keys, rewrite the instructions and criteria.
  relevant:
    type: noul  # yes or no: the probability of yes
    instructions: Does the text answer the question it was written for?
    criteria:
      "true": it answers it directly and completely
      "false": it is off topic, evasive or empty
  tone:
    type: choice  # one option, with a probability per option and a confidence
    instructions: What is the overall tone of the text?
    criteria:
      positive: praise, satisfaction
      neutral: facts without judgement
      negative: complaints, frustration
  quality:
    type: score  # a level, probability-weighted, with a distribution and a confidence
    instructions: How clear and well written is the text?
    criteria: [poor, fair, good, excellent]
"""


def scalar(value: str | list[str]) -> str:
    """`value` as YAML writes it, on one line: plain where YAML reads it back as the same
    string, else quoted with its line breaks and control characters escaped; a list in flow
    style."""
    text = yaml.safe_dump(value, default_flow_style=True, allow_unicode=True, width=1 << 30)
    text = text.removesuffix("\n").removesuffix("\n...")
    if any(c in text for c in _BREAKS):  # several lines: double quotes escape the breaks
        text = yaml.safe_dump(
            value, default_style='"', default_flow_style=True, allow_unicode=True, width=1 << 30
        )
        text = text.removesuffix("\n")
    return text


def render(corpus: str, config: Path) -> str:
    """The commented config for `corpus` (its columns guessed), to be written at `config`."""
    from evalpipe.input import guess_columns

    guess = guess_columns(corpus)
    if guess.id_column is None:
        id_column, id_note = "<ID_COLUMN>", "no column has a value in every row, all unique;"
        id_note += f" name one of {', '.join(scalar(c) for c in guess.columns)}"
    else:
        id_column = scalar(guess.id_column)
        id_note = f"every one of the {guess.rows:,} rows has a value, all unique"
    state = guess.state[0] if len(guess.state) == 1 else list(guess.state)
    stem = Path(corpus.rstrip("/")).stem or "scores"
    return TEMPLATE.format(
        corpus=scalar(corpus),
        corpus_yaml=scalar(corpus),
        config=scalar(str(config)),
        id_column=id_column,
        id_note=id_note,
        state=scalar(state),
        output=scalar(f"out/{stem}"),
        base_url=json.dumps(BASE_URL_PLACEHOLDER),  # ours, not a name: JSON is YAML
    )


@click.command()
@click.argument("parquet")
@click.option(
    "--out",
    "config",
    type=click.Path(path_type=Path),
    default=Path("job.yaml"),
    show_default=True,
    help="Where to write the config.",
)
@click.option("--force", is_flag=True, help="Replace the file at --out if there is one.")
@reports_errors
def init(parquet: str, config: Path, force: bool) -> None:
    """Write a commented job config for the corpus PARQUET (a file, a folder or a prefix):
    the id and state columns guessed, a template question of each type, and the service's
    URL as a placeholder to fill in. Prints the file's path."""
    if os.path.lexists(config) and not force:  # a link, even to nothing, is there
        raise ConfigError(f"--out: {config} exists; choose another path, or give --force")
    text = render(parquet, config)
    write_bytes(config, text.encode("utf-8"))  # replaces a link at --out, never writes through
    click.echo(str(config))
