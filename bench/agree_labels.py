"""How long `evalpipe agree` takes: an output's answers against people's labels.

Each figure comes with a 95% bootstrap interval (1,000 resamples for kappa, Brier, ECE and
rho), so the statistics' cost per resample is what the command's time is made of. The output is
`report_1m.py`'s synthetic table (four questions, one a choice of 255 options), written once
under BENCH_DIR; the labels are drawn at random for the first `--labelled` rows.

    .venv/bin/python bench/agree_labels.py [--rows 20000] [--labelled 2000] [--repeat 3]

`evalpipe agree OUT --labels LABELS --json` runs as a subprocess, timed from outside (wall,
and the child's own CPU and peak RSS).
"""

from __future__ import annotations

import argparse
import os
import random

import polars as pl

from report_1m import BENCH_DIR, QUESTIONS, time_command, write_output


def labels(path: str, rows: int, seed: int = 7) -> None:
    """Random labels for ids 0..rows-1, one column per question, as a person writes them."""
    rng = random.Random(seed)
    columns: dict[str, list[object]] = {"doc_id": list(range(rows))}
    for key, question in QUESTIONS.items():
        criteria = question.get("criteria")
        names = list(criteria) if criteria is not None else ["yes", "no"]
        columns[key] = [rng.choice(names) for _ in range(rows)]  # type: ignore[arg-type]
    pl.DataFrame(columns).write_parquet(path)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=20_000)
    parser.add_argument("--labelled", type=int, default=2_000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    out = BENCH_DIR / f"agree-{args.rows}"
    if not (out / "_manifest.json").exists():
        write_output(out, args.rows)
    labelled = str(BENCH_DIR / f"agree-{args.rows}-labels-{args.labelled}.parquet")
    labels(labelled, args.labelled)
    print(f"{args.rows:,} rows, {args.labelled:,} labelled, load {os.getloadavg()[0]:.2f}")
    for _ in range(args.repeat):
        seconds, cpu, rss = time_command(["agree", str(out), "--labels", labelled, "--json"])
        print(f"  evalpipe agree: {seconds:.2f} s ({cpu:.2f} s CPU), peak RSS {rss:,.0f} MiB, "
              f"load {os.getloadavg()[0]:.2f}", flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
