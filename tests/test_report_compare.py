"""`evalpipe report --against B --labels L`: the diff and agreement sections in the page (its
Chromium test, offline and without a console error, is test_report_browser.py's: one browser
for the report's pages)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from click.testing import CliRunner

from evalpipe.cli import main
from evalpipe.cli.report import write_report
from evalpipe.output import Sink, output_schema
from evalpipe.output.table import RowResult
from test_agree import QUESTIONS, planted
from test_report import chart_names


@pytest.fixture(autouse=True)
def _fewer_resamples(monkeypatch: pytest.MonkeyPatch) -> None:
    """200 bootstrap resamples, not 2,000: what these tests check (the figures, the bins, the
    page) does not depend on the intervals' last digit, and kappa's bootstrap, one sklearn
    call per resample, took most of their time."""
    from evalpipe.analysis import intervals

    monkeypatch.setattr(intervals, "RESAMPLES", 200)


def turned(out: Path, before: Path, every: int) -> Path:
    """A copy of output `before` whose every `every`-th row is answered the other way."""
    import polars as pl

    rows = pl.read_parquet(before / "part-*.parquet").sort("_row").to_dicts()
    results = []
    for row in rows:
        if row["_error_type"] is not None:
            results.append(RowResult(row["id"], None, None, 0, "network", "lost"))
            continue
        p = row["helpful__p_true"]
        p = 1 - p if row["id"] % every == 0 else p
        probabilities = {k: row[f"sentiment__p__{k}"] for k in ("positive", "negative", "mixed")}
        answers: dict[str, Any] = {
            "helpful": {"noul": p},
            "sentiment": {"choice": row["sentiment__choice"], "confidence": 0.5,
                          "probabilities": probabilities},
            "quality": {"score": row["quality__score"], "confidence": 0.5, "probabilities": {
                str(i): row[f"quality__p__{n}"] for i, n in enumerate(
                    ("poor", "fair", "good", "great"))}},
        }  # fmt: skip
        results.append(RowResult(row["id"], answers, "m-2", 1, position=row["_row"]))
    sink = Sink.open(
        out, output_schema("id", pa.int64(), QUESTIONS), "fp", run_id="r2", write_seconds=0
    )
    sink.resume(None)
    sink.append(results)
    sink.close()
    sink.finish({}, "finished")
    return out


def make_pair(tmp: Path) -> tuple[Path, Path, Path]:
    """An output, the same turned every 10th row, and labels of its rows (the browser test
    of test_report_browser.py opens their page)."""
    before, labels, _ = planted(tmp)
    labels.write_parquet(tmp / "labels.parquet")
    after = turned(tmp / "after", before, every=10)
    return before, after, tmp / "labels.parquet"


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path]:
    return make_pair(tmp_path_factory.mktemp("compare"))


def test_report_against_an_earlier_run_and_labels(pair: tuple[Path, Path, Path]) -> None:
    before, after, labels = pair
    page = write_report(after, against=str(before), labels=str(labels))
    html = page.read_text(encoding="utf-8")
    assert f"Compared with {before}" in html
    assert "Agreement with people&#39;s labels" in html or "Agreement with people's" in html
    names = chart_names(html)
    assert "against-changes" in names and "helpful-reliability" in names
    assert "models" in html and "differ" in html
    from evalpipe.analysis import compare
    from evalpipe.reading import open_output as open_table

    result, _ = compare(open_table(str(before)), open_table(str(after)))
    helpful = next(q for q in result.questions if q["key"] == "helpful")
    assert [r["id"] for r in helpful["flips"]["rows"]] == list(range(0, 400, 10))


def test_report_against_refuses_an_output_of_other_questions(
    pair: tuple[Path, Path, Path], tmp_path: Path
) -> None:
    _, after, _ = pair
    other = {"r": {"type": "noul", "instructions": "x"}}
    sink = Sink.open(
        tmp_path / "o", output_schema("id", pa.int64(), other), "f", run_id="r", write_seconds=0
    )
    sink.resume(None)
    sink.append([RowResult(1, {"r": {"noul": 0.3}}, "m", 1)])
    sink.close()
    sink.finish({}, "finished")
    result = CliRunner().invoke(main, ["report", str(after), "--against", str(tmp_path / "o")])
    assert result.exit_code == 2
    assert result.output.startswith("InputError:") and "share no question" in result.output
