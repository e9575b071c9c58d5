"""How long `evalpipe report` takes on a 1M-row output, and how much memory it holds (issue 15).

The target: at most 30 s and bounded memory for 1M rows. The output is synthetic but has the
table's own schema (schema version 2: `evalpipe.output.output_schema` names and describes
every column, so the bench never spells a column name itself): 200 parts of 5,000 rows, every
lineage column, a manifest with three runs, 3% error rows, and four questions, one of them a
choice of 255 options (the most the report must draw readably). It is written once under
BENCH_DIR and reused (a version-1 output left there by an older bench is written again);
`--rewrite` makes it again.

    .venv/bin/python bench/report_1m.py [--rows 1000000] [--repeat 3] [--rewrite]

The report runs as a subprocess (`evalpipe report OUT --html FILE`), timed from outside; its
CPU time and peak RSS are the child's own (os.wait4).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq

from evalpipe.output import SCHEMA_VERSION, output_schema, schema_layout, schema_version

BENCH_DIR = Path(os.environ.get("EVALPIPE_BENCH_DIR", "/tmp/evalpipe-bench"))
EVALPIPE = str(Path(sys.executable).with_name("evalpipe"))
PART_ROWS = 5000
RUNS = 3
ERRORS = ["rate_limited", "invalid_state", "context_limit", "server_error"]
QUESTIONS: dict[str, dict[str, object]] = {  # as a job config's `questions`
    "helpful": {"type": "noul", "instructions": "Does it help?"},
    "sentiment": {"type": "choice", "instructions": "Sentiment?",
                  "criteria": dict.fromkeys(["positive", "negative", "mixed", "neutral"])},
    "category": {"type": "choice", "instructions": "Which category?",
                 "criteria": dict.fromkeys(f"Category {i:03d}" for i in range(255))},
    "quality": {"type": "score", "instructions": "How good?",
                "criteria": ["awful", "poor", "fair", "good", "great"]},
}  # fmt: skip
SCHEMA = output_schema("doc_id", pa.int64(), QUESTIONS, "https://evals.example.com:443")
START = datetime(2026, 11, 20, 1, 0, tzinfo=UTC)


def _uniform(n: pl.Expr, seed: int) -> pl.Expr:
    """A reproducible uniform [0, 1) per row from the row number (no numpy needed)."""
    return (n.hash(seed) // 2048).cast(pl.Float64) / float(1 << 53)


def _distribution(frame: pl.DataFrame, columns: list[str], seed: int) -> pl.DataFrame:
    """Probabilities in `columns`, skewed (Zipf-like popularity) and summing to 1."""
    n = pl.col("n")
    weights = frame.select(
        (_uniform(n, seed + i) ** 4 / (i + 1)).alias(name) for i, name in enumerate(columns)
    )
    return weights.select(pl.all() / pl.sum_horizontal(pl.all()))


def _question(
    frame: pl.DataFrame, key: str, kind: str, probs: list[str], names: list[str], seed: int
) -> pl.DataFrame:
    """One question's columns, named as the table names them (`schema_layout`'s `names`)."""
    n = pl.col("n")
    if kind == "noul":
        return frame.select(_uniform(n, seed).alias(f"{key}__p_true"))
    p = _distribution(frame, [f"{key}__p__{name}" for name in names], seed)
    stacked = pl.concat_list(p.columns)
    if kind == "choice":
        head = stacked.list.arg_max().replace_strict(list(range(len(probs))), probs)
    else:
        head = pl.sum_horizontal(pl.col(c) * i for i, c in enumerate(p.columns))
    return p.select(
        head.alias(f"{key}__{kind}"), stacked.list.max().alias(f"{key}__confidence"), pl.all()
    )


def _meta(frame: pl.DataFrame, total: int) -> pl.DataFrame:
    n = pl.col("n")
    u = _uniform(n, 999)
    error = pl.when(u < 0.03).then(pl.lit(ERRORS).list.get((u * 1000).cast(pl.Int64) % 4))
    run = (n * RUNS // total).cast(pl.Int64)
    reused = _uniform(n, 998) < 0.02
    cached = _uniform(n, 997) < 0.1
    scored = pl.lit(START) + pl.duration(hours=run * 24, milliseconds=(n % (total // RUNS)) * 3)
    return frame.select(
        n.alias("_row"),
        pl.when(_uniform(n, 996) < 0.9).then(pl.lit("model-1.13.0"))
        .otherwise(pl.lit("model-1.12.0")).alias("_model"),
        pl.lit("https://evals.example.com:443").alias("_service"),
        pl.when(error.is_null() & ~reused & ~cached).then((u * 1800 + 200).cast(pl.Int64))
        .otherwise(0).alias("_input_tokens"),
        error.alias("_error_type"),
        pl.when(error.is_not_null()).then(pl.format("the row ended {}", error)).alias("_error"),
        pl.format("run-{}", run).alias("_run_id"),
        scored.dt.cast_time_unit("ms").alias("_scored_at"),
        n.hash(5).cast(pl.String).alias("_state_hash"),
        cached.alias("_cached"),
        reused.alias("_reused"),
    )  # fmt: skip


def part(start: int, rows: int, total: int) -> pa.Table:
    """Rows `start`.. of the output, in the table's schema (its descriptions and layout)."""
    frame = pl.DataFrame({"n": pl.int_range(start, start + rows, eager=True)})
    answers = [
        _question(frame, key, kind, probs, names, 10 * i)
        for i, (key, kind, probs, names) in enumerate(schema_layout(SCHEMA))
    ]
    meta = _meta(frame, total)
    answered = meta["_error_type"].is_null()
    answers = [a.select(pl.when(answered).then(pl.all())) for a in answers]  # errors: null answers
    rows = pl.concat([frame.select(pl.col("n").alias("doc_id")), *answers, meta], how="horizontal")
    return rows.select(SCHEMA.names).to_arrow().cast(SCHEMA)


def write_output(out: Path, total: int) -> None:
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    for i, start in enumerate(range(0, total, PART_ROWS)):
        table = part(start, min(PART_ROWS, total - start), total)
        pq.write_table(table, out / f"part-{i:05d}-{uuid.uuid4().hex}.parquet", compression="zstd")
    runs = [
        {
            "run_id": f"run-{r}",
            "started": (START + timedelta(days=r)).isoformat(),
            "ended": (START + timedelta(days=r, seconds=total // RUNS * 0.003)).isoformat(),
            "ended_how": "finished",
            "summary": {"rows_total": total, "rows_answered": total // RUNS, "rate_limited_429": r,
                        "wall_seconds": total // RUNS * 0.003, "achieved_rpm": 1150.0},
        }
        for r in range(RUNS)
    ]  # fmt: skip
    manifest = {"format": 2, "schema_version": SCHEMA_VERSION, "runs": runs,
                "summary": runs[-1]["summary"], "rows": total}  # fmt: skip
    (out / "_manifest.json").write_text(json.dumps(manifest, indent=2))


def _current(out: Path) -> bool:
    """Whether `out` holds an output this bench wrote in the current schema version."""
    parts = sorted(out.glob("part-*.parquet"))
    if not (out / "_manifest.json").exists() or not parts:
        return False
    return schema_version(pq.read_schema(parts[0])) == SCHEMA_VERSION


def time_report(out: Path, html: Path) -> tuple[float, float, float]:
    """(wall seconds, CPU seconds, peak RSS in MiB) of one `evalpipe report` subprocess."""
    return time_command(["report", str(out), "--html", str(html)])


def time_command(args: list[str]) -> tuple[float, float, float]:
    """(wall seconds, CPU seconds, peak RSS in MiB) of one `evalpipe ARGS` subprocess; wait4
    gives the resource usage of that child alone. CPU seconds vary less with the machine's
    load than wall seconds do."""
    with tempfile.TemporaryFile() as err:
        started = time.perf_counter()
        child = subprocess.Popen([EVALPIPE, *args], stdout=subprocess.DEVNULL, stderr=err)
        _, status, usage = os.wait4(child.pid, 0)
        seconds = time.perf_counter() - started
        child.returncode = os.waitstatus_to_exitcode(status)
        if child.returncode != 0:
            err.seek(0)
            why = err.read().decode().strip()
            sys.exit(f"evalpipe {args[0]} failed ({child.returncode}): {why}")
    return seconds, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024  # Linux: KiB


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--rewrite", action="store_true")
    args = parser.parse_args()
    out = BENCH_DIR / f"report-{args.rows}"
    if args.rewrite or not _current(out):
        started = time.perf_counter()
        write_output(out, args.rows)
        print(f"wrote {out} in {time.perf_counter() - started:.1f} s", flush=True)
    size = sum(p.stat().st_size for p in out.glob("part-*.parquet")) / 2**20
    html = BENCH_DIR / f"report-{args.rows}.html"
    print(f"{args.rows:,} rows, {size:,.0f} MiB of parts, load {os.getloadavg()[0]:.2f}")
    for _ in range(args.repeat):
        seconds, cpu, rss = time_report(out, html)
        page = html.stat().st_size / 1024
        load = os.getloadavg()[0]
        figures = (
            f"{seconds:.1f} s ({cpu:.1f} s CPU), peak RSS {rss:,.0f} MiB, page {page:,.0f} KiB"
        )
        print(f"  evalpipe report: {figures}, load {load:.2f}", flush=True)


if __name__ == "__main__":
    main()
