"""`evalpipe report` on the output of a real job: `evalpipe run` (real Ray actors, real HTTP to
the embedded service, real Parquet) on a tiny corpus, then the report of what it wrote.

The other report tests write outputs by hand in the documented format; this one proves the
report reads what the job really writes (its layout metadata, its manifest, its lineage).
"""

from __future__ import annotations

import importlib.metadata
import json
import re
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml
from click.testing import CliRunner

from conftest import QUESTIONS
from evalpipe.cli.main import main
from evalpipe.config import load_config
from test_report import chart_names

pytestmark = pytest.mark.patient  # `make test` runs it beside the rest (the Makefile)

TEXTS = [
    "Great kettle, boils fast and the lid seals well.",
    "Terrible support: the charger died after a week.",
    "Great kettle, boils fast and the lid seals well.",  # a repeated state: sent once
    "   ",  # invalid_state
    " ".join(["overlong"] * 70_000),  # context_limit
] + [
    f"Review {i}: the {['lamp', 'tent', 'jacket'][i % 3]} works after {i} days." for i in range(25)
]


@pytest.fixture(scope="module")
def job(ray_runtime: None, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    tmp = tmp_path_factory.mktemp("report-job")
    corpus = tmp / "corpus.parquet"
    pq.write_table(pa.table({"id": list(range(len(TEXTS))), "text": TEXTS}), corpus)
    config = {
        "input": {"path": str(corpus), "id_column": "id", "state": "text"},
        "output": {"path": str(tmp / "out")},
        "service": {"base_url": "embedded", "api_key_env": "EVAL_API_KEY"},
        "model": "model-1.13.0",
        "limits": {"requests_per_minute": 60_000, "tokens_per_second": 10_000_000},
        "questions": QUESTIONS,
    }
    path = tmp / "job.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False), encoding="utf-8")
    result = CliRunner().invoke(main, ["run", str(path), "--progress-interval", "3600"])
    assert result.exit_code == 0, result.output
    return {"input": corpus, "output": tmp / "out", "config": path}


def test_report_of_a_real_job(job: dict[str, Path]) -> None:
    result = CliRunner().invoke(main, ["report", str(job["output"]), "--input", str(job["input"])])
    assert result.exit_code == 0, result.output
    page = job["output"] / "_report.html"
    assert result.stdout.strip() == str(page)
    html = page.read_text(encoding="utf-8")
    assert chart_names(html)[:9] == [
        "outcomes",
        "helpful-noul",
        "sentiment-options", "sentiment-distributions", "sentiment-confidence",
        "quality-score", "quality-levels", "quality-confidence",
        "how-answered",
    ]  # fmt: skip
    assert {"models", "run-rows", "coverage"} <= set(chart_names(html))
    rows = pq.read_table(job["output"]).to_pylist()  # pyarrow skips _report.html and _manifest
    outcomes = Counter(r["_error_type"] or "answered" for r in rows)
    assert outcomes == {"answered": len(TEXTS) - 2, "invalid_state": 1, "context_limit": 1}
    for outcome, count in outcomes.items():
        assert re.search(rf"<td>{outcome}</td>\s*<td class=\"num\">{count}</td>", html), outcome
    tokens = sum(r["_input_tokens"] for r in rows)
    assert f'<div class="value">{tokens:,}</div>' in html
    # Every row and the page say who answered: the embedded service, made-up numbers.
    assert {r["_service"] for r in rows} == {"embedded"}
    assert re.search(r"<td>embedded</td>\s*<td>model-1.13.0</td>", html)
    assert "made-up numbers" in html
    manifest = json.loads((job["output"] / "_manifest.json").read_text())
    assert manifest["evalpipe_version"] == importlib.metadata.version("evalpipe")
    assert manifest["config_hash"] == load_config(job["config"]).config_hash()
    assert manifest["runs"][-1]["config_hash"] == manifest["config_hash"]
    chosen = Counter(r["sentiment__choice"] for r in rows if r["sentiment__choice"])
    top, count = chosen.most_common(1)[0]
    assert re.search(rf"<td>{top}</td>\s*<td class=\"num\">{count}</td>", html)
