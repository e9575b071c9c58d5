"""How honest `evalpipe estimate`'s intervals are: coverage of the truth over many samples.

A corpus's every row is answered by the embedded evaluator in this process (the truth, row by
row); then `--draws` sequential estimates are drawn from it, each with its own seed, exactly as
`evalpipe estimate` draws and stops (`evalpipe.analysis.rounds.run_sequential`), the rows taken
from the known answers instead of scored. Printed per corpus and margin: how often the 95%
intervals covered the true figure (corpus-wide and per stratum), how many draws had at most one
interval missing its truth, and the rows used against the sample the margin calls for (the
design's size with the corpus's true spreads).

    python bench/estimate_coverage.py [--draws 300] [--margins 0.05 0.03 0.02]

Corpora: the demo corpus by category (8 strata, 2,980 valid rows), and a 4,000-row corpus of
the same generator (data/make_demo.py, seed 11) in 3 strata `kind`.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import polars as pl

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "pipeline"), str(ROOT / "tests"), str(ROOT / "data")]

import make_demo  # noqa: E402

import sampledata  # noqa: E402
from conftest import QUESTIONS  # noqa: E402
from test_sampling import called_for  # noqa: E402

KINDS = {"beauty": "a", "books": "a", "electronics": "b", "grocery": "b"}


def kind_corpus() -> sampledata.Truth:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "raw.parquet"
        make_demo.write(4000, 11, path)
        rows = pl.read_parquet(path)
    rows = rows.filter(pl.col("text").str.strip_chars().str.len_chars() > 0)
    kind = [KINDS.get(c, "c") for c in rows["category"]]
    return sampledata.truth(rows["text"].to_list(), kind, QUESTIONS)


def measure(name: str, truth: sampledata.Truth, margin: float, draws: int) -> str:
    started = time.monotonic()
    hits: Counter[str] = Counter()
    seen: Counter[str] = Counter()
    misses: Counter[int] = Counter()
    used = []
    for seed in range(draws):
        result = sampledata.draw(truth, seed, margin)
        used.append(sum(result.drawn.values()))
        covered = sampledata.covered(truth, result)
        misses[sum(not hit for *_, hit in covered)] += 1
        for _, _, stratum, hit in covered:
            where = "overall" if stratum is None else "stratum"
            hits[where] += hit
            seen[where] += 1
    needed = called_for(truth, margin)
    corpus = sum(truth.sizes.values())
    return (
        f"| {name} | {margin} | {draws} | {hits['overall'] / seen['overall']:.1%} | "
        f"{hits['stratum'] / seen['stratum']:.1%} | {(misses[0] + misses[1]) / draws:.0%} | "
        f"{statistics.mean(used):,.0f} ({min(used):,}-{max(used):,}) | {needed:,} | "
        f"{statistics.mean(used) / needed:.2f} | {statistics.mean(used) / corpus:.0%} | "
        f"{time.monotonic() - started:.1f} |"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--draws", type=int, default=300)
    parser.add_argument("--margins", type=float, nargs="+", default=[0.05, 0.03, 0.02])
    args = parser.parse_args()
    corpora = {
        "demo by category": sampledata.demo_truth(QUESTIONS),
        "4,000 rows by kind": kind_corpus(),
    }
    print(
        "| corpus | margin | draws | corpus-wide coverage | per-stratum coverage | "
        "draws with <= 1 miss | rows used (min-max) | rows called for | used / called for | "
        "share of corpus | seconds |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for name, truth in corpora.items():
        for margin in args.margins:
            print(measure(name, truth, margin, args.draws), flush=True)


if __name__ == "__main__":
    main()
