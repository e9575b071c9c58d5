"""`evalpipe_asset`: a job config as a Dagster asset, one partition a day, whose materialization
records what the run did and whose retry, or second materialization, pays nothing twice.

Each materialization runs `evalpipe run`'s own sequence in the step
(`evalpipe.session.run_scheduled`) on the partition's slice of the output: a Delta table's
`output.partition` (`{dt: 2026-11-27}`), or a Parquet output's folder of the day
(`OUT/dt=2026-11-27`). Rows committed before are skipped, so a partition materialized again (a
backfill, a retry) pays only for what is not in it yet: nothing, when it is whole.

The materialization's metadata (`metadata`): rows by outcome (answered, in error by type, from
the cache, committed earlier), the rows in the partition (`dagster/row_count`), requests,
tokens billed and their cost, the table (its URI, partition and Delta version), and the run's
summary as Markdown. Its check (`check_specs`): the error rate (the share of valid rows in
error, against `max_error_rate`).

A run that cannot finish raises `dagster.Failure` with the run's one line: without a retry
(`allow_retries=False`) where no retry mends it (`evalpipe.errors.NO_RETRY_EXIT_CODES`: a bad
config or input, a refused key, the cost cap, the canary; too many rows in error is the error
rate's check here, never the run's end), else with one, which the asset's `retry_policy` makes,
and which resumes.
"""

# No `from __future__ import annotations`: Dagster reads the compute function's annotation of
# `context` as a class, not a string.
import dataclasses
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import dagster as dg

from evalpipe.config import load_config
from evalpipe.errors import EvalpipeError
from evalpipe.session import Ran, Scheduled, error_rate, run_scheduled

ERROR_RATE = "error_rate"
PARTITION = "{partition}"  # in an override: the partition's key (`input.path=.../dt={partition}/`)
# A job whose config has a canary (`canary.labels`) gets a check of its own, named CANARY:
# `canary_checks` declares it, and `scored` yields its result from the run's summary
# (`summary["canary"]`) beside the error rate's. A failed canary ends the run before the corpus
# (exit 8, in `NO_RETRY_EXIT_CODES`): the materialization fails without a retry.
CANARY = "canary"


def evalpipe_asset(
    config: str | Path,
    *,
    name: str,
    start_date: str | None = None,
    partitions_def: dg.PartitionsDefinition | None = None,
    partition_column: str = "dt",
    overrides: Sequence[str] = (),
    max_cost: float | None = None,
    max_duration: float | str | None = None,
    deadline: str | None = None,
    max_error_rate: float | None = None,
    ray_address: str | None = None,
    **asset_options: Any,
) -> dg.AssetsDefinition:
    """The asset `name` over the job config at `config`: daily partitions from `start_date`
    (or `partitions_def`; neither: one unpartitioned asset), each named `partition_column`
    in the output. `overrides` are `--set` strings, where `{partition}` stands for the
    partition's key (`"input.path=s3://corpora/dt={partition}/"`); `max_cost`,
    `max_duration` and `deadline` the guard rails; `max_error_rate` the error-rate check's
    threshold (unset: the check reports the rate and passes). `asset_options` go to
    `dagster.asset` (`key_prefix`, `group_name`, `deps`, `retry_policy`, ...)."""
    if partitions_def is None and start_date is not None:
        partitions_def = dg.DailyPartitionsDefinition(start_date=start_date)
    checks = [
        dg.AssetCheckSpec(ERROR_RATE, asset=_key(name, asset_options),
                          description="The share of the rows with a valid state that ended in "
                          "an error, at most max_error_rate."),
        *canary_checks(Path(config), overrides, name, asset_options),
    ]  # fmt: skip
    job = Scheduled(
        Path(config), tuple(overrides), max_cost=max_cost, max_duration=max_duration,
        deadline=deadline,
    )  # fmt: skip

    @dg.asset(
        name=name,
        partitions_def=partitions_def,
        check_specs=checks,
        kinds={"evalpipe"},
        description=f"Scored by evalpipe with {config}.",
        **asset_options,
    )
    def scored(context: dg.AssetExecutionContext) -> Iterator[Any]:
        key = context.partition_key if context.has_partition_key else None
        ran = run_scheduled(partitioned(job, partition_column, key))
        if ran.exit_code != 0 or ran.summary is None:
            raise dg.Failure(description=ran.message, metadata=_figures(ran),
                             allow_retries=ran.retry)  # fmt: skip
        yield dg.MaterializeResult(metadata=metadata(ran))
        yield _error_rate_check(ran.summary, max_error_rate)
        if len(checks) > 1:
            yield _canary_check(ran.summary)

    return scored


def partitioned(job: Scheduled, column: str, key: str | None) -> Scheduled:
    """`job` on the partition `key` (as `column`), `{partition}` in its overrides replaced by
    the key; `job` as it is when the asset has no partitions."""
    if key is None:
        return job
    overrides = tuple(o.replace(PARTITION, key) for o in job.overrides)
    return dataclasses.replace(job, overrides=overrides, partition={column: key})


def _key(name: str, options: Mapping[str, Any]) -> dg.AssetKey:
    prefix = options.get("key_prefix") or []
    return dg.AssetKey([*([prefix] if isinstance(prefix, str) else prefix), name])


def canary_checks(
    config: Path, overrides: Sequence[str], name: str, options: Mapping[str, Any]
) -> list[dg.AssetCheckSpec]:
    """The canary's check (`CANARY`) of the asset `name` when the job config at `config` (with
    `overrides`) has a canary; none otherwise, or when the config cannot be read yet (the run
    then says why, as its failure)."""
    try:
        labels = load_config(config, [o for o in overrides if PARTITION not in o]).canary.labels
    except EvalpipeError:
        return []
    if labels is None:
        return []
    text = "The canary's rows, asked fresh before the corpus, agreed with their labels and "
    text += "with the last run's answers on the same model (a failure stops the run: exit 8)."
    return [dg.AssetCheckSpec(CANARY, asset=_key(name, options), description=text)]


def metadata(ran: Ran) -> dict[str, Any]:
    """A finished run's materialization metadata (see the module docstring)."""
    summary = ran.summary or {}
    found = _figures(ran)
    found["summary"] = dg.MetadataValue.md(f"```\n{ran.summary_text}\n```")
    in_error = summary.get("rows_in_error", {})
    found["rows_by_outcome"] = dg.MetadataValue.json({
        "answered": summary.get("rows_answered", 0),
        "in_error": dict(in_error),
        "from_cache": summary.get("rows_from_cache", 0),
        "reused_identical_state": summary.get("rows_reused_identical_state", 0),
        "committed_earlier": summary.get("rows_skipped_committed_earlier", 0),
    })  # fmt: skip
    return found


def _figures(ran: Ran) -> dict[str, Any]:
    """The figures any run has (one that failed early has fewer)."""
    found: dict[str, Any] = {"exit_code": ran.exit_code}
    if ran.table is not None:
        found["table_uri"] = dg.MetadataValue.path(ran.table)
    if ran.partition:
        found["partition"] = dg.MetadataValue.json(ran.partition)
    if ran.delta_version is not None:
        found["delta_version"] = ran.delta_version
    if ran.rows_committed is not None:
        found["dagster/row_count"] = ran.rows_committed
    summary = ran.summary
    if summary is not None:
        found["rows_answered"] = summary["rows_answered"]
        found["rows_in_error"] = sum(summary["rows_in_error"].values())
        found["rows_skipped_committed_earlier"] = summary["rows_skipped_committed_earlier"]
        found["requests"] = summary["requests"]
        found["input_tokens"] = summary["input_tokens"]
        if summary.get("cost_usd") is not None:
            found["cost_usd"] = float(summary["cost_usd"])
    return found


def _canary_check(summary: dict[str, Any]) -> dg.AssetCheckResult:
    found = summary.get("canary") or {}
    shown = {k: v for k, v in found.items() if isinstance(v, str | int | float | bool)}
    return dg.AssetCheckResult(check_name=CANARY, passed=bool(found.get("passed", True)),
                               metadata=shown or {"canary": "not asked"})  # fmt: skip


def _error_rate_check(summary: dict[str, Any], most: float | None) -> dg.AssetCheckResult:
    rate = error_rate(summary)
    return dg.AssetCheckResult(
        check_name=ERROR_RATE,
        passed=most is None or rate <= most,
        metadata={"error_rate": rate, "max_error_rate": most if most is not None else "unset"},
    )
