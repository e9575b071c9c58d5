"""The guard rails' flags, shared by `evalpipe run` and `evalpipe plan`, and the exit-code
table as `--help` prints it.

`--max-cost`, `--max-duration` and `--deadline` each set a `limits` key (`max_cost_usd`,
`max_duration`, `deadline`), so a flag and the config key are validated in one place
(`evalpipe.config`) and the run sees one config. The exit codes come from
`evalpipe.errors.exit_codes()`, the table the reference prints too.
"""

from __future__ import annotations

import json
import textwrap
from collections.abc import Callable
from typing import Any, TypeVar

import click

from evalpipe.errors import exit_codes

F = TypeVar("F", bound=Callable[..., Any])
_KEYS = {"max_cost": "max_cost_usd", "max_duration": "max_duration", "deadline": "deadline"}


def exit_code_epilog() -> str:
    """The exit-code table as `--help` prints it: kept as written (`\\b`), each meaning
    wrapped under its code."""
    rows = exit_codes()
    width = max(len(code) for code, _ in rows) + 2
    lines = ["\b", "Exit codes:"]
    for code, meaning in rows:
        wrapped = textwrap.wrap(meaning, 76 - width)
        lines.append(f"  {code:<{width}}{wrapped[0]}")
        lines += [f"  {'':<{width}}{more}" for more in wrapped[1:]]
    return "\n".join(lines)


class _Duration(click.ParamType[float]):
    """A duration flag: seconds, or 90s, 30m, 6h, 1h30m (`evalpipe.config.parse_duration`)."""

    name = "duration"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        from evalpipe.config import parse_duration

        try:
            seconds = parse_duration(value)
        except ValueError as exc:
            self.fail(str(exc), param, ctx)
        if seconds <= 0:
            self.fail(f"{value!r}: must be more than 0", param, ctx)
        return seconds


class _Deadline(click.ParamType[str]):
    """A deadline flag: HH:MM (the next such local time) or an ISO date and time."""

    name = "time"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        from evalpipe.config import parse_deadline

        try:
            return parse_deadline(value)
        except ValueError as exc:
            self.fail(str(exc), param, ctx)


def guard_options(func: F) -> F:
    """--max-cost / --max-duration / --deadline on a command (`plan` and `run` alike)."""
    options = (
        click.option(
            "--max-cost",
            type=click.FloatRange(min=0, min_open=True),
            default=None,
            metavar="USD",
            help="Cost cap in dollars (limits.max_cost_usd; needs a price, `pricing`): never "
            "send a request whose estimated cost would pass it with what is spent and in "
            "flight; then stop as after SIGTERM and exit 6.",
        ),
        click.option(
            "--max-duration",
            type=_Duration(),
            default=None,
            metavar="D",
            help="Stop when the run has taken this long (limits.max_duration): 90s, 30m, "
            "6h, 1h30m. As after SIGTERM, then exit 7; the same command resumes.",
        ),
        click.option(
            "--deadline",
            type=_Deadline(),
            default=None,
            metavar="T",
            help="Stop at this time (limits.deadline): HH:MM, the next such local time, or an "
            "ISO date and time. As after SIGTERM, then exit 7.",
        ),
    )
    for option in reversed(options):
        func = option(func)
    return func


def guard_overrides(flags: dict[str, Any]) -> tuple[str, ...]:
    """The guard flags, taken out of `flags`, as `--set` overrides (JSON values: YAML would
    read 12:30 as a number)."""
    given = {key: flags.pop(flag) for flag, key in _KEYS.items()}
    return tuple(f"limits.{k}={json.dumps(v)}" for k, v in given.items() if v is not None)
