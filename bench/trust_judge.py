"""A judge you can trust, measured: calibration, abstention's promise, and the nightly canary.

    .venv/bin/python bench/trust_judge.py [--sets 40] [--labels 200 500] [--overconfidence 3]
        [--coverage-sets 500] [--nights 20] [--canary-rows 100]

1. Calibration. The embedded service is told `--overconfidence T` (a known miscalibration: its
   reference answer is the truth, it reports every log-odds times T, every distribution to the
   power T); `evalpipe run` scores the demo corpus (3,000 reviews, four questions) on it, over
   HTTP. Then, for `--sets` random label sets of each size, labels drawn from the true
   probabilities: `evalpipe.analysis.fit_calibration` (what `evalpipe calibrate` runs) on
   them, and its held-out (cross-fitted) ECE and Brier before and after; and the map it keeps,
   applied to the corpus's other rows with labels drawn for them, the ECE and Brier there.
   Counted: sets whose ECE fell by at least half and whose Brier did not rise.
2. Abstention. For `--coverage-sets` random label sets, the threshold `calibration.target_
   agreement` chooses (from held-out calibrated confidences, as the file keeps them), then the
   agreement it gives on the whole population, from the true probabilities: the share of sets
   where it reaches the target, against the promised `confidence`. On a population with a
   sharp truth (p = sigmoid(N(0, 2.5)), reported sharpened by T) and on the demo corpus.
3. The canary. A canary of `--canary-rows` demo rows (labels drawn from the truth) asked by
   `evalpipe.preflight.check_canary` against the unchanged service for `--nights` nights
   (each compared with the last), then for as many nights each against a service answering 10%
   of states anew (`--drift 0.1`, another seed each night) compared with the unchanged
   baseline; and one `evalpipe run --canary` against the drifted service: its exit code and
   the requests the service answered (only the canary's, when no corpus row was sent).

Figures go to stdout; the commands and figures are recorded in bench/RESULTS.md.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "pipeline"))

from evalpipe.analysis import fit_calibration, maps  # noqa: E402
from evalpipe.analysis.calibrate import held_out  # noqa: E402
from evalpipe.config import parse_config  # noqa: E402
from evalpipe.planning import choose_threshold, prepare  # noqa: E402
from evalpipe.preflight import check_canary  # noqa: E402
from evalpipe.reading import open_output  # noqa: E402
from evalpipe.service import EmbeddedService, ServiceSettings  # noqa: E402
from evalpipe.service.evaluator import answer, compile_questions  # noqa: E402

BENCH_DIR = Path(os.environ.get("EVALPIPE_BENCH_DIR", "/tmp/evalpipe-bench")) / "trust"
KEY = "bench-key-0123456789"
EVALPIPE = str(Path(sys.executable).with_name("evalpipe"))
DEMO = ROOT / "configs" / "demo.yaml"
CORPUS = ROOT / "data" / "demo" / "reviews.parquet"
PORT = 18460


def config(base_url: str, output: Path, corpus: Path = CORPUS, **extra: Any) -> dict[str, Any]:
    demo = yaml.safe_load(DEMO.read_text())
    return {
        **demo,
        "input": {**demo["input"], "path": str(corpus)},
        "output": {"path": str(output)},
        "service": {"base_url": base_url, "api_key_env": "EVAL_API_KEY"},
        "limits": {"requests_per_minute": 1e6, "tokens_per_second": 1e9},
        "cache": {"enabled": False},
        **extra,
    }


def truths() -> tuple[pl.DataFrame, dict[str, Any]]:
    """The demo corpus's true answers: the reference evaluator's own (overconfidence 1)."""
    demo = yaml.safe_load(DEMO.read_text())
    compiled = compile_questions(demo["questions"])
    corpus = pl.read_parquet(CORPUS)
    rows = []
    for rid, text in corpus.select("review_id", "text").iter_rows():
        if text and text.strip():
            rows.append({"review_id": rid, **{k: a for k, a in answer(text, compiled).items()}})
    return pl.DataFrame(rows), demo["questions"]


def draw(truth: pl.DataFrame, questions: dict[str, Any], ids: np.ndarray, rng: Any) -> pl.DataFrame:
    """People's labels of rows `ids`, drawn from their true answers."""
    picked = truth.filter(pl.col("review_id").is_in(ids.tolist()))
    labels: dict[str, list[Any]] = {"review_id": picked["review_id"].to_list()}
    for key, q in questions.items():
        answers = picked[key].to_list()
        if q["type"] == "noul":
            labels[key] = [bool(rng.random() < a["noul"]) for a in answers]
        else:
            drawn = [
                rng.choice(len(a["probabilities"]), p=list(a["probabilities"].values()))
                for a in answers
            ]
            keys = [list(a["probabilities"]) for a in answers]
            labels[key] = [
                k[i] if q["type"] == "choice" else int(i) for k, i in zip(keys, drawn, strict=True)
            ]
    return pl.DataFrame(labels)


# --------------------------------------------------------------------------- 1. calibration


def score_corpus(overconfidence: float) -> Path:
    """The demo corpus scored by `evalpipe run` on the miscalibrated service; the output."""
    out = BENCH_DIR / f"scored-T{overconfidence:g}"
    settings = ServiceSettings(api_key=KEY, rpm=1e9, tps=1e13, overconfidence=overconfidence)
    with EmbeddedService(settings, port=PORT, mode="process") as service:
        path = BENCH_DIR / "score.yaml"
        path.write_text(yaml.safe_dump(config(service.base_url, out)))
        started = time.monotonic()
        done = subprocess.run(
            [EVALPIPE, "run", str(path), "--restart", "--progress-interval", "600"],
            capture_output=True, text=True, env={**os.environ, "EVAL_API_KEY": KEY},
        )  # fmt: skip
        if done.returncode != 0:
            raise SystemExit(f"evalpipe run exited {done.returncode}: {done.stderr[-2000:]}")
        print(
            f"scored the demo corpus at overconfidence {overconfidence:g} in "
            f"{time.monotonic() - started:.0f} s: {out}"
        )
    return out


def ece_brier(kind: str, probs: np.ndarray, y: np.ndarray) -> tuple[float, float]:
    from evalpipe.analysis import resampled

    answer_, sure = maps.confidence(kind, probs)
    samples = (y, probs) if kind == "noul" else ((answer_ == y).astype(int), sure)
    return float(resampled.ece(*samples)), float(maps.per_row(kind, probs, y)["brier"].mean())


def calibration(
    out: Path, truth: pl.DataFrame, questions: dict[str, Any], sizes: list[int], sets: int
) -> None:
    table = open_output(str(out))
    rows = table.rows.filter(pl.col("_error_type").is_null())
    ids = rows["review_id"].to_numpy()
    print(f"\n1. calibration: {sets} label sets per size, labels drawn from the true answers")
    print(
        "size  question     held-out ECE before -> after  Brier before -> after   ECE halved  "
        "Brier not up | other rows: ECE before -> after, Brier before -> after"
    )
    for n in sizes:
        tally: dict[str, list[tuple[float, ...]]] = {k: [] for k in questions}
        for s in range(sets):
            rng = np.random.default_rng(1000 * n + s)
            chosen = rng.choice(ids, n, replace=False)
            labels = draw(truth, questions, chosen, rng)
            found, doc = fit_calibration(table, labels)
            assert found is not None
            rest = rows.filter(~pl.col("review_id").is_in(chosen.tolist()))
            fresh = draw(truth, questions, rest["review_id"].to_numpy(), rng)
            rest = rest.join(fresh, on="review_id", suffix="\x00label")
            for q in doc["questions"]:
                key, kind = q["key"], q["kind"]
                e, b = q["held_out"]["ece"], q["held_out"]["brier"]
                question = table.question(key)
                assert question is not None
                y_series = (
                    rest[f"{key}\x00label"] if f"{key}\x00label" in rest.columns else rest[key]
                )
                if kind == "noul":
                    raw, y = rest[question.head].to_numpy(), y_series.cast(pl.Int64).to_numpy()
                else:
                    raw = rest.select(question.prob_columns).to_numpy()
                    codes = {p: i for i, p in enumerate(question.probs)}
                    y = np.array(
                        [codes[str(v)] if kind == "choice" else int(v) for v in y_series.to_list()]
                    )
                entry = found.questions[key]
                cal = maps.apply(kind, entry.method, entry.params, raw)
                (e0, b0), (e1, b1) = ece_brier(kind, raw, y), ece_brier(kind, cal, y)
                tally[key].append(
                    (e["before"], e["after"], b["before"], b["after"], e0, e1, b0, b1)
                )
        for key, values in tally.items():
            v = np.array(values)
            halved = np.mean(v[:, 1] <= v[:, 0] / 2)
            not_up = np.mean(v[:, 3] <= v[:, 2])
            m = v.mean(axis=0)
            print(
                f"{n:<5} {key:<12} {m[0]:.3f} -> {m[1]:.3f}{'':16} {m[2]:.3f} -> {m[3]:.3f}"
                f"{'':9} {halved:6.0%}     {not_up:6.0%}     | {m[4]:.3f} -> {m[5]:.3f}, "
                f"{m[6]:.3f} -> {m[7]:.3f} (halved {np.mean(v[:, 5] <= v[:, 4] / 2):.0%}, "
                f"Brier not up {np.mean(v[:, 7] <= v[:, 6]):.0%})"
            )


# --------------------------------------------------------------------------- 2. abstention


def coverage(
    population: np.ndarray,
    reported: np.ndarray,
    n: int,
    target: float,
    confidence: float,
    sets: int,
    seed: int,
) -> dict[str, float]:
    """Over `sets` label sets of `n` rows: the share where agreement on the kept rows of the
    whole population (from its true p(yes)) reaches `target`; kept shares; sets with none."""
    rng = np.random.default_rng(seed)
    met = kept_share = none = 0.0
    for _ in range(sets):
        idx = rng.choice(len(population), n, replace=False)
        y = (rng.random(n) < population[idx]).astype(np.int64)
        probs = reported[idx]
        held = held_out("noul", "platt", probs, y, 5)
        decided, sure = maps.confidence("noul", held)
        found = choose_threshold(sure, (decided == y).astype(int), target, confidence)
        if found["threshold"] is None:
            met, none = met + 1, none + 1
            continue
        params = maps.fit("noul", "platt", probs, y)
        cal = maps.apply("noul", "platt", params, reported)
        yes, sure_all = maps.confidence("noul", cal)
        keep = sure_all >= found["threshold"]
        right = np.where(yes[keep] == 1, population[keep], 1 - population[keep])
        met += float(right.mean() >= target) if keep.any() else 1.0
        kept_share += float(keep.mean())
    return {"met": met / sets, "kept": kept_share / sets, "none": none / sets}


def abstention(truth: pl.DataFrame, out: Path, overconfidence: float, sets: int) -> None:
    print(
        f"\n2. abstention: {sets} label sets each; a promise is met when agreement on the "
        "kept rows of the whole population reaches the target"
    )
    rng = np.random.default_rng(7)
    sharp = 1 / (1 + np.exp(-rng.normal(0, 2.5, 20_000)))
    logit = np.log(sharp / (1 - sharp))
    reported = 1 / (1 + np.exp(-overconfidence * logit))
    table = open_output(str(out)).rows.filter(pl.col("_error_type").is_null())
    demo = table.join(
        truth.select("review_id", pl.col("recommends").struct.field("noul").alias("truth")),
        on="review_id",
    )
    worlds = {
        "sharp truth": (sharp, reported),
        "demo corpus": (demo["truth"].to_numpy(), demo["recommends__p_true"].to_numpy()),
    }
    print("population    labels  target  confidence  promise met  mean share kept  no threshold")
    for name, (population, judged) in worlds.items():
        for n, target in ((300, 0.9), (300, 0.95), (1000, 0.95), (300, 0.7)):
            found = coverage(population, judged, n, target, 0.9, sets, seed=n + int(target * 100))
            print(
                f"{name:<13} {n:<7} {target:<7} {0.9:<11} {found['met']:>10.1%}  "
                f"{found['kept']:>15.1%}  {found['none']:>12.1%}"
            )


# --------------------------------------------------------------------------- 3. the canary


def canary_file(truth: pl.DataFrame, questions: dict[str, Any], rows: int) -> Path:
    rng = np.random.default_rng(11)
    ids = truth["review_id"].to_numpy()[-rows:]  # rows the corpus's first rows never are
    labels = draw(truth, questions, ids, rng)
    texts = pl.read_parquet(CORPUS).select("review_id", "text")
    path = BENCH_DIR / "canary.parquet"
    texts.join(labels, on="review_id").write_parquet(path)
    return path


def nights(truth: pl.DataFrame, questions: dict[str, Any], rows: int, count: int) -> None:
    print(
        f"\n3. the canary: {rows} labelled rows, asked fresh each night; canary.min_agreement "
        "unset, max_changed 0.01, confidence 0.95"
    )
    path = canary_file(truth, questions, rows)
    os.environ["EVAL_API_KEY"] = KEY
    os.environ["XDG_CACHE_HOME"] = str(BENCH_DIR / "cache-home")
    settings = ServiceSettings(api_key=KEY, rpm=1e9, tps=1e13)
    with EmbeddedService(settings, port=PORT + 1) as service:
        job = config(service.base_url, BENCH_DIR / "nightly", canary={"labels": str(path)})
        prepared = prepare(parse_config(job))
        url: concurrent.futures.Future[str] = concurrent.futures.Future()
        url.set_result(service.base_url)
        said: list[str] = []
        first = check_canary(prepared, url, "night-0", warn=said.append)
        assert first is not None and first["passed"], first
        passed = sum(
            bool(check_canary(prepared, url, f"night-{i}", warn=said.append)["passed"])  # type: ignore[index]
            for i in range(1, count + 1)
        )
        print(f"unchanged service: passed {passed} of {count} nights")
        stopped, shares = 0, []
        for i in range(count):
            service.set_faults(drift=0.1, drift_seed=i + 1)
            found = check_canary(prepared, url, f"drift-{i}", warn=said.append)
            assert found is not None
            stopped += not found["passed"]
            moved = next(t for t in found["tests"] if t["against"] == "last_run")
            shares.append(moved["share"])
        print(
            f"10% of states answered anew (a new seed each night): stopped {stopped} of {count} "
            f"nights (answers changed: {min(shares):.1%}-{max(shares):.1%})"
        )
        corpus_run(service, job, rows)


def corpus_run(service: EmbeddedService, job: dict[str, Any], canary_rows: int) -> None:
    path = BENCH_DIR / "nightly.yaml"
    path.write_text(yaml.safe_dump(job))
    before = service.stats()["requests_answered"]
    done = subprocess.run(
        [EVALPIPE, "run", str(path), "--log-format", "json"],
        capture_output=True,
        text=True,
        env={**os.environ, "EVAL_API_KEY": KEY},
    )
    answered = service.stats()["requests_answered"] - before
    error = [json.loads(line) for line in done.stderr.splitlines() if '"error"' in line]
    print(
        f"evalpipe run --canary against the drifted service: exit {done.returncode}, "
        f"{answered} requests answered (the canary has {canary_rows} rows), "
        f"rows written: {len(list((BENCH_DIR / 'nightly').glob('part-*')))} parts"
    )
    if error:
        print("  " + error[-1].get("message", "")[:400])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sets", type=int, default=40)
    parser.add_argument("--labels", type=int, nargs="+", default=[200, 500])
    parser.add_argument("--overconfidence", type=float, default=3.0)
    parser.add_argument("--coverage-sets", type=int, default=500)
    parser.add_argument("--nights", type=int, default=20)
    parser.add_argument("--canary-rows", type=int, default=100)
    args = parser.parse_args()
    BENCH_DIR.mkdir(parents=True, exist_ok=True)
    truth, questions = truths()
    out = score_corpus(args.overconfidence)
    calibration(out, truth, questions, args.labels, args.sets)
    abstention(truth, out, args.overconfidence, args.coverage_sets)
    nights(truth, questions, args.canary_rows, args.nights)


if __name__ == "__main__":
    main()
