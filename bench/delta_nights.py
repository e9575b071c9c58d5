"""60 nights into one Delta table on S3 (moto), before and after evalpipe keeps it.

A nightly job appends a partition a night, one commit and one file per part. This bench writes
`--nights` nights of `--rows` rows each with `part_rows` = rows / `--parts` (ten parts a night)
through the sink's real path (`Sink.open(format="delta")`: open, resume, append, finish: the
same commits `evalpipe run` makes), into one table on moto's S3 server (server mode, on
loopback, in this process). Then it prints the active data files per night, and polars' scan
of the whole table and of one night (`pl.scan_delta(...).collect()`, best of `--repeat`);
runs `evalpipe maintain` (the command a scheduler runs, in a process of its own); and prints
the same figures after, with every night checked exact (its ids once, the same rows).
With `--runs N`, the last N nights are real `evalpipe run`s on the embedded service (the
automatic maintenance after each run's commit on), to show a night stays compacted.

    .venv/bin/python bench/delta_nights.py [--nights 60] [--rows 2000] [--parts 10] [--runs 2]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
import yaml

sys.path.insert(0, str(Path(__file__).parent))
from delta_sink import QUESTIONS, _answers
from s3 import BUCKET, s3_server

BATCH = 500
EVALPIPE = [sys.executable, "-m", "evalpipe.cli.main"]


def night(i: int) -> str:
    from datetime import date, timedelta

    return (date(2026, 9, 1) + timedelta(days=i)).isoformat()


def job(out: str, corpus: Path, i: int, part_rows: int) -> dict[str, Any]:
    """Night `i`'s job config (the embedded service): the real runs', and the schema of all."""
    return {
        "input": {"path": str(corpus), "id_column": "doc_id", "state": "text"},
        "output": {"path": out, "format": "delta", "partition": {"dt": night(i)},
                   "part_rows": part_rows},
        "service": {"base_url": "embedded"}, "model": "model-1.13.0",
        "questions": QUESTIONS, "cache": {"enabled": False},
    }  # fmt: skip


def schema_of(config: dict[str, Any]) -> pa.Schema:
    """The output schema a run of `config` writes (its questions, its service, its corpus)."""
    from evalpipe.config import parse_config
    from evalpipe.planning import prepare

    return prepare(parse_config(config)).schema


def write_night(out: str, schema: pa.Schema, i: int, rows: int, part_rows: int) -> None:
    """One night through the Delta sink, as a run commits it."""
    from evalpipe.output import RowResult, Sink

    sink = Sink.open(
        out, schema, "fp", run_id=f"bench-{i}", format="delta", partition={"dt": night(i)},
        part_rows=part_rows, write_seconds=0,
    )  # fmt: skip
    sink.committed()
    sink.resume()
    now = time.time()
    for start in range(0, rows, BATCH):
        sink.append([
            RowResult(k, _answers(k + i), "model-1.13.0", 120, scored_at=now,
                      state_hash=b"\x01" * 16, position=k)
            for k in range(start, min(rows, start + BATCH))
        ])  # fmt: skip
    sink.finish({"rows": rows})


def options() -> dict[str, str]:
    return {"allow_http": "true"}


def scan(out: str, filt: Any = None) -> tuple[float, int]:
    frame = pl.scan_delta(out, storage_options=options())
    if filt is not None:
        frame = frame.filter(filt)
    started = time.perf_counter()
    height = frame.collect().height
    return time.perf_counter() - started, height


def best(out: str, repeat: int, filt: Any = None) -> tuple[float, int]:
    results = [scan(out, filt) for _ in range(repeat)]
    return min(r[0] for r in results), results[0][1]


def files_per_night(out: str) -> dict[str, int]:
    from evalpipe.output.delta.table import load
    from evalpipe.output.delta.upkeep import active_files

    return {k[0]: n for k, n in sorted(active_files(load(out)).items())}


def exact(out: str, nights: int, rows: int) -> bool:
    frame = pl.read_delta(out, storage_options=options()).select("dt", "doc_id")
    counts = frame.group_by("dt").agg(pl.len(), pl.col("doc_id").n_unique())
    ok = counts.height == nights
    return ok and bool((counts["len"] == rows).all() and (counts["doc_id"] == rows).all())


def report(label: str, out: str, nights: int, rows: int, repeat: int) -> dict[str, Any]:
    files = files_per_night(out)
    whole, height = best(out, repeat)
    one, _ = best(out, repeat, pl.col("dt") == night(nights // 2))
    figures = {
        "files": sum(files.values()), "max_files_a_night": max(files.values()),
        "whole_s": whole, "night_s": one, "rows": height, "exact": exact(out, nights, rows),
    }  # fmt: skip
    print(f"{label}: {figures['files']} active files, at most {figures['max_files_a_night']} a "
          f"night; scan of the whole table {whole:.3f} s ({height:,} rows), of one night "
          f"{one:.3f} s; every night exact: {figures['exact']}", flush=True)  # fmt: skip
    return figures


def maintain(out: str, *extra: str) -> float:
    started = time.perf_counter()
    done = subprocess.run([*EVALPIPE, "maintain", out, *extra], capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(done.stderr)
    print(done.stdout.strip())
    return time.perf_counter() - started


def real_runs(out: str, first: int, runs: int, part_rows: int, tmp: Path) -> None:
    """The last nights as real `evalpipe run`s (embedded service), maintenance on."""
    for i in range(first, first + runs):
        config = job(out, tmp / "corpus.parquet", i, part_rows)
        path = tmp / f"night-{i}.yaml"
        path.write_text(yaml.safe_dump(config, sort_keys=False))
        started = time.perf_counter()
        done = subprocess.run([*EVALPIPE, "run", str(path), "--progress-interval", "600"],
                              capture_output=True, text=True, env={**os.environ})  # fmt: skip
        if done.returncode != 0:
            raise SystemExit(done.stderr[-3000:])
        print(f"evalpipe run, night {night(i)}: {time.perf_counter() - started:.1f} s; active "
              f"files that night: {files_per_night(out)[night(i)]}", flush=True)  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--nights", type=int, default=60)
    parser.add_argument("--rows", type=int, default=2000)
    parser.add_argument("--parts", type=int, default=10)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--runs", type=int, default=0, help="real `evalpipe run` nights at the end")
    args = parser.parse_args()
    part_rows = args.rows // args.parts
    with s3_server(), tempfile.TemporaryDirectory() as tmp:
        os.environ["XDG_CACHE_HOME"] = str(Path(tmp) / "cache")
        os.environ.setdefault("EVAL_API_KEY", "bench-key")
        out = f"s3://{BUCKET}/nightly"
        corpus = Path(tmp) / "corpus.parquet"
        texts = [f"Review {k}: it works." for k in range(args.rows)]
        pq.write_table(pa.table({"doc_id": range(args.rows), "text": texts}), corpus)
        schema = schema_of(job(out, corpus, 0, part_rows))
        started = time.perf_counter()
        for i in range(args.nights):
            write_night(out, schema, i, args.rows, part_rows)
        print(f"{args.nights} nights x {args.rows:,} rows, {args.parts} parts a night, written "
              f"in {time.perf_counter() - started:.1f} s", flush=True)  # fmt: skip
        before = report("before", out, args.nights, args.rows, args.repeat)
        took = maintain(out)
        print(f"evalpipe maintain: {took:.1f} s (the process)")
        after = report("after", out, args.nights, args.rows, args.repeat)
        print(f"whole-table scan after / before: {after['whole_s'] / before['whole_s']:.2f}; "
              f"one night: {after['night_s'] / before['night_s']:.2f}")  # fmt: skip
        if args.runs:
            real_runs(out, args.nights, args.runs, part_rows, Path(tmp))
            report("after the real runs", out, args.nights + args.runs, args.rows, args.repeat)


if __name__ == "__main__":
    main()
