"""A judge you can trust, as a user runs it: jobs on the session's Ray against embedded services
over HTTP told a known miscalibration (`overconfidence`) or to answer a share of states anew
under the same model ID (`drift`).

- `evalpipe calibrate` on the output of an overconfident service, with labels drawn from the
  true probabilities: held-out ECE at least halved, Brier not up; a second job with the file and
  a target agreement writes the calibrated columns and `K__abstain`, which `describe`, `agree`,
  the summary and the report show.
- The canary: an unchanged service passes night after night; a service answering 10% of
  states anew is stopped (exit 8) before any corpus row is sent, and says so in the JSON log,
  the lineage and one line.

Labels come from the reference evaluator's own answers (the truth at overconfidence 1).
"""

from __future__ import annotations

import concurrent.futures
import json
from pathlib import Path
from typing import Any

import polars as pl
import pytest
import yaml
from click.testing import CliRunner

from conftest import QUESTIONS, cli_run, embedded, job_config, run_config
from evalpipe.cli.main import main
from evalpipe.config import parse_config
from evalpipe.planning import prepare
from evalpipe.preflight import check_canary
from evalpipe.reading import open_output
from evalpipe.report import build
from evalpipe.service.evaluator import answer, compile_questions
from judgedata import drawn

pytestmark = pytest.mark.patient  # `make test` runs it beside the rest (the Makefile)

DEMO = Path(__file__).resolve().parent.parent / "data" / "demo" / "reviews.parquet"


def demo_rows(start: int, count: int) -> pl.DataFrame:
    rows = pl.read_parquet(DEMO).slice(start, count).rename({"review_id": "id"})
    return rows.filter(pl.col("text").str.strip_chars().str.len_chars() > 0).select("id", "text")


def labels_for(rows: pl.DataFrame, seed: int) -> pl.DataFrame:
    """People's labels of `rows`, drawn from the reference evaluator's true answers."""
    compiled = compile_questions(QUESTIONS)
    truths = {i: answer(text, compiled) for i, text in rows.select("id", "text").iter_rows()}
    return drawn(truths, rows["id"].to_list(), seed)


def invoke(*args: str) -> Any:
    return CliRunner().invoke(main, [str(a) for a in args])


# --------------------------------------------------------------------------- calibration


@pytest.fixture(scope="module")
def calibrated(tmp_path_factory: pytest.TempPathFactory, ray_runtime: None) -> Any:
    """Two jobs on an overconfident service: the first's output calibrated on 700 labelled
    rows; the second, on other rows, with the file and a target agreement."""
    tmp = tmp_path_factory.mktemp("calibrated")
    with embedded(overconfidence=3.0) as service:
        first, second = tmp / "first", tmp / "second"
        for folder, rows in ((first, demo_rows(0, 720)), (second, demo_rows(720, 300))):
            folder.mkdir()
            rows.write_parquet(folder / "in.parquet")
        run_config(job_config(first, service.base_url))
        labels = labels_for(demo_rows(0, 720), seed=46)
        labels.write_parquet(tmp / "labels.parquet")
        made = invoke("calibrate", first / "out", "--labels", tmp / "labels.parquet", "--out",
                      tmp / "calibration.json", "--target-agreement", "0.6", "--json")  # fmt: skip
        assert made.exit_code == 0, made.output
        config = job_config(second, service.base_url)
        (second / "job.yaml").write_text(yaml.safe_dump(config))
        run = cli_run(second / "job.yaml", "--calibration", str(tmp / "calibration.json"),
                      "--set", "calibration.target_agreement=0.6")  # fmt: skip
    labels_for(demo_rows(720, 300), seed=7).write_parquet(tmp / "new-labels.parquet")
    return {"tmp": tmp, "figures": json.loads(made.output), "run": run.output,
            "second": second / "out"}  # fmt: skip


@pytest.mark.ray
def test_held_out_ece_falls_by_half_and_brier_does_not_rise(calibrated: dict[str, Any]) -> None:
    figures = calibrated["figures"]
    assert figures["file"] and figures["model"] == "model-1.13.0"
    for q in figures["questions"]:
        ece, brier = q["held_out"]["ece"], q["held_out"]["brier"]
        assert ece["after"] <= ece["before"] / 2, q["key"]
        assert brier["after"] <= brier["before"], q["key"]
        assert q["abstain"]["target_agreement"] == 0.6


@pytest.mark.ray
def test_the_calibrated_columns_are_written_described_and_kept(calibrated: dict) -> None:
    out = open_output(str(calibrated["second"]))
    rows = out.rows
    assert {"helpful__p_true_calibrated", "helpful__abstain", "quality__score_calibrated",
            "sentiment__p_calibrated__mixed"} <= set(rows.columns)  # fmt: skip
    answered = rows.filter(pl.col("_error_type").is_null())
    assert answered["helpful__p_true_calibrated"].null_count() == 0
    assert answered["helpful__p_true"].std() > answered["helpful__p_true_calibrated"].std()
    described = invoke("describe", calibrated["second"], "--json")
    roles = {c["column"]: c["role"] for c in json.loads(described.output)["columns"]}
    assert roles["helpful__abstain"] == "abstain" and roles["helpful__p_true"] is None
    summary = out.manifest["summary"]  # type: ignore[index]
    kept = summary["rows_kept"]["helpful"]
    assert kept["answered"] == answered.height
    assert kept["kept"] == answered.filter(~pl.col("helpful__abstain")).height
    assert "kept          helpful:" in calibrated["run"]
    page = build(out)
    trust = next(s for s in page.sections if s.id == "trust")
    assert any("helpful__p_true_calibrated" in cell for t in trust.tables for r in t.rows
               for cell in r)  # fmt: skip


@pytest.mark.ray
def test_agree_on_new_labels_shows_the_calibrated_column_closer(calibrated: dict) -> None:
    agreed = invoke("agree", calibrated["second"], "--labels",
                    calibrated["tmp"] / "new-labels.parquet", "--json")  # fmt: skip
    helpful = next(q for q in json.loads(agreed.output)["questions"] if q["key"] == "helpful")
    figure = {m["name"]: m["value"] for m in helpful["metrics"]}
    assert figure["ece (calibrated)"] < figure["ece"]
    assert figure["brier (calibrated)"] <= figure["brier"]


# --------------------------------------------------------------------------- the canary


@pytest.fixture(scope="module")
def nightly(tmp_path_factory: pytest.TempPathFactory, ray_runtime: None) -> Any:
    """A nightly job with a canary of 80 labelled rows, against a service that first answers as
    it always does, then answers 10% of states anew under the same model ID. The first night's
    corpus holds the canary's rows too, so the answer cache could replay them; the drifted
    night's corpus is rows never asked, into an output of its own."""
    tmp = tmp_path_factory.mktemp("nightly")
    canary = demo_rows(2000, 80)
    pl.concat([demo_rows(0, 120), canary]).write_parquet(tmp / "in.parquet")
    demo_rows(300, 120).write_parquet(tmp / "next.parquet")
    canary.join(labels_for(canary, seed=3), on="id").write_parquet(tmp / "canary.parquet")
    lineage = tmp / "lineage.jsonl"
    with embedded() as service, pytest.MonkeyPatch.context() as patch:
        patch.setenv("OPENLINEAGE__TRANSPORT__TYPE", "file")
        patch.setenv("OPENLINEAGE__TRANSPORT__LOG_FILE_PATH", str(lineage))
        patch.setenv("OPENLINEAGE__TRANSPORT__APPEND", "true")
        config = job_config(tmp, service.base_url)
        (tmp / "job.yaml").write_text(yaml.safe_dump(config))
        first = cli_run(tmp / "job.yaml", "--canary", str(tmp / "canary.parquet"),
                        "--log-format", "json")  # fmt: skip
        parts = sorted(p.name for p in (tmp / "out").glob("part-*"))
        prepared = prepare(
            parse_config({**config, "canary": {"labels": str(tmp / "canary.parquet")}})
        )
        url: concurrent.futures.Future[str] = concurrent.futures.Future()
        url.set_result(service.base_url)
        nights = [check_canary(prepared, url, f"night-{i}", warn=lambda _: None) for i in range(20)]
        service.set_faults(drift=0.1)
        before = service.stats()["requests_answered"]
        moved = invoke("run", tmp / "job.yaml", "--canary", tmp / "canary.parquet",
                       "--log-format", "json", "--set", f"input.path={tmp / 'next.parquet'}",
                       "--set", f"output.path={tmp / 'next'}")  # fmt: skip
        answered = service.stats()["requests_answered"] - before
    return {"tmp": tmp, "first": first.output, "nights": nights, "moved": moved,
            "answered": answered, "canary_rows": canary.height, "parts": parts,
            "lineage": lineage}  # fmt: skip


def _events(output: str, name: str) -> list[dict[str, Any]]:
    found = []
    for line in output.splitlines():
        if line.startswith("{") and f'"event": "{name}"' in line.replace('":"', '": "'):
            found.append(json.loads(line))
    return found


@pytest.mark.ray
def test_an_unchanged_service_passes_night_after_night(nightly: dict[str, Any]) -> None:
    [first] = _events(nightly["first"], "canary")
    assert first["passed"] and first["rows"] == nightly["canary_rows"]
    assert all(n is not None and n["passed"] for n in nightly["nights"])  # 20 of 20
    assert all(n["compared_with"] == "labels and the last run's answers" for n in nightly["nights"])


@pytest.mark.ray
def test_a_service_answering_a_tenth_anew_is_stopped_before_any_corpus_row(
    nightly: dict[str, Any],
) -> None:
    moved = nightly["moved"]
    assert moved.exit_code == 8, moved.output[-2000:]
    assert nightly["answered"] == nightly["canary_rows"]  # the canary's requests, nothing more
    assert not list((nightly["tmp"] / "next").glob("part-*"))  # no corpus row written either
    assert sorted(p.name for p in (nightly["tmp"] / "out").glob("part-*")) == nightly["parts"]
    [canary] = _events(moved.output, "canary")
    assert not canary["passed"]
    [error] = _events(moved.output, "error")
    assert error["exit_code"] == 8 and error["error_type"] == "CanaryFailed"
    assert "answers changed since the last run on model-1.13.0" in error["message"]
    assert "'helpful'" in error["message"] and "No corpus row was sent" in error["message"]


@pytest.mark.ray
def test_the_lineage_carries_the_canary(nightly: dict[str, Any]) -> None:
    events = [json.loads(line) for line in nightly["lineage"].read_text().splitlines() if line]
    ends = [e for e in events if e["eventType"] in ("COMPLETE", "FAIL")]
    assert [e["eventType"] for e in ends] == ["COMPLETE", "FAIL"]
    assert [e["run"]["facets"]["evalpipe_canary"]["passed"] for e in ends] == [True, False]
    assert "CanaryFailed" in ends[1]["run"]["facets"]["errorMessage"]["message"]
