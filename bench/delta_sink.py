"""1M rows into the Delta output vs the Parquet output: the sink alone (`output.format`).

Generating a million rows through the service on a shared two-core machine takes longer than the
sink does, and would measure the service; so this bench feeds each sink a synthetic stream of
finished rows (`RowResult`s with answer dicts, as workers hand them over), batches of 500 rows,
through the sink's real path (open, committed, resume, append, finish), with the default
`part_rows` (5,000: 200 parts, or 200 Delta transactions). Each format runs in a child process of
its own: wall and CPU are the child's, peak RSS its `ru_maxrss` (os.wait4). Then the files: the
Parquet parts; the Delta table's data files and log, before and after `optimize.compact()`.

    .venv/bin/python bench/delta_sink.py [--rows 1000000] [--dir /tmp/evalpipe-bench/sinks]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pyarrow as pa

QUESTIONS: dict[str, Any] = {
    "helpful": {"type": "noul", "instructions": "Does it help?"},
    "sentiment": {"type": "choice", "instructions": "Sentiment?",
                  "criteria": dict.fromkeys(["positive", "negative", "mixed"])},
    "quality": {"type": "score", "instructions": "How good?",
                "criteria": ["poor", "fair", "good", "great"]},
}  # fmt: skip
BATCH = 500


def _answers(i: int) -> dict[str, Any]:
    p = (i * 7919 % 1000) / 1000
    return {
        "helpful": {"type": "noul", "noul": p},
        "sentiment": {"type": "choice", "choice": "positive", "confidence": p / 2,
                      "probabilities": {"positive": p, "negative": (1 - p) / 2,
                                        "mixed": (1 - p) / 2}},
        "quality": {"type": "score", "score": 3 * p, "confidence": p / 3,
                    "probabilities": {"0": 0.1, "1": 0.2, "2": 0.3, "3": 0.4}},
    }  # fmt: skip


def child(kind: str, rows: int, out: Path) -> None:
    """One format's run: open, resume, append `rows` rows in batches, finish."""
    from evalpipe.output import RowResult, Sink, output_schema

    schema = output_schema("doc_id", pa.int64(), QUESTIONS, "https://evals.example.com:443")
    started, cpu = time.monotonic(), time.process_time()
    common: dict[str, Any] = {"run_id": "bench", "write_seconds": 0.1}
    if kind == "delta":
        common.update(format="delta", partition={"dt": "2026-11-27"})
    sink = Sink.open(out, schema, "fp", **common)
    sink.committed()
    sink.resume()
    now = time.time()
    for start in range(0, rows, BATCH):
        batch = [
            RowResult(i, _answers(i), "model-1.13.0", 120, scored_at=now, state_hash=b"\x01" * 16,
                      position=i)
            for i in range(start, min(rows, start + BATCH))
        ]  # fmt: skip
        sink.append(batch)
    sink.finish({"rows": rows})
    wall, cpu = time.monotonic() - started, time.process_time() - cpu
    print(json.dumps({"wall": wall, "cpu": cpu}))


def _files(root: Path) -> tuple[int, int, int, int]:
    """(Parquet files, their bytes, other files, their bytes) under `root`."""
    data = [p for p in root.rglob("*") if p.is_file() and p.suffix == ".parquet"]
    other = [p for p in root.rglob("*") if p.is_file() and p.suffix != ".parquet"]
    return (len(data), sum(p.stat().st_size for p in data),
            len(other), sum(p.stat().st_size for p in other))  # fmt: skip


def _active(root: Path) -> tuple[int, int]:
    """(files, bytes) of the Delta table's current version."""
    from deltalake import DeltaTable

    actions = pa.table(DeltaTable(str(root)).get_add_actions(flatten=True))
    return actions.num_rows, sum(actions["size_bytes"].to_pylist())


def run(kind: str, rows: int, out: Path) -> dict[str, Any]:
    shutil.rmtree(out, ignore_errors=True)
    args = [sys.executable, __file__, "--child", kind, "--rows", str(rows), "--out", str(out)]
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, env=os.environ)
    assert proc.stdout is not None
    text = proc.stdout.read()
    _, status, usage = os.wait4(proc.pid, 0)
    assert status == 0, text
    result: dict[str, Any] = json.loads(text.splitlines()[-1])
    result["peak_rss_mib"] = usage.ru_maxrss / 1024
    result["files"] = _files(out)
    return result


def compact(out: Path) -> dict[str, Any]:
    from deltalake import DeltaTable

    before = _active(out)
    started = time.monotonic()
    metrics = DeltaTable(str(out)).optimize.compact()
    seconds = time.monotonic() - started
    counts = {k: metrics.get(k) for k in ("numFilesAdded", "numFilesRemoved")}
    return {"before": before, "after": _active(out), "seconds": seconds, "metrics": counts}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--dir", type=Path, default=Path("/tmp/evalpipe-bench/sinks"))
    parser.add_argument("--child")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    if args.child:
        child(args.child, args.rows, args.out)
        return
    mib = 1024 * 1024
    print(f"{args.rows:,} rows, batches of {BATCH}, part_rows 5000; load {os.getloadavg()[0]:.1f}")
    for kind in ("parquet", "delta"):
        out = args.dir / kind
        r = run(kind, args.rows, out)
        n, size, other, other_size = r["files"]
        print(f"{kind:8} wall {r['wall']:.2f} s  cpu {r['cpu']:.2f} s  peak RSS "
              f"{r['peak_rss_mib']:.0f} MiB  {n} data files {size / mib:.1f} MiB  "
              f"{other} other files {other_size / 1024:.0f} KiB")  # fmt: skip
        if kind == "delta":
            c = compact(out)
            print(f"{'':8} optimize.compact() {c['seconds']:.2f} s: active files "
                  f"{c['before'][0]} ({c['before'][1] / mib:.1f} MiB) -> {c['after'][0]} "
                  f"({c['after'][1] / mib:.1f} MiB)")  # fmt: skip


if __name__ == "__main__":
    main()
