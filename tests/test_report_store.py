"""`evalpipe report` on outputs that live on an object store, against a real S3 API.

The session's moto S3 server on loopback (`s3` in conftest.py) holds the outputs; the report
reads them through the standard AWS variables, as a job writes them. What must hold: the page
of an output on S3 is the page of the same output on disk (same figures, same charts), and
lands in the bucket as `_report.html`; a `dt=*` series on S3 is drawn as a trend; `--against`
takes an S3 output; a URI that is not an output is one line, exit 2. The pages open in
headless Chromium without a console error.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pyarrow.fs as pafs
import pytest
from click.testing import CliRunner

from conftest import open_page
from evalpipe.cli import main
from test_report import chart_names, make_manifest, make_rows, write_output
from test_report_browser import MEASURE

ROWS = 600


def put_folder(s3: pafs.FileSystem, local: Path, prefix: str) -> None:
    """Upload every file of the local folder `local` under `prefix` (bucket/key)."""
    pafs.copy_files(
        str(local), prefix, source_filesystem=pafs.LocalFileSystem(), destination_filesystem=s3
    )


def objects(s3: pafs.FileSystem, prefix: str) -> list[str]:
    infos = s3.get_file_info(pafs.FileSelector(prefix, allow_not_found=True))
    return sorted(i.base_name for i in infos if i.type == pafs.FileType.File)


def read_object(s3: pafs.FileSystem, path: str) -> str:
    with s3.open_input_stream(path) as stream:
        return bytes(stream.read()).decode("utf-8")


def report(*args: str) -> Any:
    return CliRunner().invoke(main, ["report", *args])


def comparable(html: str, location: str) -> str:
    """The page without what differs between two places and two renders: the location and the
    stamp (`written ...`) in the subtitle, and the id of a gradient (vl-convert numbers them
    with a counter of the process)."""
    html = html.replace(location, "OUTPUT")
    html = re.sub(r"c\d+-gradient_\d+", "gradient", html)
    return re.sub(r"written \d{4}-\d\d-\d\d \d\d:\d\d UTC", "written T", html)


@pytest.fixture(scope="module")
def stored(s3: pafs.FileSystem, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """A 600-row output with every section, on disk and copied to the bucket, and its corpus
    on both."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    tmp = tmp_path_factory.mktemp("store")
    local = tmp / "out"
    write_output(local, make_rows(ROWS), manifest=make_manifest(), part_rows=200)
    texts = [f"Review {i}: the kettle {'broke' if i % 3 else 'works'}." for i in range(620)]
    corpus = tmp / "corpus.parquet"
    pq.write_table(pa.table({"doc_id": list(range(620)), "text": texts}), corpus)
    put_folder(s3, local, "tables/report/out")
    pq.write_table(pq.read_table(corpus), "corpora/report/corpus.parquet", filesystem=s3)
    return {"local": local, "corpus": corpus, "uri": "s3://tables/report/out",
            "corpus_uri": "s3://corpora/report/corpus.parquet"}  # fmt: skip


def test_an_output_on_s3_is_reported_as_the_same_output_on_disk(
    s3: pafs.FileSystem, stored: dict[str, Any], tmp_path: Path, browser: Any
) -> None:
    uri, local = stored["uri"], stored["local"]
    before = objects(s3, "tables/report/out")
    result = report(uri, "--input", stored["corpus_uri"])
    assert result.exit_code == 0, result.output
    assert result.stdout.strip() == f"{uri}/_report.html"  # printed: where it went
    assert objects(s3, "tables/report/out") == sorted([*before, "_report.html"])  # one object
    remote = read_object(s3, "tables/report/out/_report.html")

    on_disk = report(
        str(local), "--input", str(stored["corpus"]), "--html", str(tmp_path / "l.html")
    )
    assert on_disk.exit_code == 0, on_disk.output
    mine = (tmp_path / "l.html").read_text(encoding="utf-8")
    assert f"{uri} · written" in remote and "evalpipe report: out" in remote
    remote = remote.replace(stored["corpus_uri"], "CORPUS")
    mine = mine.replace(str(stored["corpus"]), "CORPUS")
    assert comparable(remote, uri) == comparable(mine, str(local.resolve()))
    assert len(chart_names(remote)) == 15 and "coverage" in chart_names(remote)

    page_file = tmp_path / "remote.html"
    page_file.write_text(remote, encoding="utf-8")
    page, errors = open_page(browser, page_file.as_uri())
    charts = page.evaluate(MEASURE)
    page.close()
    assert errors == []
    assert [c["name"] for c in charts] == chart_names(remote)
    assert all(c["width"] > 100 and c["marks"] > 0 for c in charts), charts


def test_the_page_of_an_s3_output_can_go_to_a_local_file(
    s3: pafs.FileSystem, stored: dict[str, Any], tmp_path: Path
) -> None:
    target = tmp_path / "page.html"
    result = report(stored["uri"], "--html", str(target))
    assert result.exit_code == 0, result.output
    assert result.stdout.strip() == str(target)
    assert "s3://tables/report/out" in target.read_text(encoding="utf-8")


def test_a_nightly_series_on_s3_is_drawn_as_a_trend(
    s3: pafs.FileSystem, tmp_path: Path, browser: Any
) -> None:
    from test_report_trend import NIGHTS, write_night

    root = "s3://tables/nightly"
    for date, (model, p) in NIGHTS.items():
        write_night(f"{root}/dt={date}", model, p, staging=tmp_path)
    result = report(root)
    assert result.exit_code == 0, result.output
    assert result.stdout.strip() == f"{root}/_report.html"
    html = read_object(s3, "tables/nightly/_report.html")
    assert chart_names(html) == ["helpful-trend", "mood-trend"]
    assert "2026-11-24: the model changed to model-1.14.0" in html
    page_file = tmp_path / "trend.html"
    page_file.write_text(html, encoding="utf-8")
    page, errors = open_page(browser, page_file.as_uri())
    charts = page.evaluate(MEASURE)
    page.close()
    assert errors == []
    assert all(c["width"] > 100 and c["marks"] > 0 for c in charts), charts


def test_report_against_an_output_on_s3(
    s3: pafs.FileSystem, tmp_path: Path, browser: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from evalpipe.analysis import intervals
    from test_agree import planted
    from test_report_compare import turned

    monkeypatch.setattr(intervals, "RESAMPLES", 200)  # as test_report_compare: the page, not digits
    before, _, _ = planted(tmp_path)
    after = turned(tmp_path / "after", before, every=10)
    put_folder(s3, before, "tables/against/before")
    put_folder(s3, after, "tables/against/after")
    target = tmp_path / "against.html"
    result = report("s3://tables/against/after", "--against", "s3://tables/against/before",
                    "--html", str(target))  # fmt: skip
    assert result.exit_code == 0, result.output
    html = target.read_text(encoding="utf-8")
    assert "Compared with s3://tables/against/before" in html
    assert "against-changes" in chart_names(html)
    page, errors = open_page(browser, target.as_uri())
    section = page.locator("section#against").inner_text()
    page.close()
    assert errors == []
    assert "flips" in section and "95% interval" in section


def test_a_uri_that_is_no_output_is_one_line(s3: pafs.FileSystem, stored: dict[str, Any]) -> None:
    def bad(*args: str) -> str:
        result = report(*args)
        assert result.exit_code == 2, result.output
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("InputError: "), result.stderr
        return lines[0]

    missing = bad("s3://tables/no-such-output")
    assert "'s3://tables/no-such-output' does not exist" in missing
    assert "s3://no-such-bucket/out" in bad("s3://no-such-bucket/out")
    s3.create_dir("tables/empty-output")
    with s3.open_output_stream("tables/empty-output/notes.txt") as stream:
        stream.write(b"not an output")
    assert "not an evalpipe output" in bad("s3://tables/empty-output")
    corpus = bad(stored["uri"], "--input", "s3://corpora/report/none.parquet")
    assert "s3://corpora/report/none.parquet' does not exist" in corpus
    assert "_report.html" not in objects(s3, "tables/empty-output")
