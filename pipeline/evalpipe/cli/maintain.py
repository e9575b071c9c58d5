"""`evalpipe maintain`: a nightly Delta table kept fast, by a command a scheduler runs.

Thin over `evalpipe.output.maintain_output` (every night compacted, a checkpoint, the retention);
a run already keeps the night it wrote (`output.maintain`). With `--config` the table, its
staging folder (where its lock is), the retention and the z-order columns come from a job's
config, as the run holding the output would use them.
"""

from __future__ import annotations

import json
from pathlib import Path

import click

from evalpipe.cli.options import reports_errors


@click.command()
@click.argument("output", required=False)
@click.option(
    "--config",
    "config_path",
    type=click.Path(path_type=Path, dir_okay=False),
    default=None,
    help="Take output.path, output.staging, output.retention_days and output.z_order from this "
    "job config.",
)
@click.option(
    "--retention-days",
    type=click.FloatRange(min=0, min_open=True),
    default=None,
    help="Keep files no current version needs this long (time travel that far) [7, or the "
    "config's output.retention_days].",
)
@click.option(
    "--z-order",
    "z_order",
    multiple=True,
    help="Order each rewritten night by this column (repeat for more) [the config's].",
)
@click.option("--json", "as_json", is_flag=True, help="Print the figures as JSON.")
@reports_errors
def maintain(
    output: str | None,
    config_path: Path | None,
    retention_days: float | None,
    z_order: tuple[str, ...],
    as_json: bool,
) -> None:
    """Keep the Delta table OUTPUT (its root: a folder or an object-store URI) fast: every
    night with more than one data file compacted (a rewrite that changes no row), the table
    checkpointed, and files no version younger than the retention needs removed. Holds the
    output as a run does: OutputLocked at once while a run writes it (a held output: its
    exit code is one a scheduler retries)."""
    from evalpipe.errors import ConfigError
    from evalpipe.output import maintain_output

    staging, days, columns = None, 7.0, tuple(z_order)
    if config_path is not None:
        from evalpipe.config import load_config

        config = load_config(config_path)
        if output is not None:
            raise ConfigError("OUTPUT and --config name the table twice: give one of them")
        output, staging = str(config.output.path), config.output.staging
        days, columns = config.output.retention_days, columns or config.output.z_order
    if output is None:
        raise ConfigError("OUTPUT: name the Delta table (or give --config JOB)")
    done = maintain_output(
        output, retention_days=retention_days or days, z_order=columns, staging=staging
    )
    if as_json:
        click.echo(json.dumps(done, indent=2))
        return
    click.echo(
        f"{output}: {done['files_before']} -> {done['files_after']} data files "
        f"({done['nights_compacted']} nights compacted, {done['files_rewritten']} files "
        f"rewritten); checkpoint at version {done['checkpoint_version']}; "
        f"{done['files_vacuumed']} files removed (older than {retention_days or days:g} days "
        f"and no longer needed); {done['seconds']:.1f} s"
    )
