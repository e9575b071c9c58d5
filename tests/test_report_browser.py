"""The report as a reader sees it: opened from disk in headless Chromium, offline.

Debian's `chromium` (`make chromium` installs it) is driven with Playwright for Python, which
never downloads a browser of its own here (the `browser` fixture of conftest.py). The page
must draw every chart (an SVG of nonzero size with drawn marks, every label inside its chart),
log no error, and fetch nothing but itself. A screenshot of the whole page is kept at
out/report.png for a person to look at. The pages of `report --against` (test_report_compare.py)
and of a nightly series (test_report_trend.py) are opened here too: one browser for all of them,
a launch of Chromium costing a CPU-second.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from conftest import open_page
from evalpipe.cli.report import write_report
from test_report import chart_names, make_manifest, make_rows, write_output
from test_report_compare import make_pair
from test_report_trend import make_nightly

ROOT = Path(__file__).resolve().parents[1]
SCREENSHOT = ROOT / "out" / "report.png"

# Per chart: its SVG's size, how many marks it drew with a nonzero box, and the labels that
# stick out of the SVG (a label cut off at the edge is as unreadable as a missing one).
MEASURE = """() => [...document.querySelectorAll('figure.chart')].map(figure => {
  const svg = figure.querySelector(':scope > svg');
  if (!svg) return {name: figure.dataset.chart, width: 0, height: 0, marks: 0, outside: []};
  const box = svg.getBoundingClientRect();
  const drawn = [...svg.querySelectorAll('.role-mark > *')].filter(mark => {
    const b = mark.getBoundingClientRect();
    return b.width + b.height > 0 && mark.getAttribute('opacity') !== '0';
  });
  const outside = [...svg.querySelectorAll('text')].filter(t => {
    const b = t.getBoundingClientRect();
    return t.textContent.trim() && (b.left < box.left - 1 || b.right > box.right + 1
      || b.top < box.top - 1 || b.bottom > box.bottom + 1);
  }).map(t => t.textContent);
  return {name: figure.dataset.chart, width: box.width, height: box.height,
          marks: drawn.length, outside};
})"""


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The report of a 600-row output with every section, beside its corpus."""
    tmp = tmp_path_factory.mktemp("browser")
    write_output(tmp / "out", make_rows(600), manifest=make_manifest(), part_rows=200)
    corpus = tmp / "corpus.parquet"
    texts = [f"Review {i}: the kettle {'broke' if i % 3 else 'works'}." for i in range(620)]
    pq.write_table(pa.table({"doc_id": list(range(620)), "text": texts}), corpus)
    return write_report(tmp / "out", corpus)


def test_every_chart_renders_offline_without_errors(browser: Any, report: Path) -> None:
    page = browser.new_page(viewport={"width": 1200, "height": 900})
    requests: list[str] = []
    errors: list[str] = []
    page.on("request", lambda request: requests.append(request.url))
    page.on("console", lambda msg: errors.append(msg.text) if msg.type == "error" else None)
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.goto(report.as_uri(), wait_until="load")
    charts = page.evaluate(MEASURE)
    SCREENSHOT.parent.mkdir(exist_ok=True)
    page.screenshot(path=str(SCREENSHOT), full_page=True)
    page.close()
    assert [c["name"] for c in charts] == chart_names(report.read_text(encoding="utf-8"))
    assert len(charts) == 15
    for chart in charts:
        assert chart["width"] > 100 and chart["height"] > 50, chart
        assert chart["marks"] > 0, f"{chart['name']}: an empty chart area"
        assert chart["outside"] == [], f"{chart['name']}: labels cut off at the edge"
    assert errors == []
    assert requests == [report.as_uri()]  # the page itself and nothing else
    assert SCREENSHOT.stat().st_size > 50_000


def test_the_page_with_against_opens_in_chromium_without_errors(
    tmp_path: Path, browser: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`report --against B --labels L` (test_report_compare.py's pair): its diff and
    agreement charts drawn, no console error."""
    from evalpipe.analysis import intervals

    monkeypatch.setattr(intervals, "RESAMPLES", 200)  # as test_report_compare.py's: the page
    before, after, labels = make_pair(tmp_path)
    page_path = write_report(after, html=tmp_path / "r.html", against=str(before),
                             labels=str(labels))  # fmt: skip
    assert isinstance(page_path, Path)
    page, errors = open_page(browser, page_path.as_uri())
    charts = {c["name"]: c for c in page.evaluate(MEASURE)}
    section = page.locator("section#against").inner_text()
    page.close()
    assert errors == []
    assert "flips" in section and "95% interval" in section
    for name in ("against-changes", "helpful-reliability"):
        chart = charts[name]
        assert chart["width"] > 100 and chart["marks"] > 0, chart
        assert chart["outside"] == [], f"{name}: labels cut off at the edge"


def test_the_series_page_opens_in_chromium_without_errors(tmp_path: Path, browser: Any) -> None:
    """A nightly series (test_report_trend.py's): a trend chart per question, drawn."""
    nightly = make_nightly(tmp_path / "out")
    page_path = write_report(nightly, html=tmp_path / "trend.html")
    assert isinstance(page_path, Path)
    page, errors = open_page(browser, page_path.as_uri())
    charts = page.evaluate(MEASURE)
    page.locator("section#trend").screenshot(path=str(tmp_path / "trend.png"))
    page.close()
    assert errors == []
    assert [c["name"] for c in charts] == ["helpful-trend", "mood-trend"]
    for chart in charts:
        assert chart["width"] > 100 and chart["marks"] > 0, chart
        assert chart["outside"] == [], f"{chart['name']}: labels cut off at the edge"
