"""A nightly series (`out/dt=*`) as a trend: one chart per question, model changes marked (the
page in Chromium is test_report_browser.py's: one browser for the report's pages)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import polars as pl
import pyarrow as pa
import pytest
from click.testing import CliRunner

from evalpipe.analysis import model_changes, nightly_series
from evalpipe.cli import main
from evalpipe.output import Sink, output_schema
from evalpipe.output.table import RowResult
from test_report import chart_names

QUESTIONS = {
    "helpful": {"type": "noul", "instructions": "x"},
    "mood": {"type": "choice", "instructions": "x", "criteria": {"up": None, "down": None}},
}
NIGHTS = {
    "2026-11-22": ("model-1.13.0", 0.30),
    "2026-11-23": ("model-1.13.0", 0.35),
    "2026-11-24": ("model-1.14.0", 0.60),
    "2026-11-25": ("model-1.14.0", 0.62),
}


def answers(p: float) -> dict[str, Any]:
    choice = "up" if p > 0.5 else "down"
    probs = {"up": p, "down": 1 - p}
    return {"helpful": {"noul": p}, "mood": {"choice": choice, "confidence": 0.2,
                                             "probabilities": probs}}  # fmt: skip


def write_night(out: Path | str, model: str, p: float, staging: Path | None = None) -> None:
    """One night's output at `out` (a directory or an object-store URI)."""
    sink = Sink.open(out, output_schema("id", pa.int64(), QUESTIONS), "fp", run_id="r",
                     write_seconds=0, staging=staging)  # fmt: skip
    sink.resume(None)
    sink.append([RowResult(i, answers(p + (i % 5) / 100), model, 1, position=i) for i in range(20)])
    sink.close()
    sink.finish({}, "finished")


def make_nightly(root: Path) -> Path:
    """The nights of NIGHTS under `root`, and one not written yet (the browser test of
    test_report_browser.py opens their page)."""
    for date, (model, p) in NIGHTS.items():
        write_night(root / f"dt={date}", model, p)
    (root / "dt=2026-11-26").mkdir()  # a night whose job has not written yet
    return root


@pytest.fixture(scope="module")
def nightly(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_nightly(tmp_path_factory.mktemp("nightly") / "out")


def test_series_figures_and_model_changes(nightly: Path) -> None:
    document = nightly_series(str(nightly))
    dates = [n["date"] for n in document["nights"]]
    assert dates == [*NIGHTS, "2026-11-26"]
    assert "no part-*.parquet" in document["nights"][-1]["skipped"]
    for night in document["nights"][:-1]:
        rows = pl.read_parquet(nightly / f"dt={night['date']}" / "part-*.parquet")
        assert night["questions"]["helpful"]["mean p(yes)"] == pytest.approx(
            rows["helpful__p_true"].mean()
        )
        assert night["model"] == NIGHTS[night["date"]][0]
    assert model_changes(document) == [("2026-11-24", "model-1.14.0")]


def test_the_report_of_a_series_draws_a_trend_per_question(nightly: Path) -> None:
    result = CliRunner().invoke(main, ["report", str(nightly)])
    assert result.exit_code == 0, result.output
    html = (nightly / "_report.html").read_text(encoding="utf-8")
    assert chart_names(html) == ["helpful-trend", "mood-trend"]
    assert "2026-11-24: the model changed to model-1.14.0" in html
    assert "nightly series" in html
