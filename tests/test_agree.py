"""`evalpipe agree`: the judge against planted labels, checked by independent arithmetic."""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import pyarrow as pa
import pytest
from click.testing import CliRunner

from evalpipe.cli import main
from evalpipe.output import Sink, output_schema
from evalpipe.output.table import RowResult

OPTIONS = ["positive", "negative", "mixed"]
LEVELS = ["poor", "fair", "good", "great"]
QUESTIONS = {
    "helpful": {"type": "noul", "instructions": "x"},
    "sentiment": {"type": "choice", "instructions": "x", "criteria": dict.fromkeys(OPTIONS)},
    "quality": {"type": "score", "instructions": "x", "criteria": LEVELS},
}
N = 400


def planted(tmp: Path) -> tuple[Path, pl.DataFrame, dict[str, np.ndarray]]:
    """An output of N rows with random answers, and labels that agree with them mostly."""
    rng = np.random.default_rng(7)
    p = rng.uniform(size=N)
    sentiment = rng.dirichlet([1, 1, 1], size=N)
    quality = rng.dirichlet([1, 1, 1, 1], size=N)
    rows = []
    for i in range(N):
        answers = {
            "helpful": {"noul": float(p[i])},
            "sentiment": {
                "choice": OPTIONS[int(np.argmax(sentiment[i]))],
                "confidence": 0.5,
                "probabilities": dict(zip(OPTIONS, map(float, sentiment[i]), strict=True)),
            },
            "quality": {
                "score": float(np.dot(range(4), quality[i])),
                "confidence": 0.5,
                "probabilities": {str(k): float(v) for k, v in enumerate(quality[i])},
            },
        }
        rows.append(RowResult(i, answers, "m-1", 1, position=i))
    rows[5] = RowResult(5, None, None, 0, "network", "lost")  # an error row: not counted
    schema = output_schema("id", pa.int64(), QUESTIONS)
    sink = Sink.open(tmp / "out", schema, "fp", run_id="r", write_seconds=0)
    sink.resume(None)
    sink.append(rows)
    sink.close()
    sink.finish({}, "finished")
    noise = rng.uniform(size=(3, N)) < 0.2
    y_noul = (p > 0.5) ^ noise[0]
    judged_choice = np.argmax(sentiment, axis=1)
    y_choice = np.where(noise[1], rng.integers(0, 3, N), judged_choice)
    judged_level = np.argmax(quality, axis=1)
    y_level = np.clip(judged_level + noise[2] * rng.choice([-1, 1], N), 0, 3)
    labels = pl.DataFrame(
        {
            "id": list(range(N)),
            "helpful": y_noul.tolist(),
            "sentiment": [OPTIONS[k] for k in y_choice],
            "quality": y_level.tolist(),
        }
    ).with_columns(
        pl.when(pl.col("id") == 9).then(None).otherwise(pl.col("helpful")).alias("helpful")
    )
    truth = {"p": p, "y_noul": y_noul.astype(int), "judged_choice": judged_choice,
             "y_choice": y_choice, "judged_level": judged_level, "y_level": y_level}  # fmt: skip
    return tmp / "out", labels, truth


def kappa_by_hand(a: np.ndarray, b: np.ndarray, k: int, weights: str | None = None) -> float:
    observed = np.zeros((k, k))
    for x, y in zip(a, b, strict=True):
        observed[x, y] += 1
    observed /= observed.sum()
    expected = np.outer(observed.sum(axis=1), observed.sum(axis=0))
    i, j = np.indices((k, k))
    w = (i - j) ** 2 if weights == "quadratic" else (i != j).astype(float)
    return float(1 - (w * observed).sum() / (w * expected).sum())


def agree(output: Path, labels: Path) -> dict[str, Any]:
    result = CliRunner().invoke(main, ["agree", str(output), "--labels", str(labels), "--json"])
    assert result.exit_code == 0, result.output
    document: dict[str, Any] = json.loads(result.output)
    return document


def metric(doc: dict[str, Any], key: str, name: str) -> dict[str, Any]:
    question = next(q for q in doc["questions"] if q["key"] == key)
    return next(m for m in question["metrics"] if m["name"] == name)


def test_kappa_and_brier_match_an_independent_computation(tmp_path: Path) -> None:
    out, labels, t = planted(tmp_path)
    labels.write_parquet(tmp_path / "labels.parquet")
    doc = agree(out, tmp_path / "labels.parquet")
    keep = np.array([i not in (5, 9) for i in range(N)])  # 5: an error row, 9: not labelled
    y, p = t["y_noul"][keep], t["p"][keep]
    helpful = next(q for q in doc["questions"] if q["key"] == "helpful")
    assert helpful["n"] == N - 2
    brier = float(np.mean((p - y) ** 2))
    assert round(metric(doc, "helpful", "brier")["value"], 3) == round(brier, 3)
    judged = (p > 0.5).astype(int)
    noul_kappa = kappa_by_hand(y, judged, 2)
    assert round(metric(doc, "helpful", "kappa")["value"], 3) == round(noul_kappa, 3)
    assert metric(doc, "helpful", "accuracy")["value"] == pytest.approx(np.mean(y == judged))
    keep5 = np.arange(N) != 5
    choice_kappa = kappa_by_hand(t["y_choice"][keep5], t["judged_choice"][keep5], 3)
    assert round(metric(doc, "sentiment", "kappa")["value"], 3) == round(choice_kappa, 3)
    level_kappa = kappa_by_hand(
        t["y_level"][keep5], t["judged_level"][keep5], 4, weights="quadratic"
    )
    assert round(metric(doc, "quality", "kappa (quadratic)")["value"], 3) == round(level_kappa, 3)
    for key, name in [("helpful", "brier"), ("helpful", "kappa"), ("helpful", "ece"),
                      ("sentiment", "kappa"), ("quality", "spearman rho")]:  # fmt: skip
        m = metric(doc, key, name)
        assert m["low"] <= m["value"] <= m["high"], (key, name)


def _samples(rng: np.random.Generator, trial: int) -> dict[str, np.ndarray]:
    """Random labels and answers, every few trials degenerate: one category, all agreeing,
    one probability for all, a constant score, a level that never occurs."""
    n, k = int(rng.integers(2, 60)), int(rng.integers(1, 5))
    y, judged = rng.integers(0, k, n), rng.integers(0, k, n)
    p, score = rng.uniform(size=n), rng.normal(size=n)
    p[rng.uniform(size=n) < 0.1] = 0.5  # on a bin edge
    yes = (rng.uniform(size=n) < p).astype(np.int64)
    if trial % 7 == 0:
        judged = y.copy()
    if trial % 11 == 0:
        y[:] = 0
    if trial % 13 == 0:
        p[:] = 0.1
    if trial % 5 == 0:
        yes[:] = 1
    if trial % 9 == 0:
        score[:] = 1.0
    if trial % 4 == 0:
        y[y == 1], judged[judged == 1] = 2, 2  # levels 0 and 2 without 1 between
    return {"y": y, "judged": judged, "p": p, "yes": yes, "score": score}


def test_the_intervals_statistics_equal_the_libraries_figures() -> None:
    """The bootstrap takes each figure from `resampled` over all resamples at once; it must
    be the figure the report shows (scikit-learn's, scipy's), NaN where theirs is."""
    from evalpipe.analysis import agree as library, resampled

    pairs = {"accuracy": ("y", "judged"), "kappa": ("y", "judged"),
             "quadratic_kappa": ("y", "judged"), "brier": ("yes", "p"), "ece": ("yes", "p"),
             "spearman": ("y", "score")}  # fmt: skip
    rng = np.random.default_rng(11)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the libraries warn on degenerate samples
        for trial in range(120):
            s = _samples(rng, trial)
            for name, (a, b) in pairs.items():
                expected = getattr(library, name)(s[a], s[b])
                with np.errstate(all="ignore"):
                    got = float(getattr(resampled, name)(s[a], s[b]))
                assert got == pytest.approx(expected, abs=1e-12, nan_ok=True), (name, trial)
    y, judged = rng.integers(0, 4, (6, 40)), rng.integers(0, 4, (6, 40))
    judged[2] = np.where(judged[2] == 1, 0, judged[2])  # one resample without a level
    by_row = [library.quadratic_kappa(y[i], judged[i]) for i in range(6)]
    assert resampled.quadratic_kappa(y.T, judged.T, axis=0) == pytest.approx(by_row)
    assert resampled.ece(y.T % 2, judged.T / 4, axis=0) == pytest.approx(
        [library.ece(y[i] % 2, judged[i] / 4) for i in range(6)]
    )


def test_kappa_over_a_batch_of_resamples_holds_no_table_per_resample() -> None:
    """A choice of 255 options over a batch of 1,000 resamples: a 255 x 255 table of counts per
    resample would be 520 MB; the margins take 2 MB."""
    import tracemalloc

    from evalpipe.analysis import resampled

    rng = np.random.default_rng(3)
    y, judged = rng.integers(0, 255, (1000, 200)), rng.integers(0, 255, (1000, 200))
    tracemalloc.start()
    try:
        values = resampled.kappa(y, judged), resampled.quadratic_kappa(y, judged)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert all(v.shape == (1000,) and np.isfinite(v).all() for v in values)
    assert peak < 50 * 2**20, f"{peak / 2**20:.0f} MiB"


def test_ece_is_the_weighted_gap_of_the_reliability_bins(tmp_path: Path) -> None:
    out, labels, t = planted(tmp_path)
    labels.write_parquet(tmp_path / "labels.parquet")
    doc = agree(out, tmp_path / "labels.parquet")
    keep = np.array([i not in (5, 9) for i in range(N)])
    y, p = t["y_noul"][keep], t["p"][keep]
    edges = np.linspace(0, 1, 11)
    bins = np.clip(np.searchsorted(edges[1:-1], p, side="right"), 0, 9)
    ece = sum(
        (bins == b).sum() / len(p) * abs(y[bins == b].mean() - p[bins == b].mean())
        for b in range(10)
        if (bins == b).any()
    )
    assert round(metric(doc, "helpful", "ece")["value"], 3) == round(float(ece), 3)
    helpful = next(q for q in doc["questions"] if q["key"] == "helpful")
    assert sum(b["rows"] for b in helpful["reliability"]) == len(p)


def test_csv_labels_with_level_names_and_text_output(tmp_path: Path) -> None:
    out, labels, _ = planted(tmp_path)
    named = labels.with_columns(pl.col("quality").replace_strict(dict(enumerate(LEVELS))))
    named.write_csv(tmp_path / "labels.csv")
    labels.write_parquet(tmp_path / "labels.parquet")
    from_csv, from_parquet = (agree(out, tmp_path / f) for f in ("labels.csv", "labels.parquet"))
    assert from_csv["questions"] == from_parquet["questions"]
    text = CliRunner().invoke(main, ["agree", str(out), "--labels", str(tmp_path / "labels.csv")])
    assert text.exit_code == 0, text.output
    assert "kappa (quadratic)" in text.output and "base rate" in text.output


def test_one_category_and_bad_labels(tmp_path: Path) -> None:
    out, labels, _ = planted(tmp_path)
    labels.with_columns(pl.lit(True).alias("helpful")).select("id", "helpful").write_parquet(
        tmp_path / "one.parquet"
    )
    doc = agree(out, tmp_path / "one.parquet")
    assert metric(doc, "helpful", "kappa")["value"] is None or doc["notes"]
    assert any("one category only" in note for note in doc["notes"])
    assert metric(doc, "helpful", "brier")["value"] is not None
    labels.with_columns(pl.lit("maybe").alias("sentiment")).write_parquet(tmp_path / "bad.parquet")
    bad = CliRunner().invoke(main, ["agree", str(out), "--labels", str(tmp_path / "bad.parquet")])
    assert bad.exit_code == 2
    assert bad.output.startswith("InputError: --labels column 'sentiment': 'maybe'")
    labels.rename({"id": "doc"}).write_parquet(tmp_path / "noid.parquet")
    noid = CliRunner().invoke(main, ["agree", str(out), "--labels", str(tmp_path / "noid.parquet")])
    assert noid.exit_code == 2 and "no column 'id'" in noid.output
