"""The service counts the tokens: a refusal for length is not the end of a row.

The embedded service is told to count three times what the job counts (`token_factor=3`), as
a real service's subword tokenizer does for long words. Rows that fit one question at a time
(by the service's count) end answered, with the service's own answers; rows whose state plus a
single question is over the 32k limit by its count end `context_limit`, never `rejected`.
"""

from __future__ import annotations

import json
from pathlib import Path

import orjson
import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml
from click.testing import CliRunner

from conftest import API_KEY, CLIENT, auth, embedded, job_config, run_config
from evalpipe.cli.main import main
from evalpipe.send.failures import length_refusal
from evalpipe.service.counting import ServiceCounter, count_subwords

WORDS = ["incomprehensibilities", "counterrevolutionary", "internationalization"]


def text(words: int, seed: int) -> str:
    return " ".join(f"{WORDS[(i + seed) % 3]}{(i * seed) % 7}" for i in range(words))


QUESTIONS = {
    f"q{i}": {"type": "noul", "instructions": f"Question {i}: " + text(4_000, i)} for i in range(5)
}


def test_refusals_for_length_are_recognised_in_the_shapes_services_use() -> None:
    fastapi = {"detail": [{"loc": ["body", "state"], "msg": "too long", "type": "context_limit"}]}
    assert length_refusal(orjson.dumps(fastapi))
    assert length_refusal(b"context too long: 100000 tokens")
    assert length_refusal(b'{"error": {"message": "maximum context length is 64000 tokens"}}')
    assert length_refusal(b'{"detail": "Input exceeds the token limit"}')
    missing = {"detail": [{"loc": ["body", "model"], "msg": "Field required", "type": "missing"}]}
    assert not length_refusal(orjson.dumps(missing))
    assert not length_refusal(b'{"detail": [{"msg": "at most 255 options (got 300)"}]}')


def test_the_service_can_count_otherwise() -> None:
    assert count_subwords("internationalization") == 5  # 20 letters
    assert count_subwords("a cat, sat.") == 5  # short words and punctuation: one each
    state = "internationalization here"
    assert ServiceCounter("subword").state(state) == 6
    assert ServiceCounter("words", factor=3).state(state) == 6
    assert ServiceCounter("subword", factor=1.5).state(state) == 9


def ask_one(base_url: str, state: str, key: str) -> float:
    body = {"state": state, "model": "model-1.13.0", "questions": {key: QUESTIONS[key]}}
    reply = CLIENT.post(f"{base_url}/v1/evaluate", json=body, headers=auth(), timeout=60)
    reply.raise_for_status()
    return float(reply.json()["answers"][key]["noul"])


def test_rows_fit_question_by_question_or_end_context_limit(
    ray_runtime: None, tmp_path: Path
) -> None:
    # By the job's count every row fits one request (under 32k with any question, 64k in all).
    # By the service's (x3): a 4,000-word state with all five questions is 72k, refused; in
    # groups of three and two it fits. A 9,000-word state is 27k: with any question over 32k.
    fits = [text(4_000, 10 + i) for i in range(3)]
    over = [text(9_000, 20 + i) for i in range(2)]
    rows = [{"id": i, "text": t} for i, t in enumerate(fits + over)]
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "in.parquet")
    with embedded(token_factor=3.0) as service:
        config = job_config(
            tmp_path, service.base_url, concurrency={"actors": 1}, questions=QUESTIONS
        )
        summary = run_config(config)
        df = pl.read_parquet(tmp_path / "out" / "part-*.parquet").sort("id")
        for row in df.head(len(fits)).to_dicts():
            assert row["_error_type"] is None, row["_error"]
            for key in QUESTIONS:  # the service's own answer, asked one question at a time
                assert row[f"{key}__p_true"] == ask_one(service.base_url, fits[row["id"]], key)
    refused = df.tail(len(over))
    assert set(refused["_error_type"]) == {"context_limit"}
    assert all("refused for length (422)" in e and "32000" in e for e in refused["_error"])
    assert summary["rows_in_error"] == {"context_limit": len(over)}
    # Each fitting row: its 5-question request refused, then 3 + 2 questions answered. Each
    # over-long row: refused at 5, 3, 2 and 2 questions, then every lone question refused.
    # (All rows are planned before the first answer, so no calibration changes the plan.)
    assert summary["requests_refused_for_length"] == len(fits) * 1 + len(over) * 4
    assert summary["requests"] == len(fits) * 3 + len(over) * 9
    assert summary["retries"] == 0  # refusals are not retries


def test_rows_sent_after_the_first_answers_are_planned_by_the_services_count(
    ray_runtime: None, tmp_path: Path
) -> None:
    """The ratio is measured from what the service billed for the requests it answered (a
    refused request's halves included), so the rows sent after the first answer are split
    before sending. One row per chunk and request in flight, three chunks outstanding: the
    first three rows go out as planned by our count and each pays one refusal, no other."""
    rows = [{"id": i, "text": text(4_000, 30 + i)} for i in range(10)]
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "in.parquet")
    with embedded(token_factor=3.0) as service:
        config = job_config(
            tmp_path, service.base_url, limits={"requests_per_minute": 450},  # chunks of 1
            concurrency={"actors": 1, "max_in_flight": 1}, questions=QUESTIONS,
        )  # fmt: skip
        summary = run_config(config)
    assert summary["rows_answered"] == len(rows)
    assert summary["requests_refused_for_length"] == 3
    assert summary["requests"] == 3 * 3 + (len(rows) - 3) * 2


def test_plan_calibrate_measures_the_services_count_and_plans_with_it(tmp_path: Path) -> None:
    rows = [{"id": i, "text": t} for i, t in enumerate([text(4_000, 30), text(9_000, 31)])]
    rows += [{"id": 10 + i, "text": f"short review number {i}"} for i in range(6)]
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "in.parquet")
    with embedded(token_factor=3.0) as service:
        config = {
            "input": {"path": str(tmp_path / "in.parquet"), "id_column": "id", "state": "text"},
            "output": {"path": str(tmp_path / "out")},
            "service": {"base_url": service.base_url, "api_key_env": "EVAL_API_KEY"},
            "model": "model-1.13.0",
            "questions": QUESTIONS,
        }
        path = tmp_path / "job.yaml"
        path.write_text(yaml.safe_dump(config))
        runner = CliRunner(env={"EVAL_API_KEY": API_KEY})
        plain = runner.invoke(main, ["plan", str(path), "--json"])
        assert service.stats()["requests_accepted"] == 0
        measured = runner.invoke(main, ["plan", str(path), "--json", "--calibrate", "5"])
        accepted = service.stats()["requests_accepted"]
        text_form = runner.invoke(main, ["plan", str(path), "--calibrate", "2"])
    assert plain.exit_code == 0 and measured.exit_code == 0, measured.output
    before, after = json.loads(plain.output), json.loads(measured.output)
    assert "tokenizer" in before and before["service_token_ratio"] is None
    assert before["context_limit_rows"] == 0 and before["rows_split_into_several_requests"] == 0
    # Five states sampled: four billed (the 4,000-word one with its smallest question alone,
    # after its whole request was refused), the 9,000-word one refused for length twice.
    assert after["calibration_requests"] == accepted == 4  # each one billed and said
    assert after["calibration_refused_for_length"] == 1
    assert after["service_token_ratio"] == pytest.approx(3.0, rel=0.01)
    assert after["context_limit_rows"] == 1  # the 9,000-word state, by the service's count
    assert after["rows_split_into_several_requests"] == 1  # the 4,000-word one, in two
    assert after["estimated_input_tokens"] == pytest.approx(
        3 * after["evalpipe_count_tokens"], rel=0.01
    )
    assert text_form.exit_code == 0, text_form.output
    assert "calibration requests were sent" in text_form.output
    assert "the service counts 3.00 tokens per token of evalpipe's" in text_form.output
