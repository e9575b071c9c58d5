"""`evalpipe estimate` end to end on the session's Ray and service: a stratified sample scored
into the job's output, a smaller margin that goes on with it, and a full run that pays only
for the rest (counted by the service)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import polars as pl
import pytest
import yaml
from click.testing import CliRunner

from conftest import cli_run, job_config
from evalpipe.cli import main
from evalpipe.cli.report import write_report

pytestmark = pytest.mark.patient  # `make test` runs it beside the rest (the Makefile)

ROWS = 600  # with a text to score
BLANK = 6
KINDS = ("shoe", "lamp", "book")
WORDS = ["sturdy", "broke", "great", "awful", "cheap", "late", "soft", "bright", "loud", "fits"]


def text(i: int) -> str:
    words = " ".join(WORDS[(i * k + i // 7) % len(WORDS)] for k in range(1, 6))
    return f"Review {i}: a {KINDS[i % 3]} that is {words}, said on day {i}."


@pytest.fixture(scope="module")
def config(tmp_path_factory: pytest.TempPathFactory, service: Any) -> Path:
    tmp = tmp_path_factory.mktemp("estimate")
    total = ROWS + BLANK  # the last rows have no text: never drawn, never sent
    pl.DataFrame(
        {"id": range(total), "kind": [KINDS[i % 3] for i in range(total)],
         "text": [text(i) if i < ROWS else " " for i in range(total)]}
    ).write_parquet(tmp / "in.parquet")  # fmt: skip
    path = tmp / "job.yaml"
    path.write_text(yaml.safe_dump(job_config(tmp, service.base_url, pricing={"default": 0.05})))
    return path


def estimate(config: Path, *flags: str) -> dict[str, Any]:
    result = CliRunner().invoke(main, ["estimate", str(config), "--json", *flags])
    assert result.exit_code == 0, result.output[-3000:]
    document: dict[str, Any] = json.loads(result.stdout)
    return document


def sent(service: Any) -> int:
    return int(service.stats()["requests_accepted"])


@pytest.mark.ray
def test_estimate_then_a_smaller_margin_then_the_full_run_pay_each_row_once(
    ray_runtime: None, service: Any, config: Path
) -> None:
    out = config.parent / "out"
    before = sent(service)
    first = estimate(config, "--margin", "0.1", "--by", "kind")
    drawn = first["sample_rows"]
    assert first["reached"] and first["precision"] <= 0.1 and first["stopped_by"] == "margin"
    assert first["corpus_rows"] == ROWS and drawn < ROWS / 2
    assert first["invalid_state_rows"] == BLANK
    assert sent(service) - before == first["spent"]["requests"] == drawn  # unique states
    assert first["full_run"]["requests"] == ROWS
    assert {s["stratum"] for s in first["strata"]} == set(KINDS)
    assert {r["stratum"] for r in first["estimates"]} == {None, *KINDS}
    table = pl.read_parquet(out / "part-*.parquet")
    assert table.height == drawn
    assert table["_sample_weight"].sum() == pytest.approx(ROWS)

    before = sent(service)
    second = estimate(config, "--margin", "0.07", "--by", "kind")
    assert second["precision"] <= 0.07 and second["sample_rows"] > drawn
    for earlier, later in zip(first["strata"], second["strata"], strict=True):
        assert later["drawn"] >= earlier["drawn"]  # the same sample, grown
    assert sent(service) - before == second["sample_rows"] - drawn  # only the new rows
    sample = pl.read_parquet(out / "part-*.parquet").select("id", "_sample_weight")
    assert set(table["id"]) <= set(sample["id"])

    before = sent(service)
    cli_run(config)
    assert sent(service) - before == ROWS - second["sample_rows"]  # the rest, nothing twice
    full = pl.read_parquet(out / "part-*.parquet")
    assert full.height == full["id"].n_unique() == ROWS + BLANK
    weights = full.join(sample, on="id", how="left", suffix="_then")
    assert weights["_sample_weight"].null_count() == ROWS + BLANK - second["sample_rows"]
    assert (
        weights.filter(pl.col("_sample_weight_then").is_not_null())
        .select((pl.col("_sample_weight") == pl.col("_sample_weight_then")).all())
        .item()
    )

    import evalpipe as ep

    again = ep.estimate(config, margin=0.07, by="kind")  # every row scored: nothing to pay
    assert again["spent"]["requests"] == 0 and again["sample_rows"] == second["sample_rows"]


@pytest.mark.ray
def test_the_report_shows_the_estimates_and_diff_compares_two_samples(
    ray_runtime: None, service: Any, config: Path
) -> None:
    """Two samples of one corpus (seeds 0 and 1, answered from the answer cache where they
    meet): the report's Estimates section, and diff's changes with their intervals."""
    a, b = config.parent / "sample_a", config.parent / "sample_b"
    estimate(config, "--margin", "0.12", "--by", "kind", "--set", f"output.path={a}")
    estimate(config, "--margin", "0.12", "--by", "kind", "--seed", "1",
             "--set", f"output.path={b}")  # fmt: skip
    html = write_report(a).read_text(encoding="utf-8")
    assert 'id="estimates"' in html
    charts = re.findall(r'data-chart="(estimates-[^"]+)"', html)
    assert sorted(charts) == ["estimates-helpful", "estimates-quality", "estimates-sentiment"]
    levels = html[html.index('data-chart="quality-levels"') :]
    levels = levels[: levels.index("</figure>")]
    assert all(f">{label}<" in levels for label in ("poor", "fair", "good", "excellent"))

    result = CliRunner().invoke(main, ["diff", str(a), str(b), "--json"])
    assert result.exit_code == 0, result.output[-2000:]
    changes = json.loads(result.stdout)["estimates"]
    overall = [c for c in changes if c["stratum"] is None]
    assert len(overall) == 10 and {c["stratum"] for c in changes} == {None, *KINDS}
    for c in changes:
        assert c["change"] == pytest.approx(c["b"] - c["a"])
        assert c["low"] < c["change"] < c["high"]


@pytest.mark.ray
def test_ep_estimate_takes_a_dataframe_as_ep_score_does(
    ray_runtime: None, service: Any, config: Path
) -> None:
    """A polars DataFrame with id, state, questions and service: intervals come back, and the
    temporary output is not named; a DataFrame without them is one line naming what is missing."""
    import evalpipe as ep
    from conftest import QUESTIONS
    from evalpipe.errors import ConfigError

    frame = pl.read_parquet(config.parent / "in.parquet")
    lifted = {"requests_per_minute": 60_000, "tokens_per_second": 10_000_000}
    svc = ep.Service(
        service.base_url, model="model-1.13.0", pricing={"default": 0.05}, limits=lifted
    )
    found = ep.estimate(frame, id="id", state="text", questions=QUESTIONS, service=svc,
                        margin=0.12, by="kind")  # fmt: skip
    table = pl.DataFrame(found["estimates"])
    assert found["reached"] and found["output"] is None
    assert {"question", "low", "high"} <= set(table.columns)
    assert (table["low"] <= table["estimate"]).all() and (table["estimate"] <= table["high"]).all()
    assert set(table["stratum"].drop_nulls()) == set(KINDS)
    with pytest.raises(ConfigError, match="state=, questions=, service="):
        ep.estimate(frame, id="id", margin=0.1)


def test_bad_flags_are_one_line_errors_before_anything_is_sent(config: Path) -> None:
    """A --by column the corpus lacks, or --max-cost without a price: exit 2, one line naming
    it, and no output written."""
    out = config.parent / "refused"
    flags = ["--set", f"output.path={out}", "--margin", "0.05"]
    result = CliRunner().invoke(main, ["estimate", str(config), *flags, "--by", "knid"])
    assert result.exit_code == 2
    assert "--by column 'knid' not found" in result.stderr
    assert "did you mean 'kind'" in result.stderr
    result = CliRunner().invoke(
        main, ["estimate", str(config), *flags, "--max-cost", "1", "--set", "pricing={}"]
    )
    assert result.exit_code == 2 and "--max-cost" in result.stderr
    assert not out.exists()
