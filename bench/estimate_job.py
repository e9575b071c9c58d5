"""`evalpipe estimate` as a user runs it, then the full run, on a 4,000-row corpus in 3 strata.

The corpus is data/make_demo.py's generator (4,000 rows, seed 11; the rows without a text to
score left out), its categories grouped into a column `kind` of 3 values. In subprocesses, on
the embedded service: `evalpipe estimate job.yaml --margin 0.03 --by kind --json`, then
`evalpipe run job.yaml` into the same output. The full run's answers are the truth: printed are
the estimate's rows and requests, the widest corpus-wide half-width, how many of its intervals
(corpus-wide and per stratum) miss the truth, and the rows the full run scored after it.

    python bench/estimate_job.py [--margin 0.03] [--seed 0]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import polars as pl
import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "pipeline"), str(ROOT / "tests"), str(ROOT / "data")]

import make_demo  # noqa: E402

from conftest import QUESTIONS  # noqa: E402
from evalpipe.analysis.sampling import variables  # noqa: E402
from evalpipe.reading import open_output as open_table  # noqa: E402

KINDS = {"beauty": "a", "books": "a", "electronics": "b", "grocery": "b"}
EVALPIPE = str(Path(sys.executable).parent / "evalpipe")


def corpus(folder: Path) -> Path:
    make_demo.write(4000, 11, folder / "raw.parquet")
    rows = pl.read_parquet(folder / "raw.parquet")
    rows = rows.filter(pl.col("text").str.strip_chars().str.len_chars() > 0)
    rows = rows.with_columns(pl.col("category").replace_strict(KINDS, default="c").alias("kind"))
    rows.select("review_id", "kind", "text").write_parquet(folder / "in.parquet")
    return folder / "in.parquet"


def config(folder: Path, corpus_path: Path) -> Path:
    job = {
        "input": {"path": str(corpus_path), "id_column": "review_id", "state": "text"},
        "output": {"path": str(folder / "out")},
        "service": {"base_url": "embedded", "api_key_env": "EVAL_API_KEY"},
        "model": "model-1.13.0",
        "pricing": {"default": 0.042},
        "limits": {"requests_per_minute": 60000, "tokens_per_second": 10000000},
        "questions": QUESTIONS,
    }
    path = folder / "job.yaml"
    path.write_text(yaml.safe_dump(job))
    return path


def run(*args: str) -> str:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "pipeline")}
    done = subprocess.run([EVALPIPE, *args], capture_output=True, text=True, env=env, check=True)
    return done.stdout


def misses(document: dict[str, object], out: Path, corpus_path: Path) -> list[str]:
    table = open_table(str(out))
    rows = table.rows.join(pl.read_parquet(corpus_path, columns=["review_id", "kind"]),
                           on="review_id")  # fmt: skip
    found = {(v.question, v.what): v for v in variables(table.questions)}
    missed = []
    for r in document["estimates"]:  # type: ignore[attr-defined]
        v = found[(r["question"], r["what"])]
        part = rows if r["stratum"] is None else rows.filter(pl.col("kind") == r["stratum"])
        true = part.select(v.expr.mean()).item()
        if not r["low"] <= true <= r["high"]:
            missed.append(f"{r['question']} {r['what']} {r['stratum']}: {true:.4f} not in "
                          f"[{r['low']:.4f}, {r['high']:.4f}]")  # fmt: skip
    return missed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--margin", default="0.03")
    parser.add_argument("--seed", default="0")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        os.environ["XDG_CACHE_HOME"] = str(folder / "cache")  # an answer cache of its own
        corpus_path = corpus(folder)
        job = config(folder, corpus_path)
        started = time.monotonic()
        document = json.loads(run("estimate", str(job), "--margin", args.margin, "--by", "kind",
                                  "--seed", args.seed, "--json"))  # fmt: skip
        seconds = time.monotonic() - started
        run("run", str(job))
        manifest = json.loads((folder / "out" / "_manifest.json").read_text())
        full = manifest["runs"][-1]["summary"]
        missed = misses(document, folder / "out", corpus_path)
        print(f"corpus rows            {document['corpus_rows']:,}")
        print(f"estimate               {document['sample_rows']:,} rows, "
              f"{document['spent']['requests']:,} requests, {document['rounds']} rounds, "
              f"{seconds:.1f} s")  # fmt: skip
        print(f"widest half-width      {document['precision']:.4f} (margin {args.margin})")
        print(f"intervals missing      {len(missed)} of {len(document['estimates'])}")
        for line in missed:
            print(f"  {line}")
        print(f"full run after it      {full['rows_answered']:,} rows scored, "
              f"{full['requests']:,} requests, {full['rows_skipped_committed_earlier']:,} "
              "rows committed by the estimate")  # fmt: skip


if __name__ == "__main__":
    main()
