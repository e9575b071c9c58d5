"""The corpus's shares corrected by labels (`evalpipe infer`, `ep.infer`,
`evalpipe.analysis.ppi`): against a textbook PPI++ computed here by hand, the truth of a
corpus whose answers are known (covered as often as promised, judge alone off), the sampler's
designs, several reviewers, a sampled output, the command line and the API; outputs are
written by the sink and read back."""

from __future__ import annotations

import json
from pathlib import Path
from statistics import NormalDist

import numpy as np
import polars as pl
import pytest
from click.testing import CliRunner

import evalpipe as ep
from evalpipe.analysis import draw_label_sample
from evalpipe.analysis.infer import estimate
from evalpipe.analysis.ppi import ppi_mean
from evalpipe.cli import main
from evalpipe.errors import InputError
from evalpipe.output import weigh
from evalpipe.reading import Output, open_output
from ppidata import LEVELS, OPTIONS, Corpus, corpus

N = 3000
Z90 = NormalDist().inv_cdf(0.95)


@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory) -> tuple[Corpus, Output]:
    made = corpus(tmp_path_factory.mktemp("infer"), N, power=2.0, shift=1.0)
    return made, open_output(str(made.out))


def textbook(y: np.ndarray, f: np.ndarray, f_all: np.ndarray) -> tuple[float, float, float]:
    """PPI++ for a mean as the paper writes it (Angelopoulos, Duchi & Zrnic 2023, and ppi_py's
    `ppi_mean_ci`): lambda = Cov(y, f) / ((1 + n / N) Var(f)) clipped to [0, 1]; the estimate,
    its 90% half width, lambda."""
    n, big = len(y), len(f_all)
    lam = np.mean((y - y.mean()) * (f - f.mean())) / ((1 + n / big) * np.var(f_all))
    lam = float(np.clip(lam, 0, 1))
    theta = lam * f_all.mean() + np.mean(y - lam * f)
    se = np.sqrt(lam**2 * np.var(f_all) / big + np.var(y - lam * f) / n)
    return float(theta), float(Z90 * se), lam


def _helpful(doc: dict, of: str = "yes") -> dict:
    return next(e for e in doc["estimates"] if e["question"] == "helpful" and e["of"] == of)


def test_uniform_labels_give_the_textbook_ppi_estimate(written: tuple[Corpus, Output]) -> None:
    made, table = written
    ids = np.sort(np.random.default_rng(3).choice(N, 300, replace=False))
    labels = made.labels(ids, seed=3)
    doc = estimate(table, labels, confidence=0.9)
    e = _helpful(doc)
    y = labels["helpful"].cast(pl.Float64).to_numpy()
    theta, half, lam = textbook(y, made.judged_p[ids], made.judged_p)
    assert e["estimate"] == pytest.approx(theta, abs=1e-3)
    assert (e["high"] - e["low"]) / 2 == pytest.approx(half, rel=0.01)
    # the same up to the sample variance of f on the labelled rows where the paper takes the
    # corpus's: lambda minimises the variance as estimated, a hair from the paper's
    assert e["lam"] == pytest.approx(lam, abs=0.05)
    assert e["judge"] == pytest.approx(made.judged_p.mean())
    assert e["judge_off"] == pytest.approx(made.judged_p.mean() - e["estimate"])
    assert e["labels_alone"]["estimate"] == pytest.approx(y.mean())
    alone = Z90 * y.std(ddof=1) / np.sqrt(300)
    assert e["labels_alone"]["high"] - e["labels_alone"]["low"] == pytest.approx(2 * alone)
    assert e["effective_labels"] > 300  # the judge is informative: worth more labels
    assert e["labels"] == 300 and e["rows"] == N
    assert any("taken as a uniform random sample" in n for n in doc["notes"])
    # every answer of every question has a figure; a score's mean level too
    got = {(x["question"], x["of"]) for x in doc["estimates"]}
    assert got == {("helpful", "yes"), *[("sentiment", o) for o in OPTIONS],
                   *[("quality", lv) for lv in LEVELS], ("quality", "level")}  # fmt: skip
    shares = [x["estimate"] for x in doc["estimates"] if x["question"] == "sentiment"]
    assert sum(shares) == pytest.approx(1.0, abs=0.03)


def test_intervals_cover_the_true_share_the_judge_alone_misses(
    written: tuple[Corpus, Output],
) -> None:
    """Labels drawn from the truth by the sampler, 80 label sets of each design: the 90%
    intervals cover the corpus's true share about as often as promised; the uniform sets'
    narrower than the labels' alone, the stratified sets' no wider than the uniform's."""
    made, table = written
    q = table.question("helpful")
    assert q is not None
    truth = made.p.mean()  # labels' expected share: the truth the labels are drawn from
    assert abs(made.judged_p.mean() - truth) > 0.05  # the judge alone is off by far
    widths = {}
    for design in ("uniform", "stratified"):
        covered, widths[design], alone = 0, [], []
        for seed in range(80):
            drawn = draw_label_sample(table.scan(), id_column="id", question=q, n=300,
                                      design=design, seed=seed)  # fmt: skip
            ids = drawn["id"].to_numpy()
            labels = made.labels(ids, seed=1000 + seed).select("id", "helpful")
            e = _helpful(estimate(table, labels.join(drawn, on="id"), confidence=0.9))
            covered += e["low"] <= truth <= e["high"]
            widths[design].append(e["high"] - e["low"])
            alone.append(e["labels_alone"]["high"] - e["labels_alone"]["low"])
        assert covered >= 64, design  # 90% promised: binomial(80, 0.9) < 65 in ~0.5% of draws
        if design == "uniform":
            assert np.mean(widths[design]) < 0.95 * np.mean(alone)
    assert np.mean(widths["stratified"]) <= 1.05 * np.mean(widths["uniform"])


def test_stratified_labels_are_weighted_by_their_inclusion_probability(
    written: tuple[Corpus, Output],
) -> None:
    made, table = written
    q = table.question("helpful")
    assert q is not None
    drawn = draw_label_sample(table.scan(), id_column="id", question=q, n=300,
                              design="stratified", seed=5)  # fmt: skip
    labels = made.labels(drawn["id"].to_numpy(), seed=5).join(drawn, on="id")
    e = _helpful(estimate(table, labels, confidence=0.9))
    y = labels["helpful"].cast(pl.Float64).to_numpy()
    d = 1 / labels["_inclusion_prob"].to_numpy()
    assert e["labels_alone"]["estimate"] == pytest.approx(np.sum(d * y) / d.sum())
    assert e["labels_alone"]["estimate"] != pytest.approx(y.mean())


def test_rows_of_no_probability_design_are_left_out_with_a_note(
    written: tuple[Corpus, Output],
) -> None:
    made, table = written
    ids = np.arange(100, 500)
    labels = made.labels(ids, seed=2).with_columns(
        pl.Series("_design", ["uniform"] * 300 + ["uncertain"] * 60 + ["browse"] * 40),
        pl.Series("_inclusion_prob", [300 / N] * 300 + [None] * 100, dtype=pl.Float64),
    )
    doc = estimate(table, labels, confidence=0.9)
    assert doc["labelled_rows"] == 300 and _helpful(doc)["labels"] == 300
    assert any("left out of the estimate: 40 browse, 60 uncertain" in n for n in doc["notes"])
    # a uniform sample's rows weigh the same: without their probability they still count
    unweighted = labels.with_columns(pl.lit(None, pl.Float64).alias("_inclusion_prob"))
    again = _helpful(estimate(table, unweighted, confidence=0.9))
    assert again["estimate"] == pytest.approx(_helpful(doc)["estimate"])


def test_several_reviewers_each_label_counts_and_their_agreement_is_shown(
    written: tuple[Corpus, Output], tmp_path: Path
) -> None:
    """A CSV appended one line per label, as the results browser writes it: two reviewers,
    one who changed their mind, lines holding one question each."""
    made, table = written
    ids = np.arange(200)
    first, second = made.labels(ids, seed=1), made.labels(ids, seed=2)
    lines = []
    for who, frame in (("ann", first), ("bob", second)):
        for row in frame.iter_rows(named=True):
            lines.append({"id": row["id"], "helpful": "no" if row["helpful"] else "yes",
                          "quality": None, "_reviewer": who})  # fmt: skip
            lines.append({"id": row["id"], "helpful": None, "quality": str(row["quality"]),
                          "_reviewer": who})  # fmt: skip
            lines.append(
                {
                    "id": row["id"],
                    "helpful": "yes" if row["helpful"] else "no",
                    "quality": None,
                    "_reviewer": who,
                }
            )  # the last wins
    path = tmp_path / "labels.csv"
    pl.DataFrame(lines).with_columns(
        pl.lit("2026-11-29T06:00:00Z").alias("_labelled_at"), pl.lit("browse").alias("_design")
    ).write_csv(path)
    doc = ep.infer(table.shown, path)
    e = _helpful(doc)
    assert "_reviewer" in pl.read_csv(path).columns
    assert doc["labelled_rows"] == 0 and "estimate" not in e  # browsing is no sample
    uniform = pl.read_csv(path).with_columns(pl.lit("uniform").alias("_design"),
                                             pl.lit(200 / N).alias("_inclusion_prob"))  # fmt: skip
    uniform.write_csv(path)
    e = _helpful(ep.infer(table.shown, path))
    both = (first["helpful"].cast(pl.Float64) + second["helpful"].cast(pl.Float64)) / 2
    assert e["labels_alone"]["estimate"] == pytest.approx(both.mean())
    doc = ep.infer(table.shown, path)
    kappas = {r["question"]: r for r in doc["reviewers"]}
    a, b = first["helpful"].to_numpy(), second["helpful"].to_numpy()
    observed = np.mean(a == b)
    chance = a.mean() * b.mean() + (1 - a.mean()) * (1 - b.mean())
    assert kappas["helpful"]["method"] == "cohen" and kappas["helpful"]["rows"] == 200
    assert kappas["helpful"]["kappa"] == pytest.approx((observed - chance) / (1 - chance))


def test_a_sampled_output_widens_the_interval_by_its_own_sampling(tmp_path: Path) -> None:
    """An output that scored 1,500 of 3,000 rows (each weighing 2): labelled rows drawn from
    it; the interval adds the first sample's variance."""
    made = corpus(tmp_path, 1500, power=2.0, shift=1.0, seed=4)
    table = open_output(str(made.out))
    q = table.question("helpful")
    assert q is not None
    drawn = draw_label_sample(table.scan(), id_column="id", question=q, n=200,
                              design="uniform", seed=1)  # fmt: skip
    labels = made.labels(drawn["id"].to_numpy(), seed=1).join(drawn, on="id")
    whole = _helpful(estimate(table, labels, confidence=0.9))
    weights = pl.DataFrame({"id": np.arange(1500), "w": np.full(1500, 2.0)}).to_arrow()
    weigh(str(made.out), table.schema, weights)
    sampled_table = open_output(str(made.out))
    doc = estimate(sampled_table, labels, confidence=0.9)
    sampled = _helpful(doc)
    assert doc["sampled_output"]
    assert sampled["estimate"] == pytest.approx(whole["estimate"], abs=0.005)
    e = made.labels(drawn["id"].to_numpy(), seed=1)["helpful"].cast(pl.Float64).to_numpy()
    f = made.judged_p[drawn["id"].to_numpy()]
    lam = sampled["lam"]
    resid = e - lam * f
    extra = (lam**2 * np.var(made.judged_p) + np.var(resid)) / 1500  # the first sample's
    inner = ((whole["high"] - whole["low"]) / (2 * Z90)) ** 2 - np.var(made.judged_p) * (
        whole["lam"] ** 2
    ) / 1500
    want = np.sqrt(inner + extra) * Z90
    assert (sampled["high"] - sampled["low"]) / 2 == pytest.approx(want, rel=0.03)


def test_two_phase_intervals_cover_the_corpus_truth() -> None:
    """The pure estimate over many two-phase draws: a corpus of 20,000, an output of 2,000 of
    them (weights 10), 300 labels from the output: covered as promised."""
    rng = np.random.default_rng(11)
    big = 20_000
    logit = rng.normal(-0.5, 1.5, big)
    y_all = (rng.random(big) < 1 / (1 + np.exp(-logit))).astype(float)
    f_all = 1 / (1 + np.exp(-(2 * logit + 1)))
    covered = 0
    for _ in range(400):
        scored = rng.choice(big, 2000, replace=False)
        labelled = rng.choice(2000, 300, replace=False)
        got = ppi_mean(y_all[scored][labelled], f_all[scored][labelled], f_all[scored],
                       confidence=0.9, output_weight=np.full(2000, 10.0))  # fmt: skip
        covered += got.low <= y_all.mean() <= got.high
    assert covered >= 0.86 * 400


def test_by_gives_each_group_its_own_estimate(written: tuple[Corpus, Output]) -> None:
    made, table = written
    ids = np.sort(np.random.default_rng(8).choice(N, 600, replace=False))
    doc = estimate(table, made.labels(ids, seed=8), confidence=0.9, by="_model")
    e = _helpful(doc)
    assert e["group"] == "m-1" and e["rows"] == N
    with pytest.raises(InputError, match="--by: no column 'region' in the output"):
        estimate(table, made.labels(ids, seed=8), by="region")


def test_the_command_line_samples_then_infers(
    written: tuple[Corpus, Output], tmp_path: Path
) -> None:
    made, table = written
    out = tmp_path / "to-label.csv"
    runner = CliRunner()
    asked = ["sample", table.shown, "--question", "helpful", "--n", "300",
             "--design", "stratified", "--seed", "4", "--out", str(out)]  # fmt: skip
    done = runner.invoke(main, asked)
    assert done.exit_code == 0, done.output
    assert "300 rows to label for 'helpful' (stratified)" in done.output
    drawn = pl.read_csv(out)
    assert drawn.columns == ["id", "helpful", "_design", "_inclusion_prob", "_stratum"]
    assert drawn["helpful"].null_count() == 300  # for a person to fill in
    filled = drawn.drop("helpful").join(made.labels(drawn["id"].to_numpy(), seed=4), on="id")
    filled.write_csv(out)
    done = runner.invoke(main, ["infer", table.shown, "--labels", str(out), "--json",
                                "--confidence", "0.8"])  # fmt: skip
    assert done.exit_code == 0, done.output
    doc = json.loads(done.output)
    assert doc["confidence"] == 0.8 and doc["labelled_rows"] == 300
    assert doc["estimates"] == ep.infer(table.shown, out, confidence=0.8)["estimates"]
    text = runner.invoke(main, ["infer", table.shown, "--labels", str(out)])
    assert text.exit_code == 0 and "corrected" in text.output and "90% interval" in text.output
    bad = runner.invoke(main, ["sample", table.shown, "--question", "nope", "--out", str(out)])
    assert bad.exit_code == 2
    assert bad.output.strip().splitlines()[-1].startswith("InputError: --question: 'nope'")


def test_the_api_draws_and_writes_the_same_rows(
    written: tuple[Corpus, Output], tmp_path: Path
) -> None:
    _, table = written
    got = ep.label_sample(table.shown, "quality", n=90, design="uniform", seed=2,
                          out=tmp_path / "x.parquet")  # fmt: skip
    assert got.height == 90 and pl.read_parquet(tmp_path / "x.parquet").equals(got)


def test_the_reports_trust_section_shows_corrected_shares_and_reliability(
    written: tuple[Corpus, Output], tmp_path: Path
) -> None:
    from evalpipe.cli.report import write_report
    from evalpipe.report.charts import to_svg
    from evalpipe.report.trust import reliability_chart
    from test_report import chart_names

    made, table = written
    ids = np.sort(np.random.default_rng(6).choice(N, 300, replace=False))
    path = tmp_path / "labels.parquet"
    made.labels(ids, seed=6).write_parquet(path)
    html = Path(write_report(table.shown, html=tmp_path / "r.html", labels=str(path)))
    text = html.read_text(encoding="utf-8")
    trust = text[text.index('id="trust"') :]
    e = _helpful(ep.infer(table.shown, path))
    assert "the corpus&#39;s shares corrected by the labels" in trust
    assert f"{e['estimate']:.3f}" in trust and f"{e['judge_off']:+.3f}" in trust
    assert "helpful-reliability" in chart_names(trust)
    bins = [{"low": 0.0, "high": 0.5, "rows": 10, "predicted": 0.3, "observed": 0.2},
            {"low": 0.5, "high": 1.0, "rows": 5, "predicted": 0.8, "observed": 0.6}]  # fmt: skip
    svg = to_svg(reliability_chart("helpful", bins, [dict(b, predicted=0.5) for b in bins]))
    assert ">calibrated<" in svg and ">judge<" in svg


def test_recorded_shares_are_kept_beside_the_rows_for_describe_and_the_report(
    tmp_path: Path,
) -> None:
    from evalpipe.analysis import data_dictionary, render
    from evalpipe.cli.report import write_report

    made = corpus(tmp_path, 600, seed=2)
    ids = np.arange(0, 600, 3)
    path = tmp_path / "labels.csv"
    made.labels(ids, seed=2).write_csv(path)
    assert open_output(str(made.out)).corrected is None
    done = CliRunner().invoke(main, ["infer", str(made.out), "--labels", str(path), "--record"])
    assert done.exit_code == 0, done.output
    assert f"kept in {made.out / '_corrected.json'}" in done.output
    kept = open_output(str(made.out)).corrected
    assert kept is not None and kept["labels"] == str(path) and kept["recorded_at"]
    e = _helpful(kept)
    found = data_dictionary(str(made.out))["corrected"]
    assert found["estimates"][0] == {k: e.get(k) for k in found["estimates"][0]}
    assert f"helpful share yes: {e['estimate']:.3f}" in render(data_dictionary(str(made.out)))
    assert open_output(str(made.out)).rows.height == 600  # the file is metadata, not rows
    html = Path(write_report(str(made.out), html=tmp_path / "r.html")).read_text()
    assert f"{e['estimate']:.3f}" in html[html.index('id="trust"') :]


def test_recorded_shares_are_told_to_an_openlineage_catalog(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from netdoubles import Receiver

    made = corpus(tmp_path, 300, seed=5)
    path = tmp_path / "labels.csv"
    made.labels(np.arange(0, 300, 2), seed=5).write_csv(path)
    catalog = Receiver()
    try:
        monkeypatch.setenv("OPENLINEAGE_URL", catalog.url)
        monkeypatch.setenv("OPENLINEAGE_NAMESPACE", "analysts")
        asked = ["infer", str(made.out), "--labels", str(path), "--json"]
        done = CliRunner().invoke(main, asked)
        assert done.exit_code == 0 and catalog.bodies("/api/v1/lineage") == []  # not recorded
        done = CliRunner().invoke(main, [*asked, "--record"])
        assert done.exit_code == 0, done.output
    finally:
        catalog.shutdown()
    (event,) = [json.loads(b) for b in catalog.bodies("/api/v1/lineage")]
    assert event["eventType"] == "COMPLETE"
    assert event["job"]["namespace"] == "analysts"
    assert event["job"]["name"] == f"infer:{made.out}"
    table, labels = event["inputs"]
    assert (table["name"], labels["name"]) == (str(made.out), str(path))
    assert "helpful__p_true" in [f["name"] for f in table["facets"]["schema"]["fields"]]
    facet = event["run"]["facets"]["evalpipe_corrected"]
    e = _helpful(json.loads(done.output))
    shown = next(x for x in facet["estimates"] if x["question"] == "helpful")
    assert shown["estimate"] == pytest.approx(e["estimate"]) and facet["labelled_rows"] == 150


def test_labels_all_alike_get_an_interval_that_is_not_a_point() -> None:
    """No labelled row has the answer: the interval is the labels' Wilson interval, [0, ~0.009]
    at 90% for 300 rows, not [0, 0]."""
    f_all = np.random.default_rng(1).uniform(0, 0.05, 5000)
    got = ppi_mean(np.zeros(300), f_all[:300], f_all, confidence=0.9)
    z2 = Z90**2
    assert got.estimate == 0.0 and got.low == 0.0
    assert got.high == pytest.approx(z2 / 300 / (1 + z2 / 300))  # Wilson at p = 0
