"""`evalpipe report` on outputs written here in the documented format (README "The output
table"): Parquet parts with the layout in their schema metadata, plus `_manifest.json`.

The figures are checked against the same rows counted in plain Python, the page against what a
reader needs (one file, nothing to fetch, a chart for every section that has data), and bad
outputs against the one-line InputError with nothing written. `write_output` is also used by
the browser test (test_report_browser.py).
"""

from __future__ import annotations

import json
import re
import uuid
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from evalpipe.cli.main import main
from evalpipe.cli.report import write_report
from evalpipe.report import data, questions
from evalpipe.report.output import report_output

SENTIMENT = ["positive", "mixed", "negative"]
LEVELS = ["0", "1", "2", "3"]
LAYOUT = [["helpful", "noul", []], ["sentiment", "choice", SENTIMENT], ["quality", "score", LEVELS]]
ERRORS = {3: "invalid_state", 7: "rate_limited", 11: "rate_limited", 19: "context_limit"}
START = datetime(2026, 11, 20, 2, 0, tzinfo=UTC)
ROWS = 40


# --------------------------------------------------------------------------- writing outputs


def _columns(layout: list[list[Any]]) -> list[tuple[str, pa.DataType]]:
    fields: list[tuple[str, pa.DataType]] = []
    for key, kind, probs in layout:
        if kind == "noul":
            fields.append((f"{key}__noul", pa.float64()))
            continue
        head = pa.string() if kind == "choice" else pa.float64()
        fields += [(f"{key}__{kind}", head), (f"{key}__confidence", pa.float64())]
        fields += [(f"{key}__p__{p}", pa.float64()) for p in probs]
    return fields


META = [("_model", pa.string()), ("_input_tokens", pa.int64()), ("_error_type", pa.string())]
META += [("_error", pa.string())]
LINEAGE = [("_run_id", pa.string()), ("_scored_at", pa.timestamp("ms", tz="UTC"))]
LINEAGE += [("_state_hash", pa.string()), ("_cached", pa.int64()), ("_reused", pa.bool_())]


def write_output(
    path: Path,
    rows: list[dict[str, Any]],
    layout: list[list[Any]] = LAYOUT,
    *,
    lineage: bool = True,
    layout_metadata: bool = True,
    manifest: dict[str, Any] | None = None,
    part_rows: int = 16,
    id_field: tuple[str, pa.DataType] = ("doc_id", pa.int64()),
) -> None:
    """Parts of `part_rows` rows in the documented schema, and the manifest if given."""
    path.mkdir(parents=True, exist_ok=True)
    fields = [id_field, *_columns(layout), *META, *(LINEAGE if lineage else [])]
    metadata = {b"evalpipe.layout": json.dumps(layout).encode()} if layout_metadata else None
    schema = pa.schema(fields, metadata=metadata)
    for n, start in enumerate(range(0, max(len(rows), 1), part_rows)):
        chunk = rows[start : start + part_rows]
        table = pa.Table.from_pylist(chunk, schema=schema)
        pq.write_table(table, path / f"part-{n:05d}-{uuid.uuid4().hex}.parquet")
    if manifest is not None:
        (path / "_manifest.json").write_text(json.dumps(manifest), encoding="utf-8")


def _distribution(i: int, size: int) -> list[float]:
    """A distribution over `size` values that peaks at i % size."""
    weights = [1.0 + 6.0 * (j == i % size) + (j * i) % 3 for j in range(size)]
    return [w / sum(weights) for w in weights]


def make_rows(n: int = ROWS) -> list[dict[str, Any]]:
    """`n` rows with every outcome: answered rows (some reused, some from the cache) spread
    over two runs, and the error rows of ERRORS."""
    rows = []
    for i in range(n):
        error = ERRORS.get(i)
        row: dict[str, Any] = {"doc_id": i, "_error_type": error, "_input_tokens": 0}
        row["_run_id"] = "run-a" if i < n // 2 else "run-b"
        row["_scored_at"] = START + timedelta(seconds=2 * i + (3600 if i >= n // 2 else 0))
        row["_cached"], row["_reused"] = 0, False
        if error:
            row["_error"] = f"row {i} ended {error}"
            rows.append(row)
            continue
        s, q = _distribution(i, 3), _distribution(i // 2, 4)
        row |= {"helpful__noul": (i % 10) / 10 + 0.01, "_model": "model-1.13.0"}
        row |= {"sentiment__choice": SENTIMENT[s.index(max(s))], "sentiment__confidence": max(s)}
        row |= {f"sentiment__p__{o}": p for o, p in zip(SENTIMENT, s, strict=True)}
        row |= {"quality__score": sum(j * p for j, p in enumerate(q)), "quality__confidence": 0.5}
        row |= {f"quality__p__{lv}": p for lv, p in zip(LEVELS, q, strict=True)}
        row["_input_tokens"] = 0 if i % 9 == 0 else 100 + i
        row["_reused"], row["_cached"] = i % 9 == 0 and i % 2 == 0, 3 if i % 9 == 0 and i % 2 else 0
        row["_state_hash"] = f"{i:032x}"
        rows.append(row)
    return rows


def make_manifest() -> dict[str, Any]:
    def run(run_id: str, answered: int, rpm: float) -> dict[str, Any]:
        summary = {"rows_answered": answered, "rows_in_error": {"rate_limited": 2},
                   "rate_limited_429": 5, "wall_seconds": 41.5, "achieved_rpm": rpm,
                   "rpm_limit": 1200, "price_per_million_input_tokens": 0.05,
                   "price_source": "pricing.default",
                   "service": "https://evals.example.com:443"}  # fmt: skip
        return {"run_id": run_id, "started": START.isoformat(), "ended_how": "finished",
                "summary": summary}  # fmt: skip

    runs = [run("run-a", 18, 1100.0), run("run-b", 18, 1150.0)]
    return {"format": 2, "fingerprint": "f" * 16, "runs": runs, "summary": runs[-1]["summary"]}


@pytest.fixture
def output(tmp_path: Path) -> Path:
    out = tmp_path / "out"
    write_output(out, make_rows(), manifest=make_manifest())
    return out


# --------------------------------------------------------------------------- the figures


def test_outcomes_count_every_row_with_an_example_message(output: Path) -> None:
    table = data.outcomes(report_output(output))
    counts = dict(zip(table["outcome"], table["rows"], strict=True))
    assert counts == {
        "answered": ROWS - 4,
        "rate_limited": 2,
        "invalid_state": 1,
        "context_limit": 1,
    }
    assert table["outcome"][0] == "answered"
    examples = dict(zip(table["outcome"], table["example"], strict=True))
    assert examples["invalid_state"] == "row 3 ended invalid_state"
    assert examples["rate_limited"] in {"row 7 ended rate_limited", "row 11 ended rate_limited"}


def test_choice_question_shares_means_and_distributions(output: Path) -> None:
    out = report_output(output)
    answered = [r for r in make_rows() if r["_error_type"] is None]
    figures = questions.question_figures(out, out.questions[1])
    chosen = Counter(r["sentiment__choice"] for r in answered)
    options = {r["option"]: r for r in figures.options.iter_rows(named=True)}
    assert set(options) == set(SENTIMENT)
    for option in SENTIMENT:
        mine = [r for r in answered if r["sentiment__choice"] == option]
        assert options[option]["rows"] == chosen[option]
        assert options[option]["share"] == pytest.approx(chosen[option] / len(answered))
        confidence = sum(r["sentiment__confidence"] for r in mine) / len(mine)
        assert options[option]["mean_confidence"] == pytest.approx(confidence)
        mean_p = sum(r[f"sentiment__p__{option}"] for r in answered) / len(answered)
        assert options[option]["mean_probability"] == pytest.approx(mean_p)
        spread = figures.distributions.filter(option=option)
        assert spread["rows"].sum() == len(answered)  # every answered row in one bin
        in_top_bin = sum(r[f"sentiment__p__{option}"] >= 0.95 for r in answered)
        assert spread["rows"][-1] == in_top_bin
    assert figures.answered == len(answered) and figures.mean is None


def test_noul_and_score_histograms(output: Path) -> None:
    out = report_output(output)
    answered = [r for r in make_rows() if r["_error_type"] is None]
    noul = questions.question_figures(out, out.questions[0])
    hist = noul.histograms["noul"]
    assert hist["rows"].to_list() == [
        sum(int(r["helpful__noul"] * 20) == b for r in answered) for b in range(20)
    ]
    assert noul.mean == pytest.approx(sum(r["helpful__noul"] for r in answered) / len(answered))
    score = questions.question_figures(out, out.questions[2])
    assert score.histograms["score"]["end"].max() == pytest.approx(3.0)  # levels 0..3
    assert score.histograms["score"]["rows"].sum() == len(answered)
    level_means = [sum(r[f"quality__p__{lv}"] for r in answered) / len(answered) for lv in LEVELS]
    assert score.probabilities["mean_probability"].to_list() == pytest.approx(level_means)
    assert score.histograms["confidence"]["rows"].to_list()[10] == len(answered)  # all 0.5


def test_cost_reuse_cache_models_and_runs(output: Path) -> None:
    out = report_output(output)
    rows = make_rows()
    figures = data.cost(out)
    tokens = sum(r["_input_tokens"] for r in rows)
    assert figures["input_tokens"] == tokens
    assert figures["price_per_million"] == 0.05  # the price the run's summary recorded
    assert figures["price_source"] == "pricing.default"
    assert figures["usd"] == pytest.approx(tokens * 0.05 / 1e6)
    assert figures["reused"] == sum(r["_reused"] for r in rows) > 0
    assert figures["cached_rows"] == sum(r["_cached"] > 0 for r in rows) > 0
    assert figures["cached_questions"] == sum(r["_cached"] for r in rows)
    how = dict(data.how_answered(figures).iter_rows())
    assert sum(how.values()) == ROWS - 4
    # Written before rows named their service:
    assert data.models(out).rows() == [("not recorded", "model-1.13.0", ROWS - 4, tokens)]
    runs = data.runs(out)
    assert runs["run"].to_list() == ["run-a", "run-b"]
    assert runs["rows_in_error"].to_list() == [2, 2]
    assert runs["achieved_rpm"].to_list() == [1100.0, 1150.0]


def test_throughput_counts_every_stamped_row_per_run(output: Path) -> None:
    pace = data.throughput(report_output(output))
    per_run = {run: int(pace.filter(run=run)["rows"].sum()) for run in ("run-a", "run-b")}
    assert per_run == {"run-a": ROWS // 2, "run-b": ROWS // 2}
    assert pace.filter(run="run-b")["seconds"].min() == 0  # since the run's first row
    # rows 2 s apart over 38 s: 0.5 s buckets (at most 90), the empty ones counted as 0
    assert pace.filter(run="run-a")["rows"].to_list() == [1, 0, 0, 0] * 19 + [1]
    assert pace["rows_per_minute"].max() == 120


# --------------------------------------------------------------------------- the page

SELF_CONTAINED = [
    r"<script",
    r"<link",
    r"<iframe",
    r"@import",
    r"url\((?!#)",  # only in-page references (an SVG's clip paths)
    r"""\b(?:src|href)\s*=\s*["'](?!#)""",
]


def chart_names(html: str) -> list[str]:
    return re.findall(r'<figure class="chart" data-chart="([^"]+)">\s*<svg', html)


def test_page_is_one_file_with_a_chart_per_section(output: Path, tmp_path: Path) -> None:
    corpus = tmp_path / "corpus.parquet"
    pq.write_table(pa.table({"doc_id": list(range(5, 50)), "text": ["t"] * 45}), corpus)
    written = write_report(output, corpus)
    assert written == output / "_report.html"
    html = written.read_text(encoding="utf-8")
    for pattern in SELF_CONTAINED:
        assert not re.search(pattern, html, re.IGNORECASE), pattern
    assert chart_names(html) == [
        "outcomes",
        "helpful-noul",
        "sentiment-options", "sentiment-distributions", "sentiment-confidence",
        "quality-score", "quality-levels", "quality-confidence",
        "how-answered", "models", "run-rows", "run-rates", "run-time", "throughput", "coverage",
    ]  # fmt: skip
    assert "_journal.bin exists" not in html
    ids = re.findall(r'\bid="([^"]+)"', html)
    assert len(ids) == len(set(ids))  # inlined SVGs do not share clip-path or gradient ids
    assert "<td>row 3 ended invalid_state</td>" in html
    assert list(tmp_path.glob("out/.*")) == []  # no temporary file left behind


def test_corpus_coverage_and_sample(output: Path, tmp_path: Path) -> None:
    from evalpipe.report import corpus as corpus_figures
    from evalpipe.report.output import open_corpus

    path = tmp_path / "corpus.parquet"
    texts = [f"text of {i} " + "long " * 60 if i % 2 else f"text {i}" for i in range(5, 50)]
    pq.write_table(pa.table({"doc_id": list(range(5, 50)), "text": texts}), path)
    out = report_output(output)
    cover = corpus_figures.coverage(out, open_corpus(path, out))
    assert cover.row(0, named=True) == {
        "corpus rows": 45, "output rows": ROWS, "in both": ROWS - 5,
        "not in the output": 10, "not in the corpus": 5,
    }  # fmt: skip
    sample = corpus_figures.sample(out, open_corpus(path, out))
    assert sample.height == corpus_figures.SAMPLE_ROWS
    assert sample.columns[:2] == ["doc_id", "text"]
    rows = {r["doc_id"]: r for r in make_rows()}
    for row in sample.iter_rows(named=True):
        assert len(row["text"]) <= corpus_figures.TEXT_CHARS
        expected = rows.get(row["doc_id"], {}).get("sentiment__choice")
        assert row["sentiment__choice"] == expected


def test_a_corpus_read_as_the_job_reads_it(output: Path, tmp_path: Path) -> None:
    """Hive partitions and a prefix of names, as `input.path` takes them."""
    from evalpipe.report import corpus as corpus_figures
    from evalpipe.report.output import open_corpus

    for day, ids in (("dt=2026-11-22", range(5, 30)), ("dt=2026-11-23", range(30, 50))):
        (tmp_path / "days" / day).mkdir(parents=True)
        table = pa.table({"doc_id": list(ids), "text": ["t"] * len(ids)})
        pq.write_table(table, tmp_path / "days" / day / "part-0.parquet")
    out = report_output(output)
    for corpus in (tmp_path / "days", tmp_path / "days" / "dt=2026-11-23" / "part-"):
        cover = corpus_figures.coverage(out, open_corpus(corpus, out)).row(0, named=True)
        assert cover["corpus rows"] == (45 if corpus.name == "days" else 20)


def test_older_output_without_lineage_layout_or_runs(tmp_path: Path) -> None:
    out = tmp_path / "old"
    old_rows = [{k: v for k, v in r.items() if k in {n for n, _ in META} | {"doc_id"}
                 or "__" in k} for r in make_rows()]  # fmt: skip
    summary = {"rows_answered": ROWS - 4, "rate_limited_429": 0, "wall_seconds": 3.0}
    manifest = {"fingerprint": "x", "summary": summary}
    write_output(out, old_rows, lineage=False, layout_metadata=False, manifest=manifest)
    (out / "_journal.bin").write_bytes(b"rows of a killed run")
    opened = report_output(out)
    assert [(q.key, q.kind, q.probs) for q in opened.questions] == [
        (k, kind, tuple(p)) for k, kind, p in LAYOUT
    ]
    assert opened.missing_lineage == ("_run_id", "_scored_at", "_state_hash", "_cached", "_reused")
    html = write_report(out).read_text(encoding="utf-8")
    assert "no _scored_at column" in html and "no _reused or _cached column" in html
    assert "keeps only the last run" in html and "found by their column names" in html
    assert "_journal.bin exists: a run is going on" in html
    names = chart_names(html)
    assert "throughput" not in names and "sentiment-options" in names
    assert names[-2:] == ["run-rows", "run-time"]  # the summary has no achieved_rpm


def test_255_options_are_drawn_as_the_top_20_and_other(tmp_path: Path) -> None:
    options = [f"o{i:03d}" for i in range(255)]
    layout = [["topic", "choice", options]]
    rows = []
    for i in range(300):
        chosen = options[min(i % 40, i % 7 * 30)]
        probs = {f"topic__p__{o}": (0.5 if o == chosen else 0.5 / 254) for o in options}
        rows.append({"doc_id": i, "topic__choice": chosen, "topic__confidence": 0.5, **probs,
                     "_input_tokens": 10, "_model": "m"})  # fmt: skip
    write_output(tmp_path / "out", rows, layout, lineage=False, part_rows=100)
    out = report_output(tmp_path / "out")
    figures = questions.question_figures(out, out.questions[0])
    assert figures.options.height == 255 and figures.options["rows"].sum() == 300
    shown = questions.top_options(figures.options)
    assert shown.height == questions.TOP_OPTIONS + 1
    assert shown["option"][-1] == f"other ({255 - questions.TOP_OPTIONS} options)"
    assert shown["rows"].sum() == 300 and shown["share"].sum() == pytest.approx(1.0)
    drawn = figures.distributions["option"].unique(maintain_order=True).to_list()
    assert len(drawn) == questions.TOP_DISTRIBUTIONS + 1 and drawn[-1] == "other 247 together"
    html = write_report(tmp_path / "out").read_text(encoding="utf-8")
    assert "255 options: the 20 chosen most are drawn" in html
    assert html.count("<tr><td>o") == 255  # the table lists every option


# --------------------------------------------------------------------------- bad input


def _bad(args: list[str]) -> str:
    result = CliRunner().invoke(main, ["report", *args])
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("InputError: "), result.stderr
    return lines[0]


def test_unusable_outputs_are_one_line_errors_and_nothing_is_written(tmp_path: Path) -> None:
    assert "does not exist" in _bad([str(tmp_path / "missing")])
    (tmp_path / "file").write_text("x")
    assert "is not a directory" in _bad([str(tmp_path / "file")])
    (tmp_path / "empty").mkdir()
    assert "not an evalpipe output" in _bad([str(tmp_path / "empty")])
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    pq.write_table(pa.table({"a": [1]}), foreign / f"part-00000-{uuid.uuid4().hex}.parquet")
    assert "has no column '_model'" in _bad([str(foreign)])
    broken = tmp_path / "broken"
    write_output(broken, make_rows())
    next(broken.glob("part-*")).write_bytes(b"not parquet")
    assert "cannot be read" in _bad([str(broken)])
    started = tmp_path / "started"
    write_output(started, [], manifest=make_manifest())
    for part in started.glob("part-*"):
        part.unlink()
    assert "no committed rows yet" in _bad([str(started)])
    bad_manifest = tmp_path / "bad-manifest"
    write_output(bad_manifest, make_rows())
    (bad_manifest / "_manifest.json").write_text("{not json")
    assert "_manifest.json' cannot be read" in _bad([str(bad_manifest)])
    for path in (foreign, broken, started, bad_manifest, tmp_path / "empty"):
        assert not (path / "_report.html").exists()


def test_unusable_corpus_or_target_is_refused_before_writing(output: Path, tmp_path: Path) -> None:
    no_id = tmp_path / "no-id.parquet"
    pq.write_table(pa.table({"id": [1]}), no_id)
    assert "has no column 'doc_id'" in _bad([str(output), "--input", str(no_id)])
    other_type = tmp_path / "string-ids.parquet"
    pq.write_table(pa.table({"doc_id": ["1"]}), other_type)
    message = _bad([str(output), "--input", str(other_type)])
    assert "id column 'doc_id' is String, the output's is Int64" in message
    assert "does not exist" in _bad([str(output), "--input", str(tmp_path / "nope.parquet")])
    (tmp_path / "text.parquet").write_text("not parquet")
    assert "cannot be read" in _bad([str(output), "--input", str(tmp_path / "text.parquet")])
    assert "does not exist" in _bad([str(output), "--html", str(tmp_path / "no" / "r.html")])
    assert not (output / "_report.html").exists()


def test_command_writes_where_asked_and_prints_the_path(output: Path, tmp_path: Path) -> None:
    target = tmp_path / "page.html"
    result = CliRunner().invoke(main, ["report", str(output), "--html", str(target)])
    assert result.exit_code == 0, result.output
    assert result.stdout.strip() == str(target)
    assert target.read_text(encoding="utf-8").startswith("<!DOCTYPE html>")
    assert target.stat().st_mode & 0o777 != 0o600  # readable like any file the user writes


def test_nothing_answered_and_a_long_run_history(tmp_path: Path) -> None:
    rows = [{"doc_id": i, "_error_type": "network", "_error": "connection refused",
             "_input_tokens": 0, "_run_id": None} for i in range(30)]  # fmt: skip
    runs = [{"run_id": f"night-{n:03d}", "summary": {"rows_answered": 0}} for n in range(100)]
    write_output(tmp_path / "out", rows, manifest={"runs": runs})
    html = write_report(tmp_path / "out").read_text(encoding="utf-8")
    assert html.count("No answered rows: nothing to draw.") == len(LAYOUT)
    assert "No row was answered by a model." in html
    assert "100 runs: the last 30 are shown." in html
    assert "night-069" not in html and "night-070" in html
    assert "No row has a _scored_at time" in html
    assert chart_names(html) == ["outcomes", "run-rows"]


def test_a_sampled_output_shows_its_estimates_per_stratum(output: Path) -> None:
    """An output `evalpipe estimate` sampled (its `_sample.json`): an Estimates section with
    the corpus-wide and per-stratum figures, and a chart of each question's strata."""
    import polars as pl

    from evalpipe.analysis import STRATUM, estimate_sample
    from evalpipe.reading import open_output as open_table

    table = open_table(str(output))
    rows = table.rows.filter(pl.col("_error_type").is_null())
    rows = rows.with_columns(pl.format("s{}", pl.col("doc_id") % 2).alias(STRATUM))
    found = estimate_sample(rows, {"s0": 40, "s1": 60}, table.questions)
    sample = {
        "confidence": 0.95, "sample_rows": rows.height, "corpus_rows": 100, "seed": 0,
        "sample_share": rows.height / 100, "by": ["parity"], "margin": 0.2,
        "precision": found.precision(), "reached": False, "estimates": found.rows,
    }  # fmt: skip
    (output / "_sample.json").write_text(json.dumps(sample), encoding="utf-8")
    html = write_report(output).read_text(encoding="utf-8")
    section = html[html.index('id="estimates"') : html.index('id="questions"')]
    assert "of the corpus&#39;s 100 rows" in section and "(not reached)" in section
    assert re.findall(r'data-chart="(estimates-[^"]+)"', section) == [
        "estimates-helpful", "estimates-sentiment", "estimates-quality"
    ]  # fmt: skip
    share = next(r for r in found.rows if r["what"] == "share yes" and r["stratum"] is None)
    assert f"[{share['low']:.3f}, {share['high']:.3f}]" in section
