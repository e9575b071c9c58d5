"""The first job, tried as a new user runs it: the service named or nothing runs, answers
reused only from the service that gave them, every row and the manifest saying where they came
from, the user's price, one-line errors at first contact, a few rows first, `evalpipe init`,
and plan and run agreeing on the service's token count.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml
from click.testing import CliRunner, Result

from conftest import API_KEY, QUESTIONS, embedded, job_config
from evalpipe.cache import Store, open_job_cache
from evalpipe.cli.main import main
from evalpipe.config import BASE_URL_PLACEHOLDER, load_config, origin, parse_config
from evalpipe.input import Selection, Source, SourceSpec
from evalpipe.output.lock import LOCK_NAME
from evalpipe.planning import Learned, Planner, Request
from test_context import text

pytestmark = pytest.mark.patient  # `make test` runs it beside the rest (the Makefile)

ROWS = 60


def corpus(path: Path, n: int = ROWS) -> list[dict[str, Any]]:
    rows = [{"id": i, "text": f"Review {i}: the kettle {'boils' if i % 2 else 'leaks'}."}
            for i in range(n)]  # fmt: skip
    pq.write_table(pa.Table.from_pylist(rows), path)
    return rows


def write(tmp: Path, config: dict[str, Any], name: str = "job.yaml") -> Path:
    path = tmp / name
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


def invoke(*args: str) -> Result:
    return CliRunner(env={"EVAL_API_KEY": API_KEY}).invoke(main, list(args))


def last_line(result: Result) -> str:
    return result.output.strip().splitlines()[-1]


# --------------------------------------------------------------------------- the service named


@pytest.mark.parametrize("drop", ["base_url", "service"])
def test_a_config_without_base_url_exits_2_naming_the_key_and_both_kinds(
    tmp_path: Path, drop: str
) -> None:
    corpus(tmp_path / "in.parquet")
    config = job_config(tmp_path, "embedded")
    if drop == "service":
        del config["service"]
    else:
        del config["service"]["base_url"]
    path = write(tmp_path, config)
    for command in ("plan", "run"):
        result = invoke(command, str(path))
        assert result.exit_code == 2, result.output
        line = last_line(result)
        assert line.startswith("ConfigError: service.base_url: required key is missing")
        assert "https://host[:port]" in line and "'embedded'" in line
    assert not (tmp_path / "out").exists()  # nothing written, nothing sent (no service exists)


def test_the_identity_is_the_origin_or_embedded() -> None:
    assert origin("https://evals.example.com") == "https://evals.example.com:443"
    assert origin("http://user:secret@10.0.0.5:8080/") == "http://10.0.0.5:8080"
    assert origin("http://[::1]:9000") == "http://[::1]:9000"
    base = {
        "input": {"path": "in.parquet", "id_column": "id", "state": "text"},
        "output": {"path": "out"},
        "model": "model-1.13.0",
        "questions": QUESTIONS,
    }
    embedded_job = parse_config({**base, "service": {"base_url": "embedded"}})
    remote = parse_config({**base, "service": {"base_url": "https://evals.example.com"}})
    assert embedded_job.service.identity == "embedded"
    assert remote.service.identity == "https://evals.example.com:443"
    # A rerun into the same output on another service is another job: nothing is mixed.
    assert embedded_job.fingerprint() != remote.fingerprint()


def test_the_cache_never_serves_another_services_answers(tmp_path: Path) -> None:
    """The same model, question and state, answered by A: B finds nothing, A finds it."""
    tokens = Planner(QUESTIONS).question_tokens

    def cache_of(url: str) -> Any:
        config = parse_config(job_config(tmp_path, url, cache={"path": str(tmp_path / "c")}))
        return open_job_cache(config, QUESTIONS, tokens)

    state = b"s" * 16
    first = cache_of("http://127.0.0.1:8001")
    answer = {"noul": 0.7}
    first.add(state, {"helpful": answer}, "model-1.13.0", 100, [Request(("helpful",), 90, 10)])
    first.close()
    other, again = cache_of("http://127.0.0.1:8002"), cache_of("http://127.0.0.1:8001")
    assert other.lookup([state]) == {}
    assert again.lookup([state])[state].answers == {"helpful": answer}
    other.close()
    again.close()
    stats = invoke("cache", "stats", "--path", str(tmp_path / "c"), "--json")
    by_service = json.loads(stats.output)["services"]
    assert by_service == {"http://127.0.0.1:8001": {"entries": 1, "tokens": 100}}


def test_answers_kept_before_the_cache_named_the_service_are_never_served(
    tmp_path: Path,
) -> None:
    """A format-1 file (written by the evalpipe before this one): its entries are migrated as
    'unknown', counted by `cache stats`, and never found by a job."""
    path = tmp_path / "answers.sqlite3"
    with sqlite3.connect(path) as conn:
        conn.executescript(
            """
            CREATE TABLE meta (name TEXT PRIMARY KEY, value TEXT NOT NULL) WITHOUT ROWID;
            CREATE TABLE questions (id INTEGER PRIMARY KEY, digest BLOB NOT NULL UNIQUE);
            CREATE TABLE answers (state BLOB NOT NULL, question INTEGER NOT NULL,
                answer BLOB NOT NULL, model TEXT NOT NULL, tokens INTEGER NOT NULL,
                created INTEGER NOT NULL, PRIMARY KEY (state, question)) WITHOUT ROWID;
            INSERT INTO meta VALUES ('format', '1');
            INSERT INTO questions VALUES (1, x'00112233445566778899aabbccddeeff');
            INSERT INTO answers VALUES (x'01', 1, x'00', 'model-1.13.0', 40, 1700000000);
            """
        )
    config = parse_config(job_config(tmp_path, "embedded", cache={"path": str(path)}))
    cache = open_job_cache(config, QUESTIONS, Planner(QUESTIONS).question_tokens)
    assert cache.on and cache.lookup([b"\x01"]) == {}
    cache.close()
    store = Store.open(path, write=False)
    stats = store.stats()
    store.close()
    assert stats["format"] == 2
    assert stats["services"] == {"unknown": {"entries": 1, "tokens": 40}}
    shown = invoke("cache", "stats", "--path", str(path))
    assert "by service unknown: 1 answers" in shown.output, shown.output


# --------------------------------------------------------------------------- first contact


def _bad_configs(tmp: Path) -> dict[str, tuple[Path, str]]:
    """name -> (config path, what its one line must say)."""
    good = job_config(tmp, "embedded")
    cases: dict[str, tuple[Path, str]] = {}
    cases["parquet"] = (tmp / "in.parquet", "is a Parquet file, not a job config")
    binary = tmp / "blob.yaml"
    binary.write_bytes(b"\x00\x01\xff\xfe" * 64)
    cases["binary"] = (binary, "is a binary file, not a YAML job config")
    syntax = tmp / "syntax.yaml"
    syntax.write_text("input:\n  path: in.parquet\n  id_column: [id\nmodel: x\n")
    cases["yaml"] = (syntax, "not valid YAML at line 4, column 6: expected ',' or ']'")
    misspelled = {**good, "input": {**good["input"], "id_colum": "id"}}
    del misspelled["input"]["id_column"]
    cases["misspelled"] = (
        write(tmp, misspelled, "misspelled.yaml"),
        "input.id_column: required key is missing (is 'id_colum' a misspelling of it?)",
    )
    (tmp / "taken.parquet").write_bytes(b"PAR1")
    output_file = {**good, "output": {"path": str(tmp / "taken.parquet")}}
    cases["output-file"] = (
        write(tmp, output_file, "output-file.yaml"),
        "output.path: " + str(tmp / "taken.parquet") + " is a file",
    )
    missing = {**good, "input": {**good["input"], "path": str(tmp / "nowhere.parquet")}}
    cases["no-input"] = (write(tmp, missing, "no-input.yaml"), "nowhere.parquet")
    (tmp / "empty").mkdir()
    empty = {**good, "input": {**good["input"], "path": str(tmp / "empty")}}
    cases["no-parquet"] = (write(tmp, empty, "no-parquet.yaml"), "empty")
    placeholder = {**good, "service": {"base_url": BASE_URL_PLACEHOLDER}}
    cases["placeholder"] = (
        write(tmp, placeholder, "placeholder.yaml"),
        "service.base_url: still the placeholder",
    )
    return cases


CASES = ["parquet", "binary", "yaml", "misspelled", "output-file", "no-input", "no-parquet"]


@pytest.mark.parametrize("case", [*CASES, "placeholder"])
def test_first_contact_errors_are_one_line_exit_2_the_same_for_plan_and_run(
    tmp_path: Path, case: str
) -> None:
    corpus(tmp_path / "in.parquet")
    path, says = _bad_configs(tmp_path)[case]
    planned, ran = invoke("plan", str(path)), invoke("run", str(path))
    for result in (planned, ran):
        assert result.exit_code == 2, result.output
        assert "Traceback" not in result.output
        assert says in last_line(result), last_line(result)
    assert last_line(planned) == last_line(ran)  # plan refuses what run refuses, as run does
    assert not (tmp_path / "out").exists()


def test_nothing_listening_fails_at_once_naming_the_url_and_leaves_nothing(
    tmp_path: Path,
) -> None:
    """A refused connection is not waited out (connect_wait is for a service that answers
    slowly); the run that failed before its first row leaves no lock and no folder."""
    corpus(tmp_path / "in.parquet")
    url = "http://127.0.0.1:9"  # discard: nothing listens
    listed = invoke("models", "--base-url", url)
    assert listed.exit_code == 2, listed.output
    line = last_line(listed)
    assert line.startswith(f"ServiceUnreachable: cannot reach the evaluation service at {url} (")
    assert "within" not in line  # it did not wait for connect_wait
    config = job_config(tmp_path, url, service={"base_url": url, "connect_wait": 30})
    ran = invoke("run", str(write(tmp_path, config)))
    assert ran.exit_code == 2 and last_line(ran) == line, ran.output
    assert not (tmp_path / "out").exists()
    # A folder that was there before is the user's: it stays, without our lock.
    (tmp_path / "out").mkdir()
    assert invoke("run", str(write(tmp_path, config))).exit_code == 2
    assert [p.name for p in (tmp_path / "out").iterdir()] == [LOCK_NAME]


def test_models_needs_a_service() -> None:
    result = invoke("models")
    assert result.exit_code == 2
    assert last_line(result).startswith("ConfigError: --base-url: give the service's URL")


# --------------------------------------------------------------------------- the price


def test_plan_shows_the_price_and_where_it_came_from_or_says_unknown(tmp_path: Path) -> None:
    corpus(tmp_path / "in.parquet")
    config = job_config(tmp_path, "embedded")
    unknown = invoke("plan", str(write(tmp_path, config)))
    assert "cost               unknown (no pricing in the config: set pricing.default)" in (
        unknown.output
    )
    config["pricing"] = {"default": 0.05, "models": {"model-1.13.0": 0.042}}
    priced = invoke("plan", str(write(tmp_path, config)), "--json")
    figures = json.loads(priced.stdout)  # the embedded service's warning is on stderr
    assert figures["price_per_million_input_tokens"] == 0.042
    assert figures["price_source"] == "pricing.models.model-1.13.0"
    tokens = figures["estimated_input_tokens"]
    assert figures["estimated_cost_usd"] == round(tokens * 0.042 / 1e6, 6)


# --------------------------------------------------------------------------- a few rows first


def test_limit_and_sample_select_rows_reproducibly(tmp_path: Path) -> None:
    corpus(tmp_path / "in.parquet")

    def ids(rows: Selection | None, batch_rows: int = 7) -> list[int]:
        spec = SourceSpec(tmp_path / "in.parquet", "id", "text", batch_rows, rows=rows)
        source = Source(spec)
        found = [row.id for batch in source.batches() for row in batch]
        assert source.num_rows == len(found)
        return found

    assert ids(Selection(5)) == [0, 1, 2, 3, 4]
    sample = ids(Selection(12, sample=True, seed=3))
    assert len(set(sample)) == 12 and sample == sorted(sample)
    assert ids(Selection(12, sample=True, seed=3), batch_rows=50) == sample  # any batching
    assert ids(Selection(12, sample=True, seed=4)) != sample
    assert ids(Selection(500, sample=True)) == list(range(ROWS))  # more than there are: all
    config = write(tmp_path, job_config(tmp_path, "embedded"))
    planned = json.loads(
        invoke("plan", str(config), "--sample", "12", "--seed", "3", "--json").stdout
    )
    assert planned["rows"] == 12 and planned["rows_selected"] == "a sample of 12 rows (seed 3)"
    both = invoke("plan", str(config), "--limit", "3", "--sample", "4")
    assert both.exit_code == 2 and "give one of them, not both" in last_line(both)
    seed_alone = invoke("run", str(config), "--seed", "4")
    assert seed_alone.exit_code == 2 and last_line(seed_alone).startswith("UsageError: --seed")


@pytest.mark.ray
def test_sample_50_sends_50_states_and_the_rest_follows(ray_runtime: None, tmp_path: Path) -> None:
    rows = corpus(tmp_path / "in.parquet", 120)
    with embedded() as service:
        config = write(tmp_path, job_config(tmp_path, service.base_url))
        first = invoke(
            "run", str(config), "--sample", "50", "--seed", "7", "--progress-interval", "60"
        )
        assert first.exit_code == 0, first.output
        assert service.stats()["requests_accepted"] == 50
        sampled = pl.read_parquet(tmp_path / "out" / "*.parquet")
        assert sampled.height == 50 and set(sampled["_service"]) == {origin(service.base_url)}
        rest = invoke("run", str(config), "--progress-interval", "60")  # then the whole corpus
        assert rest.exit_code == 0, rest.output
        assert service.stats()["requests_accepted"] == len(rows)
    whole = pl.read_parquet(tmp_path / "out" / "*.parquet").sort("id")
    assert whole["id"].to_list() == list(range(len(rows)))


# --------------------------------------------------------------------------- init


def test_init_writes_a_config_that_plans_once_its_placeholder_is_filled(tmp_path: Path) -> None:
    rows = [{"n": i % 3, "review_id": f"r{i}", "title": "t", "body": f"a longer body text {i}"}
            for i in range(40)]  # fmt: skip
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "reviews.parquet")
    out = tmp_path / "job.yaml"
    written = invoke("init", str(tmp_path / "reviews.parquet"), "--out", str(out))
    assert written.exit_code == 0 and written.output.strip() == str(out)
    data = yaml.safe_load(out.read_text())
    assert data["input"]["id_column"] == "review_id"  # unique, and named like an id
    assert data["input"]["state"] == "body"  # the longest text
    assert {q["type"] for q in data["questions"].values()} == {"noul", "choice", "score"}
    refused = invoke("plan", str(out))
    assert refused.exit_code == 2
    assert last_line(refused).startswith("ConfigError: service.base_url: still the placeholder")
    out.write_text(
        out.read_text().replace(json.dumps(BASE_URL_PLACEHOLDER), "https://evals.example.com")
    )
    planned = invoke("plan", str(out), "--json")
    assert planned.exit_code == 0, planned.output
    assert json.loads(planned.stdout)["rows"] == 40
    again = invoke("init", str(tmp_path / "reviews.parquet"), "--out", str(out))
    assert again.exit_code == 2 and "exists" in last_line(again)


HOSTILE = (
    "text\nmetrics:\n  pushgateway: http://elsewhere",
    "id\r\nservice: {base_url: http://elsewhere}",
    "# a comment?",
    "- a list?",
    "true",
    "{flow: map}",
    "line\u2028separator",
)


def test_init_writes_hostile_column_names_as_inert_names(tmp_path: Path) -> None:
    """Column names are data: each is written by the YAML library, so a name holding a line
    break and `metrics:` is a column name in the config, not a section of it, in a value and
    in a comment alike."""
    ids, texts = HOSTILE[1], HOSTILE[0]
    rows = {name: [f"{name} {i}" for i in range(5)] for name in HOSTILE[2:]}
    table = pa.table({ids: [f"r{i}" for i in range(5)],
                      texts: [f"a long review text, number {i}, " * 8 for i in range(5)],
                      **rows})  # fmt: skip
    corpus_path = tmp_path / "corpus\nmetrics: {port: 1}.parquet"
    pq.write_table(table, corpus_path)
    out = tmp_path / "job.yaml"
    written = invoke("init", str(corpus_path), "--out", str(out))
    assert written.exit_code == 0, written.output
    data = yaml.safe_load(out.read_text())
    assert set(data) == {"input", "output", "service", "model", "limits", "questions"}
    assert data["input"]["path"] == str(corpus_path)
    assert data["input"]["state"] == texts
    out.write_text(out.read_text().replace(json.dumps(BASE_URL_PLACEHOLDER), "embedded"))
    config = load_config(out)
    assert config.metrics.pushgateway is None and config.metrics.port is None
    assert config.service.base_url == "embedded"
    assert config.input.state == texts and config.input.path == corpus_path
    repeated = pa.table({name: [f"{name} {i // 2}" for i in range(5)] for name in HOSTILE})
    pq.write_table(repeated, tmp_path / "all.parquet")  # no id: every name goes in a comment
    other = tmp_path / "b.yaml"
    assert invoke("init", str(tmp_path / "all.parquet"), "--out", str(other)).exit_code == 0
    assert "<ID_COLUMN>" in other.read_text()
    again = yaml.safe_load(other.read_text())
    assert set(again) == {"input", "output", "service", "model", "limits", "questions"}


# --------------------------------------------------------------------------- plan = run


def test_a_kept_ratio_survives_and_a_damaged_file_is_no_ratio(tmp_path: Path) -> None:
    assert Learned("embedded", "model-1.13.0", tmp_path).ratio() is None
    Learned("embedded", "model-1.13.0", tmp_path).keep_ratio(1.25, "plan --calibrate 5")
    Learned("http://a:1", "model-1.13.0", tmp_path).keep_ratio(2.0, "run x")
    kept = Learned("embedded", "model-1.13.0", tmp_path).ratio()
    assert kept is not None and kept.ratio == 1.25 and kept.source == "plan --calibrate 5"
    assert Learned("embedded", "model-1.12.0", tmp_path).ratio() is None  # per model
    (tmp_path / "token_ratios.json").write_text("{not json")
    assert Learned("embedded", "model-1.13.0", tmp_path).ratio() is None


@pytest.mark.ray
def test_after_plan_calibrate_plan_and_run_agree_request_for_request(
    ray_runtime: None, tmp_path: Path
) -> None:
    """The service counts three tokens per one of ours: after `plan --calibrate`, the next
    plan and the run both plan with that ratio, so the run sends what the plan said and learns
    nothing by refusal."""
    rows = [{"id": i, "text": text(3_000 + 1_500 * i, i)} for i in range(8)]
    rows += [{"id": 100 + i, "text": f"short review number {i}"} for i in range(20)]
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "in.parquet")
    questions = {f"q{i}": {"type": "noul", "instructions": f"Question {i}: " + text(300, i)}
                 for i in range(4)}  # fmt: skip
    with embedded(token_factor=3.0) as service:
        config = write(tmp_path, job_config(tmp_path, service.base_url, questions=questions))
        calibrated = invoke("plan", str(config), "--calibrate", "6", "--json")
        assert calibrated.exit_code == 0, calibrated.output
        planned = json.loads(invoke("plan", str(config), "--json").stdout)
        before = service.stats()["requests_accepted"]
        ran = invoke("run", str(config), "--log-format", "json", "--progress-interval", "60")
        assert ran.exit_code == 0, ran.output
        sent = service.stats()["requests_accepted"] - before
    assert planned["service_token_ratio"] == pytest.approx(3.0, rel=0.02)
    assert planned["service_token_ratio_source"].startswith("3.0")
    summary = next(json.loads(x) for x in ran.output.splitlines() if '"summary"' in x)
    assert summary["token_ratio"].startswith("3.0")
    assert summary["requests_refused_for_length"] == 0  # nothing learned by refusal
    assert summary["requests"] == sent == planned["requests"]
    assert summary["rows_in_error"].get("context_limit", 0) == planned["context_limit_rows"] > 0
    kept = load_config(config)
    assert Learned(kept.service.identity, kept.model).ratio() is not None  # the run kept its own


@pytest.mark.ray
def test_after_the_demo_another_service_is_asked_every_row(
    ray_runtime: None, tmp_path: Path
) -> None:
    """The demo's answers (the embedded service, made up) in the machine's cache; the same
    corpus and questions against another service: every row is sent to it, none is taken
    from the demo's answers, and every row names it."""
    corpus(tmp_path / "in.parquet", 30)
    cache = {"path": str(tmp_path / "cache")}
    demo = job_config(tmp_path, "embedded", cache=cache, output={"path": str(tmp_path / "demo")})
    first = invoke("run", str(write(tmp_path, demo, "demo.yaml")), "--progress-interval", "60")
    assert first.exit_code == 0, first.output
    assert "made-up numbers" in first.output  # said at the start and in the summary
    with embedded() as other:
        config = job_config(tmp_path, other.base_url, cache=cache)
        second = invoke("run", str(write(tmp_path, config)), "--progress-interval", "60")
        assert second.exit_code == 0, second.output
        assert other.stats()["requests_accepted"] == 30  # every row, from this service
    rows = pl.read_parquet(tmp_path / "out" / "*.parquet")
    assert set(rows["_service"]) == {origin(other.base_url)} and not rows["_cached"].any()
    demo_rows = pl.read_parquet(tmp_path / "demo" / "*.parquet")
    assert set(demo_rows["_service"]) == {"embedded"}
