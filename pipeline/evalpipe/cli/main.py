"""The `evalpipe` command: run, plan, models, serve, report, cache, describe, diff, agree,
calibrate, sample, infer, browse and maintain.

Every evalpipe error ends the command with one line on stderr (`ErrorType: what went wrong and
what to do`) and its exit code: 2 for bad config or input found before any request, 3 when the
service refuses the key, 1 for anything else fatal. A finished job exits 0 even when some rows
ended in error; the summary counts them. `run` is `evalpipe.session.launch`'s (signals, the lock,
the JSON log, exit codes 4, 5, 130 and 143).
"""

from __future__ import annotations

import importlib
import json
import os
import sys
import time
from pathlib import Path
from typing import Any, ClassVar

import click

from evalpipe.cli.guards import exit_code_epilog, guard_options, guard_overrides
from evalpipe.cli.options import (
    SET,
    fail,
    file_flag,
    log_format,
    reports_errors,
    rows,
    scrub_tracebacks,
    selection,
    warn,
)
from evalpipe.engine import GRACE_SECONDS, StopSignals
from evalpipe.errors import CanaryFailed, EvalpipeError, OutputLocked


class LazyGroup(click.Group):
    """A group whose heavy subcommands are imported only when used (Click's documented
    pattern): `evalpipe run` must not pay for importing the reference service's web server."""

    lazy: ClassVar[dict[str, str]] = {
        "serve": "evalpipe.service.command:serve",
        "report": "evalpipe.cli.report:report",
        "cache": "evalpipe.cli.cache:cache",
        "init": "evalpipe.cli.init:init",
        "describe": "evalpipe.cli.analysis:describe",
        "diff": "evalpipe.cli.analysis:diff",
        "agree": "evalpipe.cli.analysis:agree",
        "estimate": "evalpipe.cli.estimate:estimate",
        "calibrate": "evalpipe.cli.calibrate:calibrate",
        "infer": "evalpipe.cli.infer:infer",
        "sample": "evalpipe.cli.infer:sample",
        "browse": "evalpipe.cli.browse:browse",
        "maintain": "evalpipe.cli.maintain:maintain",
    }

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted([*super().list_commands(ctx), *self.lazy])

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in self.lazy:
            module, _, name = self.lazy[cmd_name].partition(":")
            return getattr(importlib.import_module(module), name)
        return super().get_command(ctx, cmd_name)


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]},
             epilog=exit_code_epilog())  # fmt: skip
@click.version_option(package_name="evalpipe")
def main() -> None:
    """Score a Parquet corpus with the evaluation service, as fast as the account's limits
    allow and never faster, writing one flat Parquet row of answers per input row.

    \b
    Start with:  evalpipe init PARQUET  (write a job config for a corpus)
    then:        evalpipe plan CONFIG   (validate, count, estimate; sends nothing)
    and:         evalpipe run CONFIG    (run, or resume an interrupted run)
    """
    scrub_tracebacks()


RUN_HELP = f"""Run the job in CONFIG, or resume it where the last run stopped.

    Rows already committed in output.path are not sent again; rows that ended in a
    retryable error (rate_limited, overloaded, server_error, network, invalid_response)
    are tried again. A config whose questions, model or state mapping changed is refused
    unless --restart is given. One run per output at a time: a second one exits
    {OutputLocked.exit_code}.
    """  # its exit codes are the code's (evalpipe.errors), as the epilog's are


@main.command(epilog=exit_code_epilog(), help=RUN_HELP)
@click.argument("config", type=click.Path(path_type=Path))
@SET
@rows
@guard_options
@click.option("--restart", is_flag=True, help="Discard committed output and start over.")
@click.option(
    "--ray-address",
    default=None,
    metavar="ADDR",
    help="Join this Ray cluster instead of starting a local Ray. The API-key variable must "
    "be set where the workers run.",
)
@click.option(
    "--progress-interval",
    default=10.0,
    show_default=True,
    help="Seconds between progress lines when stderr is not a terminal.",
)
@log_format(
    "json: every line on stderr is one JSON object (events start, progress, warning, error, "
    "stopped, summary), and nothing else is printed."
)
@click.option(
    "--grace-seconds",
    type=click.FloatRange(min=0),
    default=GRACE_SECONDS,
    show_default=True,
    help="On SIGTERM or SIGINT, how long the requests in flight may finish before the run "
    "stops (a second signal stops at once).",
)
@click.option(
    "--max-error-rate",
    type=click.FloatRange(0, 1),
    default=None,
    metavar="R",
    help="Exit 4 (after writing everything) when more than this share of the rows with a "
    "valid state ended in an error, e.g. 0.05.",
)
@click.option(
    "--metrics-port",
    type=click.IntRange(0, 65535),
    default=None,
    metavar="P",
    help="Serve Prometheus metrics on http://HOST:P/metrics while the run lasts (0: a free "
    "port, said in the log); the same as --set metrics.port=P.",
)
@click.option(
    "--pushgateway",
    default=None,
    metavar="URL",
    help="Push the metrics to this Prometheus Pushgateway at the start, every few seconds "
    "and at the end, grouped by job and output; the same as --set metrics.pushgateway=URL.",
)
@file_flag(
    "--calibration",
    help="Add calibrated columns from this file of evalpipe calibrate; the same as --set "
    "calibration.file=FILE.",
)
@file_flag(
    "--canary",
    help=f"Ask these labelled rows fresh before the corpus and stop (exit "
    f"{CanaryFailed.exit_code}) when the judge moved; the same as --set canary.labels=FILE.",
)
def run(config: Path, **flags: Any) -> None:
    """Run the job in CONFIG, or resume it where the last run stopped (the help: RUN_HELP)."""
    started = time.monotonic()
    stop = StopSignals()  # first, before the imports: a stop during start-up is a clean one
    stop.install()
    from evalpipe.session import tier_refuses

    flags["overrides"] = (
        tuple(flags["overrides"])
        + _metrics_overrides(flags.pop("metrics_port"), flags.pop("pushgateway"))
        + guard_overrides(flags)
        + _trust_overrides(flags.pop("calibration"), flags.pop("canary"))
    )
    refused = tier_refuses(config, flags["overrides"], flags["log_format"])
    if refused is not None:  # before the engine loads: a wrong tier password is said at once
        sys.exit(refused)
    from evalpipe.session import RunOptions, run_command

    try:
        flags["rows"] = selection(flags.pop("limit"), flags.pop("sample"), flags.pop("seed"))
    except EvalpipeError as exc:
        fail(exc)
    code = run_command(RunOptions(config, **flags), started, stop)
    if stop.requested:
        # Everything is written and said. After SIGTERM to the process group, Ray's processes
        # are dying under us, and tearing down its native threads at interpreter exit can
        # crash (SIGSEGV): leave without the teardown.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    sys.exit(code)


def _metrics_overrides(port: int | None, gateway: str | None) -> tuple[str, ...]:
    """--metrics-port and --pushgateway as the config overrides they stand for."""
    found = () if port is None else (f"metrics.port={port}",)
    return found + (() if gateway is None else (f"metrics.pushgateway={json.dumps(gateway)}",))


def _trust_overrides(calibration: Path | None, canary: Path | None) -> tuple[str, ...]:
    """--calibration and --canary as the config overrides they stand for."""
    found = () if calibration is None else (f"calibration.file={json.dumps(str(calibration))}",)
    return found + (() if canary is None else (f"canary.labels={json.dumps(str(canary))}",))


@main.command()
@click.argument("config", type=click.Path(path_type=Path))
@SET
@rows
@guard_options
@click.option("--json", "as_json", is_flag=True, help="Print the figures as JSON.")
@click.option(
    "--calibrate",
    type=click.IntRange(min=1),
    default=None,
    metavar="N",
    help="First send N real requests (billed, and reported) with states of the corpus, to "
    "measure how the service counts tokens; then plan and estimate by its count. With "
    "packing.rows: auto, also ask N rows alone and packed to measure agreement and cost.",
)
@reports_errors
def plan(
    config: Path,
    overrides: tuple[str, ...],
    as_json: bool,
    calibrate: int | None,
    **flags: Any,
) -> None:
    """Validate CONFIG and estimate the job: rows, distinct states, requests after splitting,
    tokens, cost and the shortest time the limits allow. Sends no request, unless
    --calibrate N asks for N to measure the service's token count.

    Tokens are counted with evalpipe's tokenizer (a word or a punctuation mark is a token);
    the service counts with its own, which may differ. With --max-cost, --max-duration or
    --deadline (or their limits keys), it says whether the corpus fits under them."""
    from evalpipe.config import load_config
    from evalpipe.planning import prepare
    from evalpipe.preflight import format_plan
    from evalpipe.session import plan_job

    overrides = tuple(overrides) + guard_overrides(flags)
    prepared = prepare(load_config(config, overrides), selection(**flags))
    warn(prepared.warnings)
    figures = plan_job(prepared, calibrate)
    click.echo(json.dumps(figures, indent=2) if as_json else format_plan(figures))


@main.command()
@click.option(
    "--config",
    "config_path",
    type=click.Path(path_type=Path),
    help="Take the service from this job config.",
)
@click.option("--base-url", default=None, help="The service, scheme://host[:port] or 'embedded'.")
@click.option("--api-key-env", default=None, help="The variable that holds the key [EVAL_API_KEY].")
@reports_errors
def models(config_path: Path | None, base_url: str | None, api_key_env: str | None) -> None:
    """List the models and aliases the service accepts."""
    from evalpipe.config import load_config, parse_service
    from evalpipe.errors import ConfigError
    from evalpipe.send import list_models

    if config_path is None and base_url is None:
        raise ConfigError("--base-url: give the service's URL (or 'embedded'), or --config JOB")
    section = load_config(config_path).service.model_dump() if config_path else {}
    given = {"base_url": base_url, "api_key_env": api_key_env}
    service = parse_service({**section, **{k: v for k, v in given.items() if v is not None}})
    for entry in list_models(service):
        click.echo(f"{entry.name}\t{entry.release_date}\t{entry.description}")


if __name__ == "__main__":
    main()
