"""The report's output-wide figures: outcomes, cost, models, runs and throughput.

A 1M-row output must be reported in seconds and bounded memory, so every figure is an
aggregate that polars' streaming engine computes over a lazy scan of the parts (counts
per group, sums, means); no query returns more than a few hundred rows, so the charting
library never sees a row of the output itself. Each function takes an opened `Output` and
returns a small `pl.DataFrame` (or a dict of figures) ready to chart or print; the notebook
calls the same ones. The per-question figures are in `questions`.
"""

from __future__ import annotations

from typing import Any

import polars as pl
import pyarrow as pa

from evalpipe.reading import Output

ANSWERED = "answered"
MAX_RUN_LINES = 8  # throughput lines: the last runs of the output
MAX_RUNS = 30  # runs drawn and listed: the last ones (a nightly job makes hundreds)


def collect(frame: pl.LazyFrame) -> pl.DataFrame:
    """Run a query on the streaming engine, which reads the parts in batches."""
    return frame.collect(engine="streaming")


# --------------------------------------------------------------------------- outcomes


def outcomes(out: Output) -> pl.DataFrame:
    """Rows per outcome (answered, or each error type) with an example message per type."""
    table = collect(
        out.scan()
        .group_by(pl.col("_error_type").fill_null(ANSWERED).alias("outcome"))
        .agg(pl.len().alias("rows"), pl.col("_error").drop_nulls().first().alias("example"))
    )
    first = (pl.col("outcome") != ANSWERED).cast(pl.Int8)
    return table.with_columns(share=pl.col("rows") / pl.col("rows").sum()).sort(
        first, pl.col("rows"), descending=[False, True]
    )


# --------------------------------------------------------------------------- cost


def cost(out: Output) -> dict[str, Any]:
    """Rows, tokens and dollars; rows reused within their run and answered from the cache
    (None where the output has no such column)."""
    figures: list[pl.Expr] = [
        pl.len().alias("rows"),
        pl.col("_error_type").is_null().sum().alias("answered"),
        pl.col("_input_tokens").sum().alias("input_tokens"),
        (pl.col("_error_type").is_null() & (pl.col("_input_tokens") == 0))
        .sum()
        .alias("answered_unbilled"),
    ]
    if out.has("_reused"):
        figures.append(pl.col("_reused").sum().alias("reused"))
    if out.has("_cached"):
        cached = pl.col("_cached").cast(pl.Int64)  # a count before schema version 2, then a flag
        figures.append((cached > 0).sum().alias("cached_rows"))
        if out.schema.field("_cached").type != pa.bool_():
            figures.append(cached.sum().alias("cached_questions"))
    row = collect(out.scan().select(figures)).row(0, named=True)
    row = {k: int(v or 0) for k, v in row.items()}
    row.setdefault("reused", None)
    row.setdefault("cached_rows", None)
    row.setdefault("cached_questions", None)
    per_million, source = _price(out.manifest)
    row["usd"] = None if per_million is None else row["input_tokens"] * per_million / 1e6
    row["price_per_million"], row["price_source"] = per_million, source
    return row


def _price(manifest: dict[str, Any] | None) -> tuple[float | None, str]:
    """The price the latest run used (the config's `pricing`), and where it came from. Outputs
    written before the price was the user's say it by their cost; without either, unknown."""
    summary = (manifest or {}).get("summary") or {}
    if "price_source" in summary:
        return summary.get("price_per_million_input_tokens"), str(summary["price_source"])
    tokens, usd = summary.get("input_tokens"), summary.get("cost_usd")
    if tokens and usd is not None:
        return usd / tokens * 1e6, "the cost its summary recorded"
    return None, "no price recorded"


def how_answered(figures: dict[str, Any]) -> pl.DataFrame:
    """Answered rows by how they got their answer: sent and billed, reused from an identical
    state in the run, from the cache, or neither known (older outputs)."""
    answered_rows = figures["answered"]
    reused, cached = figures["reused"] or 0, figures["cached_rows"] or 0
    unbilled = figures["answered_unbilled"]
    parts = {
        "sent (billed)": answered_rows - unbilled,
        "reused within the run": reused,
        "from the answer cache": cached,
    }
    rest = unbilled - reused - cached
    if rest > 0:
        parts["unbilled, source not recorded"] = rest
    return pl.DataFrame({"how": list(parts), "rows": list(parts.values())})


def models(out: Output) -> pl.DataFrame:
    """Who answered: rows and input tokens per service and model (the service is "not
    recorded" in outputs written before rows named it)."""
    service = pl.col("_service") if out.has("_service") else pl.lit("not recorded")
    return collect(
        out.scan()
        .filter(pl.col("_model").is_not_null())
        .group_by(service.alias("service"), pl.col("_model").alias("model"))
        .agg(pl.len().alias("rows"), pl.col("_input_tokens").sum().alias("input_tokens"))
        .sort("rows", "service", "model", descending=[True, False, False])
    )


# --------------------------------------------------------------------------- runs


def _run_row(run_id: str, summary: dict[str, Any], run: dict[str, Any]) -> dict[str, Any]:
    errors = summary.get("rows_in_error") or {}
    return {
        "run": run_id,
        "started": run.get("started"),
        "ended_how": run.get("ended_how"),
        "rows_answered": summary.get("rows_answered"),
        "rows_in_error": sum(errors.values()) if isinstance(errors, dict) else errors,
        "rows_reused": summary.get("rows_reused_identical_state"),
        "rows_from_cache": summary.get("rows_from_cache"),
        "requests": summary.get("requests"),
        "rate_limited_429": summary.get("rate_limited_429"),
        "wall_seconds": summary.get("wall_seconds"),
        "achieved_rpm": summary.get("achieved_rpm"),
        "rpm_limit": summary.get("rpm_limit"),
        "achieved_tps": summary.get("achieved_tps"),
        "tps_limit": summary.get("tps_limit"),
        "cost_usd": summary.get("cost_usd"),
    }


RUN_SCHEMA = {
    "run": pl.String,
    "started": pl.String,
    "ended_how": pl.String,
    "rows_answered": pl.Int64,
    "rows_in_error": pl.Int64,
    "rows_reused": pl.Int64,
    "rows_from_cache": pl.Int64,
    "requests": pl.Int64,
    "rate_limited_429": pl.Int64,
    "wall_seconds": pl.Float64,
    "achieved_rpm": pl.Float64,
    "rpm_limit": pl.Float64,
    "achieved_tps": pl.Float64,
    "tps_limit": pl.Float64,
    "cost_usd": pl.Float64,
}


def runs(out: Output) -> pl.DataFrame:
    """One row per run from the manifest: its `runs` list, or (older outputs) the last run's
    top-level `summary`. Missing keys are null; an output without a manifest has no rows."""
    manifest = out.manifest or {}
    history = manifest.get("runs")
    rows = []
    if isinstance(history, list) and history:
        for i, run in enumerate(r for r in history if isinstance(r, dict)):
            raw = run.get("summary")
            summary = raw if isinstance(raw, dict) else {}
            rows.append(_run_row(str(run.get("run_id") or f"run {i + 1}"), summary, run))
    elif isinstance(manifest.get("summary"), dict):
        rows.append(_run_row("last run", manifest["summary"], {"started": manifest.get("created")}))
    frame = pl.DataFrame(rows, schema=list(RUN_SCHEMA), orient="row", strict=False)
    return frame.cast(RUN_SCHEMA, strict=False)  # type: ignore[arg-type]


_STEPS_MS = (100, 250, 500, 1000, 2000, 5000, 10_000, 30_000, 60_000, 300_000, 600_000,
             1_800_000, 3_600_000, 6 * 3_600_000, 86_400_000)  # fmt: skip


def _bucket_ms(span_ms: float, buckets: int = 90) -> int:
    """The smallest round bucket width that cuts `span_ms` into at most `buckets` buckets."""
    return next((s for s in _STEPS_MS if span_ms / s <= buckets), _STEPS_MS[-1])


def throughput(out: Output) -> pl.DataFrame:
    """Rows finished per minute in buckets of time since each run's first row (`seconds`),
    one series per run (the last runs by start), from `_scored_at`; a bucket with no answer
    counts 0, so a stall shows. Empty without that column."""
    if not out.has("_scored_at"):
        return pl.DataFrame()
    run = pl.col("_run_id").fill_null("(no run id)") if out.has("_run_id") else pl.lit("all rows")
    stamped = out.scan().filter(pl.col("_scored_at").is_not_null()).with_columns(run.alias("run"))
    epoch = pl.col("_scored_at").dt.epoch("ms")
    spans = collect(stamped.group_by("run").agg(first=epoch.min(), last=epoch.max()))
    if spans.is_empty():
        return pl.DataFrame()
    spans = spans.sort("first").tail(MAX_RUN_LINES)
    longest = (spans["last"] - spans["first"]).max()
    width = _bucket_ms(float(longest) if isinstance(longest, int | float) else 0.0)
    bucket = (epoch - pl.col("first")) // width
    counts = collect(
        stamped.join(spans.lazy(), on="run").group_by("run", bucket.alias("bucket")).len("rows")
    )
    grid = spans.select(
        "run", bucket=pl.int_ranges(0, (pl.col("last") - pl.col("first")) // width + 1)
    ).explode("bucket")
    return (
        grid.join(counts, on=["run", "bucket"], how="left")
        .with_columns(pl.col("rows").fill_null(0))
        .with_columns(
            seconds=pl.col("bucket") * width / 1000, rows_per_minute=pl.col("rows") * 60_000 / width
        )
        .sort("run", "bucket")
        .drop("bucket")
    )
