"""Which rows to label (`evalpipe.analysis.draw_label_sample`): each design draws what it says,
with inclusion probabilities that are right, from an output written and read back."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import polars as pl
import pytest

from evalpipe.analysis import draw_label_sample
from evalpipe.errors import InputError
from evalpipe.reading import Output, open_output
from ppidata import Corpus, corpus

N, ERRORS = 2000, 7


@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory) -> tuple[Corpus, Output]:
    made = corpus(tmp_path_factory.mktemp("tolabel"), N, errors=ERRORS)
    return made, open_output(str(made.out))


def _draw(
    table: Output, key: str, n: int, design: str, seed: int | None = 1,
    rows: pl.DataFrame | None = None,
) -> pl.DataFrame:  # fmt: skip
    """A draw from the output's scan, or from `rows` (the output read once) for a test that
    draws hundreds of times."""
    q = table.question(key)
    assert q is not None
    frame = table.scan() if rows is None else rows.lazy()
    return draw_label_sample(frame, id_column="id", question=q, n=n, design=design,
                             seed=seed)  # fmt: skip


def test_uniform_draws_n_answered_rows_each_with_n_over_N(written: tuple[Corpus, Output]) -> None:
    _, table = written
    got = _draw(table, "helpful", 300, "uniform")
    assert got.columns == ["id", "_design", "_inclusion_prob", "_stratum"]
    assert got.schema["_inclusion_prob"] == pl.Float64
    assert got.height == 300 and got["id"].n_unique() == 300
    assert got["id"].min() >= ERRORS  # error rows have no answer to stratify or correct
    assert got["_inclusion_prob"].to_list() == pytest.approx([300 / (N - ERRORS)] * 300)
    assert got["_design"].unique().to_list() == ["uniform"]
    assert got["_stratum"].null_count() == 300
    assert got.equals(_draw(table, "helpful", 300, "uniform"))  # the seed decides
    assert not got.equals(_draw(table, "helpful", 300, "uniform", seed=2))
    assert got["id"].is_sorted()


@pytest.mark.parametrize("key", ["helpful", "sentiment", "quality"])
def test_stratified_probabilities_are_each_rows_chance_of_being_drawn(
    written: tuple[Corpus, Output], key: str
) -> None:
    """Over many seeds, how often each row is drawn matches its `_inclusion_prob` (the
    strata do not depend on the seed but for ties), and 1 / pi adds up to the rows."""
    _, table = written
    counts = np.zeros(N)
    pis = np.full(N, np.nan)
    draws = 300
    rows = table.scan().collect()  # read back once, not once per draw
    assert _draw(table, key, 200, "stratified", seed=0, rows=rows).equals(
        _draw(table, key, 200, "stratified", seed=0)
    )  # the same draw as from the scan
    for seed in range(draws):
        got = _draw(table, key, 200, "stratified", seed=seed, rows=rows)
        assert got.height == 200
        ids = got["id"].to_numpy()
        counts[ids] += 1
        pis[ids] = got["_inclusion_prob"].to_numpy()
        assert (1 / got["_inclusion_prob"]).sum() == pytest.approx(N - ERRORS)
        per = got.group_by("_stratum").len()
        assert per.height == 200 // 30 and per["len"].min() >= 2
    seen = ~np.isnan(pis)
    assert seen[ERRORS:].all() and not seen[:ERRORS].any()  # every answered row has a chance
    assert len(np.unique(np.round(pis[seen], 12))) > 1  # an allocation, not proportional
    # Drawn k of `draws` times, binomial(draws, pi): the total squared error is chi-square-ish.
    expected = draws * pis[seen]
    z = (counts[seen] - expected) / np.sqrt(expected * (1 - pis[seen]))
    assert abs(np.mean(z)) < 0.1 and 0.8 < np.mean(z * z) < 1.2


def test_stratified_favours_the_rows_the_judge_is_unsure_of(
    written: tuple[Corpus, Output],
) -> None:
    made, table = written
    got = _draw(table, "helpful", 300, "stratified")
    p = made.judged_p[got["id"].to_numpy()]
    by = pl.DataFrame({"s": got["_stratum"], "pi": got["_inclusion_prob"], "u": p * (1 - p)})
    means = by.group_by("s").agg(pl.col("pi").first(), pl.col("u").mean()).sort("u")
    assert means["pi"][-1] > means["pi"][0]  # the most unsure stratum is sampled most
    # Half the allocation is proportional: no stratum below half the uniform rate.
    assert means["pi"].min() >= 0.5 * 300 / (N - ERRORS) * 0.95


def test_uncertain_takes_the_rows_nearest_a_coin_toss_and_promises_no_estimate(
    written: tuple[Corpus, Output],
) -> None:
    made, table = written
    got = _draw(table, "helpful", 50, "uncertain")
    assert got.height == 50 and got["_inclusion_prob"].null_count() == 50
    p = made.judged_p[ERRORS:]
    nearest = np.sort(np.abs(p - 0.5))[49]
    assert np.all(np.abs(made.judged_p[got["id"].to_numpy()] - 0.5) <= nearest + 1e-12)


def test_more_rows_asked_than_answered_takes_them_all(tmp_path: Path) -> None:
    made = corpus(tmp_path, 40, errors=2)
    table = open_output(str(made.out))
    for design in ("uniform", "stratified"):
        got = _draw(table, "helpful", 100, design)
        assert got.height == 38 and got["_inclusion_prob"].to_list() == [1.0] * 38


def test_bad_requests_are_one_line_errors_naming_what(written: tuple[Corpus, Output]) -> None:
    _, table = written
    with pytest.raises(InputError, match="design 'random' is none of uniform"):
        _draw(table, "helpful", 10, "random")
    with pytest.raises(InputError, match="n must be at least 1"):
        _draw(table, "helpful", 0, "uniform")
    q = table.question("helpful")
    assert q is not None
    with pytest.raises(InputError, match="no column 'review_id'"):
        draw_label_sample(table.rows, id_column="review_id", question=q, n=5, design="uniform")
