"""The batch job end to end: real Ray actors, real HTTP to the embedded service, real Parquet.

One Ray runtime for the module (num_cpus=2), and the session's service for the tests that need
no settings of their own, whose counters each test reads from where it began (their jobs share
its account's Budget). Each test writes its own corpus, runs the job through the same entry
points as the CLI, reads the output back and checks it against what the service answers when
asked directly.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml
from click.testing import CliRunner

from conftest import (
    API_KEY,
    CLIENT,
    QUESTIONS,
    Since,
    auth,
    embedded,
    job_config,
    run_config,
)
from evalpipe.cli.main import main
from evalpipe.engine import runner
from evalpipe.errors import ResumeConflict
from evalpipe.output.lock import LOCK_NAME
from evalpipe.send import connect
from evalpipe.service import EmbeddedService, ServiceSettings

pytestmark = pytest.mark.patient  # `make test` runs it beside the rest (the Makefile)

ROOT = Path(__file__).resolve().parents[1]
LONG = " ".join(["overlong"] * 70_000)  # far over the 32k context limit
TEXTS = [
    "Great product, works as described.",
    "Terrible support: the charger died after a week and nobody answered my emails.",
    "Great product, works as described.",  # a repeated state: sent once
    None,  # invalid_state
    "   ",  # invalid_state
    "",  # invalid_state
    "Très bon rapport qualité-prix, livraison rapide. 👍",
    "充電が速くてとても便利です。",
    LONG,  # context_limit
    "Great product, works as described.",
]


def corpus(path: Path, extra: int = 40) -> list[dict[str, Any]]:
    rows = [{"id": i, "text": t, "stars": i % 5 + 1} for i, t in enumerate(TEXTS)]
    rows += [
        {"id": 100 + i, "text": f"Review number {i}: the {['lamp', 'kettle', 'tent'][i % 3]} "
         f"{'broke' if i % 4 == 0 else 'works'} after {i} days.", "stars": i % 5 + 1}
        for i in range(extra)
    ]  # fmt: skip
    pq.write_table(pa.Table.from_pylist(rows), path)
    return rows


@pytest.fixture
def svc(service: EmbeddedService) -> Since:
    """The session's service, counting what this test sends."""
    return Since(service)


def run(config: dict[str, Any], **options: Any) -> dict[str, Any]:
    return run_config(config, **options)


def output(tmp: Path) -> pl.DataFrame:
    return pl.read_parquet(tmp / "out" / "part-*.parquet").sort("id")


def ask(base_url: str, state: Any) -> dict[str, Any]:
    body = {"state": state, "model": "model-1.13.0", "questions": QUESTIONS}
    reply = CLIENT.post(f"{base_url}/v1/evaluate", json=body, headers=auth(), timeout=30)
    reply.raise_for_status()
    return reply.json()


def answered(base_url: str, state: Any, row: dict[str, Any]) -> None:
    """The row holds exactly the service's answer for this state."""
    expected = ask(base_url, state)
    answers = expected["answers"]
    assert row["_model"] == expected["model"] == "model-1.13.0"
    assert row["helpful__p_true"] == answers["helpful"]["noul"]
    assert row["sentiment__choice"] == answers["sentiment"]["choice"]
    assert row["sentiment__confidence"] == answers["sentiment"]["confidence"]
    for option, p in answers["sentiment"]["probabilities"].items():
        assert row[f"sentiment__p__{option}"] == p
    assert row["quality__score"] == answers["quality"]["score"]
    levels = QUESTIONS["quality"]["criteria"]  # columns are named by the levels' labels
    for level, p in answers["quality"]["probabilities"].items():
        assert row[f"quality__p__{levels[int(level)]}"] == p
    assert row["_error_type"] is None


def test_text_state_job_answers_every_row_exactly_once(
    ray_runtime: None, svc: Since, tmp_path: Path
) -> None:
    rows = corpus(tmp_path / "in.parquet")
    result = run(job_config(tmp_path, svc.base_url))
    sent = svc.stats()["requests_accepted"]
    df = output(tmp_path)
    assert df["id"].to_list() == sorted(r["id"] for r in rows)
    in_order = df.sort("_row")  # `_row`: each row's position in the input
    assert in_order["_row"].to_list() == list(range(len(rows)))
    assert in_order["id"].to_list() == [r["id"] for r in rows]
    by_id = {r["id"]: r for r in df.to_dicts()}
    for row in rows:
        out = by_id[row["id"]]
        text = row["text"]
        if text is None or not text.strip():
            assert out["_error_type"] == "invalid_state"
            assert out["helpful__p_true"] is None
        elif text is LONG:
            assert out["_error_type"] == "context_limit"
            assert "context limit" in out["_error"]
        else:
            answered(svc.base_url, text, out)
    distinct = {
        r["text"] for r in rows if r["text"] and r["text"].strip() and r["text"] is not LONG
    }
    assert sent == len(distinct)  # repeated states once, invalid and over-long never
    assert result["requests"] == len(distinct)
    assert result["rows_answered"] == len(rows) - 4
    assert result["rows_in_error"] == {"context_limit": 1, "invalid_state": 3}
    assert result["rows_reused_identical_state"] == 2
    assert result["rate_limited_429"] == 0
    assert result["models"] == {"model-1.13.0": len(rows) - 4}
    assert df.schema["helpful__p_true"] == pl.Float64 and df.schema["_input_tokens"] == pl.Int64


def test_object_state_keeps_json_types(ray_runtime: None, svc: Since, tmp_path: Path) -> None:
    rows = corpus(tmp_path / "in.parquet", extra=10)
    config = job_config(tmp_path, "", input={"state": ["stars", "text"]})
    config["service"]["base_url"] = svc.base_url
    run(config)
    df = output(tmp_path)
    by_id = {r["id"]: r for r in df.to_dicts()}
    for row in rows[:3] + rows[-3:]:
        # stars stays an integer: the service answers the same as for {"stars": 3, ...}
        answered(svc.base_url, {"stars": row["stars"], "text": row["text"]}, by_id[row["id"]])
    assert len(df) == len(rows)


def test_an_over_long_row_is_split_and_its_answers_merged(
    ray_runtime: None, svc: Since, tmp_path: Path
) -> None:
    pq.write_table(
        pa.Table.from_pylist([{"id": "a", "text": "short text"}]), tmp_path / "in.parquet"
    )
    big = " ".join(["criterion"] * 25_000)
    questions = {
        f"q{i}": {"type": "noul", "instructions": f"Question {i}?", "criteria": {"true": big}}
        for i in range(3)
    }
    result = run(job_config(tmp_path, svc.base_url, questions=questions))
    assert svc.stats()["requests_accepted"] == 2  # 3 x 25k > 64k; 2 x 25k fits
    df = output(tmp_path)
    assert result["requests"] == 2
    assert df["_error_type"].to_list() == [None]
    assert all(df[f"q{i}__p_true"][0] is not None for i in range(3))


def test_a_rerun_sends_nothing_and_a_changed_config_is_refused(
    ray_runtime: None, svc: Since, tmp_path: Path
) -> None:
    rows = corpus(tmp_path / "in.parquet", extra=5)
    config = job_config(tmp_path, svc.base_url)
    run(config)
    before = svc.stats()["requests_accepted"]
    again = run(config)
    assert svc.stats()["requests_accepted"] == before
    assert again["rows_skipped_committed_earlier"] == len(rows)  # final errors included
    changed = job_config(tmp_path, svc.base_url, model="model-latest")
    with pytest.raises(ResumeConflict):
        run(changed)
    fresh = run(changed, restart=True)
    assert len(output(tmp_path)) == len(rows)
    assert fresh["rows_skipped_committed_earlier"] == 0


def test_service_faults_end_in_answers_or_typed_errors(ray_runtime: None, tmp_path: Path) -> None:
    rows = corpus(tmp_path / "in.parquet", extra=60)
    faults = {"fault_529": 0.15, "fault_500": 0.1, "fault_drop": 0.05, "fault_truncate": 0.05}
    with embedded(**faults, fault_seed=3) as service:
        result = run(job_config(tmp_path, service.base_url, retries={"max_attempts": 8}))
        injected = service.stats()["faults_injected"]
    df = output(tmp_path)
    assert len(df) == len(rows) and df["id"].n_unique() == len(rows)
    assert injected > 0
    assert result["retries"] >= injected - 1
    assert set(df["_error_type"].drop_nulls()) <= {"invalid_state", "context_limit"}


def write_yaml(tmp: Path, config: dict[str, Any]) -> Path:
    path = tmp / "job.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def test_cli_run_and_plan(ray_runtime: None, svc: Since, tmp_path: Path) -> None:
    rows = corpus(tmp_path / "in.parquet", extra=5)
    path = write_yaml(tmp_path, job_config(tmp_path, svc.base_url))
    planned = CliRunner().invoke(main, ["plan", str(path)])
    assert planned.exit_code == 0, planned.output
    assert "nothing was sent" in planned.output
    assert svc.stats()["requests_accepted"] == 0
    done = CliRunner().invoke(main, ["run", str(path)])
    assert done.exit_code == 0, done.output
    assert "evalpipe summary" in done.output
    assert len(output(tmp_path)) == len(rows)


def test_a_wrong_key_exits_3_after_a_handful_of_requests(ray_runtime: None, tmp_path: Path) -> None:
    corpus(tmp_path / "in.parquet")
    settings = ServiceSettings(api_key="another-key", rpm=60_000, tps=10_000_000)
    with EmbeddedService(settings) as service:
        path = write_yaml(tmp_path, job_config(tmp_path, service.base_url))
        result = CliRunner().invoke(main, ["run", str(path)])
        refused = service.stats()["responses"].get("401", 0)
    assert result.exit_code == 3
    assert result.output.strip().splitlines()[-1].startswith("AuthError: ")
    assert API_KEY not in result.output
    assert 1 <= refused <= 5


@pytest.mark.subprocess
def test_a_wrong_key_stops_the_job_before_ray_starts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The probe runs while Ray would start; a refusal that comes back within the early window
    # (widened here so a slow machine cannot make it miss) ends the job with Ray never started.
    monkeypatch.setattr(connect, "EARLY_PROBE_SECONDS", 30.0)
    monkeypatch.setattr(runner, "ray_here", lambda address, warn: pytest.fail("Ray was started"))
    corpus(tmp_path / "in.parquet")
    with EmbeddedService(ServiceSettings(api_key="another-key")) as service:
        path = write_yaml(tmp_path, job_config(tmp_path, service.base_url))
        result = CliRunner().invoke(main, ["run", str(path)])
        assert service.stats()["responses"] == {"401": 1}
    assert result.exit_code == 3, result.output
    assert result.output.strip().splitlines()[-1].startswith("AuthError: ")
    # nothing written: at most the output's lock file, held while the run was on
    out = tmp_path / "out"
    assert not out.exists() or [p.name for p in out.iterdir()] == [LOCK_NAME]


@pytest.mark.parametrize(
    ("change", "fragment"),
    [
        ({"input": {"id_column": "nope"}}, "nope"),
        ({"input": {"state": "txt"}}, "text"),
        (
            {"questions": {"q": {"type": "choice", "instructions": "x", "criteria": {}}}},
            "questions.q.criteria",
        ),
        ({"limits": {"request_per_minute": 5}}, "requests_per_minute"),
        ({"service": {"api_key_env": "EVALPIPE_TEST_UNSET_KEY"}}, "EVALPIPE_TEST_UNSET_KEY"),
        ({"service": {"base_url": "http://127.0.0.1:9", "connect_wait": 0.5}}, "127.0.0.1:9"),
    ],
)
def test_bad_input_exits_2_before_any_request(
    tmp_path: Path, change: dict[str, Any], fragment: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("EVAL_API_KEY", API_KEY)  # whatever an earlier test left
    corpus(tmp_path / "in.parquet", extra=2)
    with embedded() as service:
        config = job_config(tmp_path, service.base_url)
        for key, value in change.items():
            config[key] = {**config[key], **value} if key != "questions" else value
        result = CliRunner().invoke(main, ["run", str(write_yaml(tmp_path, config))])
        assert service.stats()["requests_accepted"] == 0
    assert result.exit_code == 2, result.output
    line = result.output.strip().splitlines()[-1]
    assert fragment in line
    assert not (tmp_path / "out").exists() or not list((tmp_path / "out").glob("part-*"))


def _plan_figures(config: dict[str, Any], tmp: Path) -> dict[str, Any]:
    result = CliRunner().invoke(main, ["plan", str(write_yaml(tmp, config)), "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.output)


def _demo_config(tmp: Path, base_url: str) -> dict[str, Any]:
    config = yaml.safe_load((ROOT / "configs" / "demo.yaml").read_text(encoding="utf-8"))
    config["input"]["path"] = str(ROOT / config["input"]["path"])
    config["output"]["path"] = str(tmp / "out")
    config["service"] = {"base_url": base_url, "api_key_env": "EVAL_API_KEY"}
    config["limits"] = {"requests_per_minute": 600_000, "tokens_per_second": 100_000_000}
    return config


def _repeats_config(tmp: Path, base_url: str) -> dict[str, Any]:
    # Repeated invalid states and a repeated over-limit state: each occurrence is an error row,
    # never taken for a reused answer (plan and run once disagreed here).
    texts = [None, "  ", None, LONG, "fine text", LONG, "fine text", "", LONG, "other"]
    rows = [{"id": i, "text": t} for i, t in enumerate(texts)]
    pq.write_table(pa.Table.from_pylist(rows), tmp / "in.parquet")
    return job_config(tmp, base_url)


@pytest.mark.parametrize("make", [_demo_config, _repeats_config], ids=["demo", "repeats"])
def test_plan_figures_are_what_the_run_does(
    ray_runtime: None, svc: Since, tmp_path: Path, make: Callable[[Path, str], dict[str, Any]]
) -> None:
    config = make(tmp_path, svc.base_url)
    plan = _plan_figures(config, tmp_path)
    assert svc.stats()["requests_accepted"] == 0  # plan sends nothing
    done = run(config)
    errors = done["rows_in_error"]
    assert plan["rows"] == done["rows_total"]
    assert plan["invalid_state_rows"] == errors.get("invalid_state", 0) > 0
    assert plan["context_limit_rows"] == errors.get("context_limit", 0) > 0
    assert plan["rows_answered_from_identical_state"] == done["rows_reused_identical_state"] > 0
    assert plan["rows_answered_from_cache"] == done["rows_from_cache"]
    assert plan["questions_answered_from_cache"] == done["questions_from_cache"]
    assert plan["cache_saved_tokens"] == done["cache_saved_tokens"]
    sent = done["rows_answered"] - done["rows_reused_identical_state"] - done["rows_from_cache"]
    assert plan["distinct_states_to_send"] == sent
    assert plan["requests"] == done["requests"]
    # the embedded service counts with evalpipe's own tokenizer: the estimate is the bill
    assert plan["estimated_input_tokens"] == done["input_tokens"]
