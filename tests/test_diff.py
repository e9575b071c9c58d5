"""`evalpipe diff`: two runs of one corpus, the newer model revising a known share of states."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from conftest import QUESTIONS, job_config, run_config
from evalpipe.cli import main
from evalpipe.output import Sink, output_schema
from evalpipe.output.table import RowResult
from evalpipe.service.evaluator import revised
from evalpipe.service.models import NEXT_VERSION

pytestmark = pytest.mark.patient  # `make test` runs it beside the rest (the Makefile)

WORDS = ["lamp", "kettle", "tent", "broke", "works", "great", "awful", "cheap", "sturdy", "late"]


def text(i: int) -> str:
    picked = [WORDS[(i * k + k) % len(WORDS)] for k in range(1, 6)]
    return f"Review {i}: the {' '.join(picked)} product, day {i % 17}."


@pytest.fixture(scope="module")
def runs(ray_runtime: None, service: Any, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Run A: ids 0..239 on model-1.13.0; run B: ids 2..241 on model-1.14.0."""
    tmp = tmp_path_factory.mktemp("diff")
    for name, ids, model in (("a", range(240), "model-1.13.0"), ("b", range(2, 242), NEXT_VERSION)):
        rows = [{"id": i, "text": text(i)} for i in ids]
        pq.write_table(pa.Table.from_pylist(rows), tmp / f"in_{name}.parquet")
        config = job_config(
            tmp, service.base_url, model=model,
            input={"path": str(tmp / f"in_{name}.parquet")}, output={"path": str(tmp / name)},
        )  # fmt: skip
        run_config(config)
    return tmp


def diff_json(*args: str) -> dict[str, Any]:
    result = CliRunner().invoke(main, ["diff", *args, "--json"])
    assert result.exit_code == 0, result.output
    document: dict[str, Any] = json.loads(result.output)
    return document


@pytest.mark.ray
def test_diff_reports_exactly_the_revised_states_as_flips(runs: Path) -> None:
    doc = diff_json(str(runs / "a"), str(runs / "b"))
    shared = list(range(2, 240))
    expected = sorted(i for i in shared if revised(text(i), NEXT_VERSION))
    assert 0.15 < len(expected) / len(shared) < 0.35  # the version's share, 25%
    assert doc["shared_ids"] == len(shared)
    assert doc["only_in_a"] == {"count": 2, "ids": [0, 1]}
    assert doc["only_in_b"] == {"count": 2, "ids": [240, 241]}
    assert doc["models_differ"] is True
    assert set(doc["a"]["models"]) == {"model-1.13.0"} and set(doc["b"]["models"]) == {NEXT_VERSION}
    by_key = {q["key"]: q for q in doc["questions"]}
    assert set(by_key) == set(QUESTIONS)
    for q in doc["questions"]:
        flipped = sorted(r["id"] for r in q["flips"]["rows"])
        assert flipped == expected, q["key"]
        assert q["flips"]["count"] == len(expected) and q["n"] == len(shared)


@pytest.mark.ray
def test_diff_intervals_cover_the_change_computed_independently(runs: Path) -> None:
    doc = diff_json(str(runs / "a"), str(runs / "b"))
    a = pl.read_parquet(runs / "a" / "part-*.parquet").filter(pl.col("id") >= 2).sort("id")
    b = pl.read_parquet(runs / "b" / "part-*.parquet").filter(pl.col("id") < 240).sort("id")
    true = float(np.mean(b["helpful__p_true"].to_numpy() - a["helpful__p_true"].to_numpy()))
    noul = next(q for q in doc["questions"] if q["key"] == "helpful")["changes"][0]
    assert noul["change"] == pytest.approx(true)
    assert noul["low"] < true < noul["high"]
    shares = next(q for q in doc["questions"] if q["key"] == "sentiment")["changes"]
    for change in shares:
        option = change["what"].split("'")[1]
        share = float((b["sentiment__choice"] == option).mean()) - float(
            (a["sentiment__choice"] == option).mean()
        )
        assert change["change"] == pytest.approx(share)
        assert change["low"] <= share <= change["high"]


@pytest.mark.ray
def test_diff_text_and_out(runs: Path, tmp_path: Path) -> None:
    out = tmp_path / "diff.parquet"
    result = CliRunner().invoke(main, ["diff", str(runs / "a"), str(runs / "b"), "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert "MODELS DIFFER" in result.output and "flips:" in result.output
    assert "only in A: 2 ids: 0, 1" in result.output
    rows = pl.read_parquet(out)
    assert rows.filter(pl.col("_only_in").is_null()).height == 238
    assert sorted(rows.filter(pl.col("_only_in") == "b")["id"].to_list()) == [240, 241]
    flips = rows.filter(pl.col("helpful__flip"))["id"].to_list()
    assert sorted(flips) == sorted(i for i in range(2, 240) if revised(text(i), NEXT_VERSION))


# --------------------------------------------------------------------------- without a service


def write(path: Path, questions: dict[str, Any], answers: list[dict[str, Any]]) -> Path:
    schema = output_schema("id", pa.int64(), questions)
    sink = Sink.open(path, schema, "fp", run_id="r", write_seconds=0)
    sink.resume(None)
    sink.append([RowResult(i, a, "m-1", 1, position=i) for i, a in enumerate(answers)])
    sink.close()
    sink.finish({}, "finished")
    return path


ONE = {"q": {"type": "choice", "instructions": "x", "criteria": {"yes": None, "no": None}}}


def choice(option: str) -> dict[str, Any]:
    p = {"yes": 1.0, "no": 0.0} if option == "yes" else {"yes": 0.0, "no": 1.0}
    return {"q": {"choice": option, "confidence": 1.0, "probabilities": p}}


def test_one_category_only_gives_a_zero_change_and_no_flip(tmp_path: Path) -> None:
    a = write(tmp_path / "a", ONE, [choice("yes")] * 5)
    b = write(tmp_path / "b", ONE, [choice("yes")] * 5)
    doc = diff_json(str(a), str(b))
    (q,) = doc["questions"]
    assert q["flips"]["count"] == 0
    assert [(c["what"], c["change"], c["low"], c["high"]) for c in q["changes"]] == [
        ("share 'yes'", 0.0, 0.0, 0.0),
        ("share 'no'", 0.0, 0.0, 0.0),
    ]
    assert doc["models_differ"] is False


def test_mismatched_questions_are_left_out_or_refused(tmp_path: Path) -> None:
    other = {"r": {"type": "noul", "instructions": "x"}, **ONE}
    a = write(tmp_path / "a", ONE, [choice("yes")] * 3)
    b = write(tmp_path / "b", other, [{**choice("no"), "r": {"noul": 0.2}}] * 3)
    doc = diff_json(str(a), str(b))
    assert [q["key"] for q in doc["questions"]] == ["q"]
    assert doc["notes"] == ["question 'r' is only in B: left out"]
    assert doc["questions"][0]["flips"]["count"] == 3
    c = write(tmp_path / "c", {"r": {"type": "noul", "instructions": "x"}}, [{"r": {"noul": 0.1}}])
    refused = CliRunner().invoke(main, ["diff", str(a), str(c)])
    assert refused.exit_code == 2
    assert refused.output.startswith("InputError:") and "share no question" in refused.output


def test_a_version_1_output_compares_with_a_version_2_one(tmp_path: Path) -> None:
    """Yesterday's table written before schema version 2 (`q__noul`, `s__p__0`): diff reads it."""
    questions = {
        "q": {"type": "noul", "instructions": "x"},
        "s": {"type": "score", "instructions": "x", "criteria": ["low", "high"]},
    }
    answers = [{"q": {"noul": p}, "s": {"score": 1 - p, "confidence": 0.1,
                "probabilities": {"0": p, "1": 1 - p}}} for p in (0.2, 0.7, 0.9)]  # fmt: skip
    new = write(tmp_path / "new", questions, answers)
    old = tmp_path / "old"
    old.mkdir()
    pl.DataFrame(
        {"id": [0, 1, 2], "q__noul": [0.2, 0.3, 0.9], "s__score": [0.8, 0.7, 0.1],
         "s__confidence": [0.1] * 3, "s__p__0": [0.2, 0.3, 0.9], "s__p__1": [0.8, 0.7, 0.1],
         "_model": ["m-0"] * 3, "_error_type": pl.Series([None] * 3, dtype=pl.String)}
    ).write_parquet(old / "part-00000-0123456789abcdef0123456789abcdef.parquet")  # fmt: skip
    doc = diff_json(str(old), str(new))
    assert doc["a"]["schema_version"] == 1 and doc["b"]["schema_version"] == 2
    by_key = {q["key"]: q for q in doc["questions"]}
    assert [r["id"] for r in by_key["q"]["flips"]["rows"]] == [1]
    assert by_key["s"]["flips"]["rows"] == [{"id": 1, "a": "high", "b": "low"}]
