"""The corpus's true share from a judge that cannot be trusted and a few hundred labels:
how often `evalpipe infer`'s intervals cover it, and how wide they are.

    .venv/bin/python bench/ppi_coverage.py [--uniform-sets 200] [--sampler-sets 100] [--n 300]
        [--overconfidence 3] [--confidence 0.9] [--synthetic-rows 20000]

1. Over HTTP: the embedded service is told `--overconfidence T` (a known miscalibration, see
   bench/trust_judge.py) and `evalpipe run` scores the demo corpus on it. Every row's label is
   drawn once from the truth (the reference evaluator's own answer): the true share is what
   those labels say over the whole corpus, had every row been labelled. Then
   `--uniform-sets` label sets of `--n` rows drawn uniformly, and `--sampler-sets` drawn by
   evalpipe's own sampler (`evalpipe sample --design stratified`), each estimated by
   `evalpipe.analysis.infer` (what `evalpipe infer` runs) with the sampler's columns.
2. In this process: a synthetic corpus of `--synthetic-rows` whose judge says yes too easily
   (its log-odds times 2, plus 1), written by the sink and read back; the same sets.

Printed per question and answer: the 90% intervals' coverage of the true share (uniform sets,
sampler sets), the judge alone's distance from it, the mean width against the labels alone's
(the classical interval on the same sets) and against a textbook PPI++ interval computed here
independently from the paper's formulas (Angelopoulos, Duchi & Zrnic 2023; ppi_py's
`ppi_mean_ci`), and the sampler sets' mean width against the uniform sets'.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path
from statistics import NormalDist
from typing import Any

import numpy as np
import polars as pl

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "pipeline"), str(ROOT / "bench"), str(ROOT / "tests")]

from evalpipe.analysis import draw_label_sample  # noqa: E402
from evalpipe.analysis.infer import estimate  # noqa: E402
from evalpipe.reading import Output, open_output  # noqa: E402


def textbook(y: np.ndarray, f: np.ndarray, f_all: np.ndarray, confidence: float) -> float:
    """The width of the paper's PPI++ interval for a mean: lambda = Cov(y, f) / ((1 + n/N)
    Var(f)) clipped to [0, 1], se^2 = lambda^2 Var(f_all) / N + Var(y - lambda f) / n."""
    n, big = len(y), len(f_all)
    both = np.concatenate([f, f_all])
    lam = np.mean((y - y.mean()) * (f - f.mean())) / ((1 + n / big) * np.var(both, ddof=1))
    lam = float(np.clip(lam, 0.0, 1.0))
    se = np.sqrt(lam**2 * np.var(f_all) / big + np.var(y - lam * f) / n)
    return float(2 * NormalDist().inv_cdf(0.5 + confidence / 2) * se)


def targets(table: Output, labels: pl.DataFrame) -> dict[tuple[str, str], tuple[Any, Any]]:
    """Per (question, answer): each row's 0/1 label (or level) and the judge's prediction,
    over the answered rows, both in the rows' order (`labels`: every row's label)."""
    idc = table.id_column
    rows = table.rows.filter(pl.col("_error_type").is_null())
    rows = rows.join(labels, on=idc, suffix="\x00label")
    out = {}
    for q in table.questions:
        y = rows[f"{q.key}\x00label" if f"{q.key}\x00label" in rows.columns else q.key]
        if q.kind == "noul":
            out[(q.key, "yes")] = (y.cast(pl.Float64).to_numpy(), rows[q.head].to_numpy())
            continue
        for i, (column, name) in enumerate(zip(q.prob_columns, q.labels, strict=True)):
            hit = (y.cast(pl.String) == (name if q.kind == "choice" else str(i))).cast(pl.Float64)
            out[(q.key, name)] = (hit.to_numpy(), rows[column].to_numpy())
        if q.kind == "score":
            out[(q.key, "level")] = (y.cast(pl.Float64).to_numpy(), rows[q.head].to_numpy())
    return out | {("", "ids"): (rows[idc].to_numpy(), None)}


def run_sets(
    table: Output, labels: pl.DataFrame, design: str, sets: int, n: int, confidence: float
) -> dict[tuple[str, str], list[tuple[float, ...]]]:
    """Per (question, answer): per label set (covered, width, labels-alone width, textbook
    width); the true share from every row's label."""
    known = targets(table, labels)
    ids = known.pop(("", "ids"))[0]
    position = {v: i for i, v in enumerate(ids.tolist())}
    found: dict[tuple[str, str], list[tuple[float, ...]]] = {k: [] for k in known}
    # uniform: one draw serves every question; the sampler draws for each question its own
    drawing = [None] if design == "uniform" else list(table.questions)
    for s, q in ((s, q) for q in drawing for s in range(sets)):
        drawn = draw_label_sample(table.scan(), id_column=table.id_column,
                                  question=q or table.questions[0], n=n, design=design,
                                  seed=10_000 + s)  # fmt: skip
        keep = [table.id_column] + [x.key for x in table.questions if q is None or x.key == q.key]
        chosen = labels.select(keep).join(drawn, on=table.id_column)
        doc = estimate(table, chosen, confidence=confidence)
        at = np.array([position[v] for v in chosen[table.id_column].to_list()])
        for e in doc["estimates"]:
            y, f = known[(e["question"], e["of"])]
            truth = float(y.mean())
            alone = e["labels_alone"]["high"] - e["labels_alone"]["low"]
            book = textbook(y[at], f[at], f, confidence) if design == "uniform" else np.nan
            found[(e["question"], e["of"])].append(
                (e["low"] <= truth <= e["high"], e["high"] - e["low"], alone, book,
                 abs(e["judge"] - truth))
            )  # fmt: skip
    return found


def report(title: str, table: Output, labels: pl.DataFrame, args: argparse.Namespace) -> None:
    started = time.monotonic()
    uniform = run_sets(table, labels, "uniform", args.uniform_sets, args.n, args.confidence)
    sampler = run_sets(table, labels, "stratified", args.sampler_sets, args.n, args.confidence)
    print(f"\n{title} ({time.monotonic() - started:.0f} s)")
    print(
        f"{'question':<12}{'answer':<12}{'cover uni':>10}{'cover smp':>10}{'judge off':>10}"
        f"{'w/labels':>10}{'w/book':>9}{'smp/uni':>9}{'width':>8}"
    )
    for key, values in uniform.items():
        u, s = np.array(values, dtype=float), np.array(sampler[key], dtype=float)
        print(
            f"{key[0]:<12}{key[1][:11]:<12}{u[:, 0].mean():>10.1%}{s[:, 0].mean():>10.1%}"
            f"{u[:, 4].mean():>10.3f}{u[:, 1].mean() / u[:, 2].mean():>10.3f}"
            f"{u[:, 1].mean() / u[:, 3].mean():>9.3f}{s[:, 1].mean() / u[:, 1].mean():>9.3f}"
            f"{u[:, 1].mean():>8.3f}"
        )


def over_http(args: argparse.Namespace) -> None:
    import trust_judge
    from trust_judge import draw, score_corpus, truths

    trust_judge.BENCH_DIR = trust_judge.BENCH_DIR.parent / "ppi"  # its own folder and port
    trust_judge.BENCH_DIR.mkdir(parents=True, exist_ok=True)
    trust_judge.PORT = 18475
    out = score_corpus(args.overconfidence)
    truth, questions = truths()
    labels = draw(truth, questions, truth["review_id"].to_numpy(), np.random.default_rng(7))
    report(
        f"1. the demo corpus over HTTP, overconfidence {args.overconfidence:g}: "
        f"{args.uniform_sets} uniform / {args.sampler_sets} sampler sets of {args.n}",
        open_output(str(out)), labels, args,
    )  # fmt: skip


def synthetic(args: argparse.Namespace) -> None:
    from ppidata import corpus

    with tempfile.TemporaryDirectory() as tmp:
        made = corpus(Path(tmp), args.synthetic_rows, power=2.0, shift=1.0, seed=3)
        ids = np.arange(args.synthetic_rows)
        labels = made.labels(ids, seed=9)
        report(
            f"2. a judge that says yes too easily, {args.synthetic_rows:,} rows in process: "
            f"{args.uniform_sets} uniform / {args.sampler_sets} sampler sets of {args.n}",
            open_output(str(made.out)), labels, args,
        )  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--uniform-sets", type=int, default=200)
    parser.add_argument("--sampler-sets", type=int, default=100)
    parser.add_argument("--n", type=int, default=300)
    parser.add_argument("--overconfidence", type=float, default=3.0)
    parser.add_argument("--confidence", type=float, default=0.9)
    parser.add_argument("--synthetic-rows", type=int, default=20_000)
    parser.add_argument("--skip-http", action="store_true")
    args = parser.parse_args()
    print(
        "cover: share of sets whose interval holds the true share; judge off: |judge alone - "
        "truth|; w/labels, w/book: mean width over the labels alone's and a textbook PPI++'s on "
        "the same uniform sets; smp/uni: the sampler sets' mean width over the uniform sets'"
    )
    if not args.skip_http:
        over_http(args)
    synthetic(args)


if __name__ == "__main__":
    main()
