"""A corpus whose every answer is known, and samples drawn from it without a service.

`truth` answers every row of a corpus with the embedded evaluator, in this process, as the output
table would hold it; `draw` runs `evalpipe.analysis.sampling.run_sequential` on it with the
sample's rows taken from that table instead of scored, so thousands of estimates cost seconds.
tests/test_sampling.py and bench/estimate_coverage.py count how often the intervals cover the
corpus's true figures.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import pyarrow as pa

from evalpipe.analysis.rounds import Sequential, run_sequential
from evalpipe.analysis.sampling import OVERALL, STRATUM, variables
from evalpipe.output.table import RowResult, output_schema, to_table
from evalpipe.reading import Question, questions_of
from evalpipe.service.evaluator import answer, compile_questions

DEMO = Path(__file__).resolve().parent.parent / "data" / "demo" / "reviews.parquet"


@dataclass(frozen=True)
class Truth:
    """Every row's answers (`table`, with its `STRATUM`), the questions, the strata's sizes
    and every figure's true value, corpus-wide (stratum None) and per stratum."""

    table: pl.DataFrame
    questions: tuple[Question, ...]
    sizes: dict[str, int]
    values: dict[tuple[str, str, str | None], float]  # (question, what, stratum) -> value


def truth(texts: Sequence[str], strata: Sequence[str], questions: Mapping[str, Any]) -> Truth:
    """The evaluator's answers for every text, as output rows, and the true figures."""
    compiled = compile_questions(questions)
    results = [
        RowResult(id=i, answers=answer(text, compiled), model="m", position=i)
        for i, text in enumerate(texts)
    ]
    schema = output_schema("id", pa.int64(), questions)
    table = pl.from_arrow(to_table(results, schema, "truth"))
    assert isinstance(table, pl.DataFrame)
    table = table.with_columns(pl.Series(STRATUM, list(strata)))
    found = questions_of(schema)
    sizes = dict(sorted(table[STRATUM].value_counts().iter_rows()))
    values: dict[tuple[str, str, str | None], float] = {}
    for v in variables(found):
        values[(v.question, v.what, OVERALL)] = float(table.select(v.expr.mean()).item())
        per = table.group_by(STRATUM).agg(v.expr.mean().alias("m"))
        for label, mean in per.iter_rows():
            values[(v.question, v.what, label)] = float(mean)
    return Truth(table, found, sizes, values)


def demo_truth(questions: Mapping[str, Any]) -> Truth:
    """The demo corpus's valid rows (a state to answer), stratified by category."""
    rows = pl.read_parquet(DEMO, columns=["category", "text"]).filter(
        pl.col("text").str.strip_chars().str.len_chars() > 0
    )
    return truth(rows["text"].to_list(), rows["category"].to_list(), questions)


def draw(
    t: Truth, seed: int, margin: float, confidence: float = 0.95, **options: Any
) -> Sequential:
    """One sequential estimate from `t`: each stratum's rows in a random order of `seed`, a
    round's rows the first `drawn[h]` of each."""
    rng = np.random.default_rng(seed)
    orders = {
        label: rng.permutation(np.flatnonzero((t.table[STRATUM] == label).to_numpy()))
        for label in t.sizes
    }

    def score(drawn: Mapping[str, int]) -> pl.DataFrame:
        picked = np.concatenate([orders[h][: drawn[h]] for h in t.sizes])
        return t.table[np.sort(picked)]

    return run_sequential(t.sizes, t.questions, score, margin, confidence, **options)


def covered(t: Truth, result: Sequential) -> list[tuple[str, str, str | None, bool]]:
    """Per figure of `result`: (question, what, stratum, does its interval hold the truth)."""
    out = []
    for r in result.estimates.rows:
        if r["estimate"] is None:
            continue
        true = t.values[(r["question"], r["what"], r["stratum"])]
        hit = r["low"] - 1e-12 <= true <= r["high"] + 1e-12
        out.append((r["question"], r["what"], r["stratum"], hit))
    return out
