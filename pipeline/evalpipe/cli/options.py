"""What the `evalpipe` commands share: one-line errors and their exit codes, `--set`,
`--limit`/`--sample`/`--seed`, `--log-format`, `--labels`, a file flag and warnings on
stderr."""

from __future__ import annotations

import sys
import traceback
from collections.abc import Callable
from functools import wraps
from pathlib import Path
from typing import Any, TypeVar

import click

from evalpipe.engine import FORMATS, default_format
from evalpipe.errors import EvalpipeError
from evalpipe.stores import scrubbed

F = TypeVar("F", bound=Callable[..., Any])


def fail(exc: EvalpipeError) -> None:
    click.echo(scrubbed(exc.one_line()), err=True)  # no user or password
    sys.exit(exc.exit_code)


def _scrubbed_hook(kind: type[BaseException], exc: BaseException, trace: Any) -> None:
    text = "".join(traceback.format_exception(kind, exc, trace))
    sys.stderr.write(scrubbed(text))


def scrub_tracebacks() -> None:
    """A bug's traceback, printed as Python prints it, but through the rule for URLs and the
    proxies' passwords (`evalpipe.stores.scrubbed`): a lower layer's message in it may quote
    them."""
    sys.excepthook = _scrubbed_hook


def reports_errors(func: F) -> F:
    """Turn evalpipe errors into one stderr line and the documented exit code."""

    @wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return func(*args, **kwargs)
        except EvalpipeError as exc:
            fail(exc)
        except KeyboardInterrupt:
            click.echo(
                "Interrupted: committed rows are kept; run the same command to resume.", err=True
            )
            sys.exit(130)

    return wrapper  # type: ignore[return-value]


def warn(warnings: list[str]) -> None:
    for warning in warnings:
        click.echo(f"Warning: {warning}", err=True)


LABELS = click.option(
    "--labels",
    required=True,
    help="People's labels, Parquet or CSV: the output's id column and one column per question "
    "key (noul: true/false, 1/0 or yes/no; choice: the option; score: the level's index or "
    "label). Empty cells are rows not labelled.",
)


def file_flag(name: str, **options: Any) -> Callable[[F], F]:
    """A flag naming a file (`--calibration FILE`, `--out FILE`): a path, never a folder."""
    settings = {"type": click.Path(path_type=Path, dir_okay=False), "default": None,
                "metavar": "FILE", **options}  # fmt: skip
    return click.option(name, **settings)


SET = click.option(
    "--set",
    "overrides",
    multiple=True,
    metavar="KEY=VALUE",
    help="Override a config key by its dotted path, the value parsed as YAML (repeatable), "
    "e.g. --set output.path=out/dt=2026-11-23 --set limits.requests_per_minute=600.",
)


def rows(func: F) -> F:
    """--limit / --sample / --seed: a few rows to try first (`plan` and `run` alike)."""
    options = (
        click.option(
            "--limit", type=click.IntRange(min=1), metavar="N", help="Only the first N rows."
        ),
        click.option(
            "--sample",
            type=click.IntRange(min=1),
            metavar="N",
            help="Only N rows drawn at random, the same N for the same corpus and --seed.",
        ),
        click.option("--seed", type=int, default=None, metavar="S", help="The sample's seed [0]."),
    )
    for option in reversed(options):
        func = option(func)
    return func


def selection(limit: int | None, sample: int | None, seed: int | None) -> Any:
    """The rows to keep: None for all; a one-line UsageError for flags that contradict."""
    from evalpipe.errors import UsageError
    from evalpipe.input import Selection

    if limit is not None and sample is not None:
        raise UsageError("--limit and --sample: give one of them, not both")
    if seed is not None and sample is None:
        raise UsageError("--seed: it seeds --sample N; give --sample too")
    if sample is not None:
        return Selection(sample, sample=True, seed=seed or 0)
    return None if limit is None else Selection(limit)


def log_format(help: str) -> Callable[[F], F]:
    """`--log-format text|json` (default: $EVALPIPE_LOG_FORMAT, else text)."""
    return click.option(
        "--log-format",
        type=click.Choice(FORMATS),
        default=default_format,
        show_default="text, or $EVALPIPE_LOG_FORMAT",
        help=help,
    )
