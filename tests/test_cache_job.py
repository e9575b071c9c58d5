"""The answer cache in real jobs: real Ray actors, real HTTP to the embedded service, real
Parquet, a real SQLite cache under tmp_path. What the service was sent is its own count.

One Ray runtime for the module (num_cpus=2), and the session's service, whose counters each
test reads from where it began. Each test has its own cache (`cache.path`).
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import httpx
import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml
from click.testing import CliRunner, Result

from conftest import (
    API_KEY,
    QUESTIONS,
    Since,
    auth,
    billed_tokens,
    run_config,
)
from evalpipe.cache.store import FILE_NAME, FORMAT
from evalpipe.cli.main import main
from evalpipe.contract.tokens import count_question, count_value
from evalpipe.planning import state_key
from evalpipe.service import EmbeddedService

pytestmark = pytest.mark.patient  # `make test` runs it beside the rest (the Makefile)

MODEL = "model-1.13.0"
THINGS = ["lamp", "kettle", "tent", "jacket", "chair", "phone", "bike", "drill"]


def text(i: int, day: str = "") -> str:
    return f"Review {i}{day}: the {THINGS[i % len(THINGS)]} {'broke' if i % 3 else 'works'} fine."


def write_corpus(path: Path, rows: dict[int, str | None]) -> None:
    schema = pa.schema([("id", pa.int64()), ("text", pa.string())])
    pq.write_table(pa.table({"id": list(rows), "text": list(rows.values())}, schema), path)


def config(tmp: Path, base_url: str, out: str = "out", **changes: Any) -> dict[str, Any]:
    settings: dict[str, Any] = {
        "input": {"path": str(tmp / "in.parquet"), "id_column": "id", "state": "text"},
        "output": {"path": str(tmp / out)},
        "service": {"base_url": base_url, "api_key_env": "EVAL_API_KEY"},
        "model": MODEL,
        "pricing": {"default": 0.042},
        "limits": {"requests_per_minute": 60_000, "tokens_per_second": 10_000_000},
        "retries": {"base_delay": 0.01, "max_delay": 0.1},
        "cache": {"path": str(tmp / "cache")},
        "questions": QUESTIONS,
    }
    settings.update(changes)
    return settings


def output(tmp: Path, out: str = "out") -> pl.DataFrame:
    return pl.read_parquet(tmp / out / "part-*.parquet").sort("id")


def answers(frame: pl.DataFrame) -> pl.DataFrame:
    """The id and the answer columns (what must equal between runs)."""
    return frame.select([c for c in frame.columns if not c.startswith("_")])


def ask(base_url: str, state: Any, questions: dict[str, Any]) -> dict[str, Any]:
    body = {"state": state, "model": MODEL, "questions": questions}
    reply = httpx.post(f"{base_url}/v1/evaluate", json=body, headers=auth(), timeout=30)
    reply.raise_for_status()
    return dict(reply.json()["answers"])


def sent(service: Any) -> tuple[int, int]:
    stats = service.stats()
    return int(stats["requests_accepted"]), int(stats["tokens_accepted"])


def cache_rows(tmp: Path) -> int:
    with sqlite3.connect(tmp / "cache" / FILE_NAME) as conn:
        return int(conn.execute("SELECT count(*) FROM answers").fetchone()[0])


def cli(tmp: Path, command: str, settings: dict[str, Any], *args: str) -> Result:
    path = tmp / "job.yaml"
    path.write_text(yaml.safe_dump(settings, sort_keys=False))  # options in their order
    return CliRunner().invoke(main, [command, str(path), *args])


def events(result: Result, kind: str) -> list[dict[str, Any]]:
    lines = [json.loads(line) for line in result.stderr.splitlines() if line.strip()]
    return [e for e in lines if e["event"] == kind]


@pytest.fixture
def svc(service: EmbeddedService) -> Since:
    """The session's service, counting what this test sends."""
    return Since(service)


# --------------------------------------------------------------------------- tests


def test_a_second_run_into_a_new_output_pays_nothing_as_the_plan_says(
    ray_runtime: None, svc: Since, tmp_path: Path
) -> None:
    rows = {i: text(i % 24) for i in range(30)} | {90: None, 91: "  "}  # 6 repeats, 2 invalid
    write_corpus(tmp_path / "in.parquet", rows)
    first = run_config(config(tmp_path, svc.base_url, "out1"))
    before = sent(svc)
    planned = cli(tmp_path, "plan", config(tmp_path, svc.base_url, "out2"), "--json")
    assert planned.exit_code == 0, planned.output
    plan = json.loads(planned.stdout)
    second = run_config(config(tmp_path, svc.base_url, "out2"))
    assert sent(svc) == before  # nothing at all
    assert first["requests"] == 24 and first["rows_from_cache"] == 0 and first["cache"] == "on"
    assert second["requests"] == 0 and second["input_tokens"] == 0
    assert (first["workers"], second["workers"]) == (2, 0)  # nothing to send: no Ray worker
    assert plan["requests"] == 0 and plan["estimated_input_tokens"] == 0
    assert second["rows_from_cache"] == plan["rows_answered_from_cache"] == 24
    assert second["questions_from_cache"] == plan["questions_answered_from_cache"] == 24 * 3
    assert second["cache_saved_tokens"] == plan["cache_saved_tokens"] == first["input_tokens"]
    assert second["rows_reused_identical_state"] == plan["rows_answered_from_identical_state"] == 6
    one, two = output(tmp_path, "out1"), output(tmp_path, "out2")
    assert answers(two).equals(answers(one))
    valid = two.filter(pl.col("_error_type").is_null())
    assert valid.filter(~pl.col("_reused"))["_cached"].to_list() == [True] * 24
    assert valid.filter(pl.col("_reused"))["_cached"].to_list() == [False] * 6
    assert two["_input_tokens"].sum() == 0
    assert two["_state_hash"].to_list() == one["_state_hash"].to_list()
    # the key is in no file of the cache, nor in its names
    for path in (tmp_path / "cache").iterdir():
        assert API_KEY not in path.name and API_KEY.encode() not in path.read_bytes()


def test_renaming_a_question_costs_nothing_and_a_new_one_is_all_that_is_sent(
    ray_runtime: None, svc: Since, tmp_path: Path
) -> None:
    write_corpus(tmp_path / "in.parquet", {i: text(i) for i in range(12)})
    extra = {"type": "noul", "instructions": "Does the review name the product?"}
    renamed = {"quality": QUESTIONS["quality"], "useful": QUESTIONS["helpful"],
               "mood": QUESTIONS["sentiment"], "names_product": extra}  # fmt: skip
    run_config(config(tmp_path, svc.base_url, "out1"))
    before = sent(svc)
    result = run_config(config(tmp_path, svc.base_url, "out2", questions=renamed))
    requests, tokens = (a - b for a, b in zip(sent(svc), before, strict=True))
    expected = {i: ask(svc.base_url, text(i), {"names_product": extra}) for i in (0, 5)}
    assert requests == result["requests"] == 12  # one per state: only the new question
    assert (
        tokens
        == result["input_tokens"]
        == sum(count_value(text(i)) + count_question(extra) for i in range(12))
    )
    assert result["questions_from_cache"] == 36 and result["rows_from_cache"] == 0
    one, two = output(tmp_path, "out1"), output(tmp_path, "out2")
    assert two["useful__p_true"].to_list() == one["helpful__p_true"].to_list()
    assert two["mood__choice"].to_list() == one["sentiment__choice"].to_list()
    assert two["quality__p__good"].to_list() == one["quality__p__good"].to_list()
    assert two["_cached"].to_list() == [True] * 12
    for i, answer in expected.items():
        assert (
            two.filter(pl.col("id") == i)["names_product__p_true"][0]
            == answer["names_product"]["noul"]
        )


def test_an_edited_text_is_scored_again_on_resume_and_its_old_answer_is_gone(
    ray_runtime: None, svc: Since, tmp_path: Path
) -> None:
    day1 = {i: text(i) for i in range(20)}
    write_corpus(tmp_path / "in.parquet", day1)
    edited = {3: text(3, " (edited)"), 7: text(7, " (edited)"), 11: text(5)}  # 11: 5's text
    settings = config(tmp_path, svc.base_url)
    run_config(settings)
    run_id = output(tmp_path)["_run_id"][0]
    before = sent(svc)
    write_corpus(tmp_path / "in.parquet", day1 | edited)
    again = run_config(settings)
    requests, tokens = (a - b for a, b in zip(sent(svc), before, strict=True))
    expected = {i: ask(svc.base_url, t, QUESTIONS) for i, t in edited.items()}
    assert requests == 2 and tokens == sum(billed_tokens(edited[i], QUESTIONS) for i in (3, 7))
    assert again["rows_skipped_committed_earlier"] == 17 and again["rows_from_cache"] == 1
    df = output(tmp_path)
    assert df["id"].to_list() == list(range(20))  # every id exactly once: the old row is gone
    for i, answer in expected.items():
        row = df.filter(pl.col("id") == i).to_dicts()[0]
        assert row["_state_hash"] == state_key(edited[i]).hex()
        assert row["helpful__p_true"] == answer["helpful"]["noul"]
        assert row["sentiment__choice"] == answer["sentiment"]["choice"]
        assert row["quality__score"] == answer["quality"]["score"]
        assert row["_run_id"] != run_id
    kept = df.filter(~pl.col("id").is_in(list(edited)))
    assert kept["_run_id"].to_list() == [run_id] * 17


def test_an_alias_is_never_cached(ray_runtime: None, svc: Since, tmp_path: Path) -> None:
    write_corpus(tmp_path / "in.parquet", {i: text(i) for i in range(5)})
    results = [
        run_config(config(tmp_path, svc.base_url, out, model="model-latest"))
        for out in ("out1", "out2")
    ]
    assert sent(svc)[0] == 10
    assert results[1]["cache"] == "off: model-latest is an alias, whose answers move"
    assert results[1]["rows_from_cache"] == 0
    assert not (tmp_path / "cache").exists()


def test_rows_in_error_are_never_cached(ray_runtime: None, svc: Since, tmp_path: Path) -> None:
    write_corpus(tmp_path / "in.parquet", {i: text(i) for i in range(6)})
    svc.service.set_faults(fault_500=1.0)  # every request fails, until set back
    try:
        failed = run_config(config(tmp_path, svc.base_url, "out1", retries={"max_attempts": 1}))
    finally:
        svc.service.set_faults(fault_500=0.0)
    assert failed["rows_in_error"] == {"server_error": 6}
    assert cache_rows(tmp_path) == 0
    before = sent(svc)[0]
    fresh = run_config(config(tmp_path, svc.base_url, "out2"))
    assert sent(svc)[0] - before == 6
    assert fresh["rows_from_cache"] == 0 and fresh["rows_answered"] == 6


@pytest.mark.parametrize("damage", ["not a database", "newer format"])
def test_an_unusable_cache_is_one_warning_and_a_run_without_it(
    ray_runtime: None, svc: Since, tmp_path: Path, damage: str
) -> None:
    write_corpus(tmp_path / "in.parquet", {i: text(i) for i in range(8)})
    file = tmp_path / "cache" / FILE_NAME
    if damage == "newer format":
        run_config(config(tmp_path, svc.base_url, "out1"))
        with sqlite3.connect(file) as conn:
            conn.execute(f"UPDATE meta SET value = '{FORMAT + 1}' WHERE name = 'format'")
    else:
        file.parent.mkdir()
        file.write_bytes(b"garbage " * 1000)
    before, kept = sent(svc)[0], file.read_bytes()
    result = cli(tmp_path, "run", config(tmp_path, svc.base_url, "out2"),
                 "--log-format", "json")  # fmt: skip
    assert sent(svc)[0] - before == 8  # everything paid, nothing from the cache
    expected = ask(svc.base_url, text(4), QUESTIONS)
    assert result.exit_code == 0, result.output
    warnings = [e["message"] for e in events(result, "warning")]
    assert len(warnings) == 1 and "answer cache" in warnings[0] and str(file) in warnings[0]
    summary = events(result, "summary")[0]
    assert summary["cache"].startswith("off: ") and summary["rows_answered"] == 8
    assert file.read_bytes() == kept  # neither repaired nor overwritten: the user decides
    row = output(tmp_path, "out2").filter(pl.col("id") == 4).to_dicts()[0]
    assert row["sentiment__choice"] == expected["sentiment"]["choice"]


def test_day_one_then_day_two_bills_only_what_changed(
    ray_runtime: None, svc: Since, tmp_path: Path
) -> None:
    """The issue's scenario: day 2 moves rows to new ids, edits texts and adds rows; scored into
    a new output it bills the changed content only, answers day 2's texts, and a rerun into
    another new output bills nothing."""
    day1 = {i: text(i) for i in range(60)}
    moved = {1000 + i: day1.pop(i) for i in range(10)}  # same texts, new ids
    edited = {i: text(i, " (day 2)") for i in range(10, 18)}
    new = {2000 + i: text(100 + i) for i in range(7)}
    removed = range(18, 23)
    day2 = {i: t for i, t in day1.items() if i not in removed} | edited | moved | new
    day1 |= {i: text(i) for i in range(10)}
    changed = [*edited.values(), *new.values()]
    write_corpus(tmp_path / "in.parquet", day1)
    base = config(tmp_path, svc.base_url)

    def run(out: str, *extra: str) -> tuple[Result, int, int]:
        before = sent(svc)
        sets = ["--set", f"output.path={tmp_path / out}", "--log-format", "json"]
        result = cli(tmp_path, "run", base, *sets, *extra)
        assert result.exit_code == 0, result.output
        requests, tokens = (a - b for a, b in zip(sent(svc), before, strict=True))
        return result, requests, tokens

    run("day1")
    write_corpus(tmp_path / "in.parquet", day2)
    day2_run, requests, tokens = run("day2")
    rerun, again_requests, again_tokens = run("day2-again")
    run("reference", "--set", "cache.enabled=false")
    changed_tokens = sum(billed_tokens(t, QUESTIONS) for t in changed)
    assert requests == len(changed) and tokens <= 1.05 * changed_tokens
    assert (again_requests, again_tokens) == (0, 0)
    summary = events(day2_run, "summary")[0]
    assert summary["rows_from_cache"] == len(day2) - len(changed)
    assert summary["cache_saved_tokens"] > 0 and summary["cache_saved_usd"] > 0
    assert events(rerun, "summary")[0]["rows_from_cache"] == len(day2)
    reference = answers(output(tmp_path, "reference"))
    assert answers(output(tmp_path, "day2")).equals(reference)
    assert answers(output(tmp_path, "day2-again")).equals(reference)
    assert output(tmp_path, "day2")["id"].to_list() == sorted(day2)
