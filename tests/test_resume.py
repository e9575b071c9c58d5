"""Resume, faults and bad input: nothing lost, nothing paid twice.

Real processes, real signals, real Parquet. `evalpipe run` runs as a subprocess in a session of
its own and is killed with SIGKILL mid-run, then the same command runs again; a Ray worker is
killed by its pid while a job runs; the service injects faults; bad input is refused before any
request. One Ray runtime for the in-process tests of the module (num_cpus=2), as in test_job.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import orjson
import polars as pl
import psutil
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml
from click.testing import CliRunner

from conftest import (
    API_KEY,
    CLIENT,
    LIFTED,
    QUESTIONS,
    auth,
    cli_run,
    embedded,
    job_config,
    run_config,
)
from evalpipe.cli.main import main
from evalpipe.config import load_config
from evalpipe.errors import RETRYABLE_ERROR_TYPES
from evalpipe.output.journal import read_journal
from evalpipe.output.manifest import MANIFEST
from evalpipe.output.outdir import JOURNAL
from evalpipe.output.table import output_schema
from evalpipe.service import EmbeddedService, ServiceSettings
from evalpipe.service.evaluator import answer_request, compile_questions

# The independent check's faults: 5% 529, 3% 500, 2% dropped connections, 2% truncated bodies.
FAULTS = {"fault_529": 0.05, "fault_500": 0.03, "fault_drop": 0.02, "fault_truncate": 0.02}
THINGS = ["lamp", "kettle", "tent", "chair", "jacket", "charger", "blender"]


def write_corpus(path: Path, n: int) -> list[dict[str, Any]]:
    """`n` rows with distinct short states (so every row is one request)."""
    rows = [
        {"id": i, "text": f"Review {i}: the {THINGS[i % 7]} {'broke' if i % 5 == 0 else 'works'} "
         f"after {i % 97} days."}
        for i in range(n)
    ]  # fmt: skip
    pq.write_table(pa.Table.from_pylist(rows), path)
    return rows


def write_yaml(tmp: Path, config: dict[str, Any]) -> Path:
    path = tmp / "job.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def run(config: dict[str, Any], **options: Any) -> dict[str, Any]:
    return run_config(config, **options)


def output(tmp: Path) -> pl.DataFrame:
    return pl.read_parquet(tmp / "out" / "part-*.parquet").sort("id")


def ask(base_url: str, state: Any, client: httpx.Client | None = None) -> dict[str, Any]:
    """The service's answer for `state`, asked directly (past its injected faults), through
    `client` or the session's (`CLIENT`)."""
    body = {"state": state, "model": "model-1.13.0", "questions": QUESTIONS}
    post = (client or CLIENT).post
    for _ in range(20):
        with contextlib.suppress(httpx.TransportError, ValueError):
            reply = post(f"{base_url}/v1/evaluate", json=body, headers=auth(), timeout=30)
            if reply.status_code == 200:
                return reply.json()
    raise AssertionError(f"the service did not answer {state!r}")


def assert_answered(
    base_url: str, state: Any, row: dict[str, Any], client: httpx.Client | None = None
) -> None:
    """The row holds exactly the service's answer for this state."""
    expected = ask(base_url, state, client)
    assert row["_model"] == expected["model"]
    assert_answers(row, expected["answers"])


def assert_answers(row: dict[str, Any], answers: dict[str, Any]) -> None:
    """The row holds exactly these answers (to QUESTIONS)."""
    assert row["_error_type"] is None
    assert row["helpful__p_true"] == answers["helpful"]["noul"]
    assert row["sentiment__choice"] == answers["sentiment"]["choice"]
    for option, p in answers["sentiment"]["probabilities"].items():
        assert row[f"sentiment__p__{option}"] == p
    assert row["quality__score"] == answers["quality"]["score"]
    assert row["quality__confidence"] == answers["quality"]["confidence"]


def good_answers(stats: dict[str, Any]) -> int:
    """Evaluate requests the service answered in full: accepted, and not turned into a 529, a
    500, a dropped connection or a truncated body (a slow answer is still an answer)."""
    faults = stats["faults"]
    failed = faults["529"] + faults["500"] + faults["drop"] + faults["truncate"]
    return int(stats["requests_accepted"]) - failed


# --------------------------------------------------------------------------- kill -9


def evalpipe_command() -> list[str]:
    script = Path(sys.executable).with_name("evalpipe")
    if script.exists():
        return [str(script)]
    return [sys.executable, "-c", "from evalpipe.cli.main import main; main()"]


def start(config_path: Path, log: Path, *options: str) -> subprocess.Popen[bytes]:
    """`evalpipe run CONFIG` in a session (and process group) of its own, as a scheduler would."""
    env = {**os.environ, "EVAL_API_KEY": API_KEY}
    with log.open("ab") as sink:
        return subprocess.Popen(
            [*evalpipe_command(), "run", str(config_path), "--progress-interval", "1", *options],
            stdout=sink,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )


def kill_9_joined(process: subprocess.Popen[bytes]) -> None:
    """SIGKILL, at once, to a run that joined the session's Ray (the process, and any child
    of it that drives the job: a scheduler's task) and to its workers there (as a scheduler's
    kill of the cgroup that held them); the account's Budget, detached, lives on as on a
    cluster."""
    import ray

    children = psutil.Process(process.pid).children(recursive=True)
    pids = {process.pid, *(child.pid for child in children)}
    drivers = {
        j["JobID"]: j["DriverPid"] for j in ray._private.state.jobs() if j["DriverPid"] in pids
    }
    jobs = set(drivers)
    workers = [
        a["Pid"]
        for a in ray._private.state.actors().values()
        if a["JobID"] in jobs and a["ActorClassName"] == "Worker" and a["State"] == "ALIVE"
    ]
    assert workers, "the run has no worker on the session's Ray"
    for pid in {process.pid, *drivers.values(), *workers}:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    process.wait()


def committed_so_far(out: Path, schema: pa.Schema, fingerprint: str) -> tuple[set[Any], set[Any]]:
    """(ids in parts, ids in the journal's valid prefix), read while a run writes."""
    in_parts: set[Any] = set()
    for part in out.glob("part-*.parquet"):
        with contextlib.suppress(OSError, pa.ArrowException):  # cut or replaced meanwhile
            in_parts.update(pq.read_table(part, columns=["id"])["id"].to_pylist())
    try:
        journaled = set(read_journal(out / JOURNAL, schema, fingerprint)[0]["id"].to_pylist())
    except FileNotFoundError:
        journaled = set()
    return in_parts, journaled


def wait_for(
    condition: Callable[[], bool],
    process: subprocess.Popen[bytes],
    log: Path,
    timeout: float,
    every: float = 0.02,
) -> None:
    """Poll `condition` every `every` seconds (a costly look, such as a catalog's, less often)
    until it holds; an error if the run ended first or after `timeout` (a guard against a hang,
    not a speed bound)."""
    deadline = time.monotonic() + timeout
    while not condition():
        if process.poll() is not None:
            raise AssertionError(f"the run ended before the kill: {log.read_text()[-2000:]}")
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for the kill point: {log.read_text()[-2000:]}")
        time.sleep(every)


@pytest.mark.subprocess
def test_kill_9_mid_run_then_the_same_command_has_every_id_once(
    ray_address: str, tmp_path: Path
) -> None:
    """The independent check's scenario, faster: faults, SIGKILL mid-run, the same command.

    Workers stream each answer back as it comes (not a chunk at a time) and the driver
    journals it within ~0.1-0.3 s (`WRITE_SECONDS` plus one turn of its loop), so what a kill
    can lose is what was in flight (`max_in_flight: 16`, one actor) and what came back
    in the last moments before the kill: well under 40 requests. The killed run joined the
    session's Ray (as on a cluster; a Ray of its own would cost it 5 s to start) and is killed
    with its workers there; the rerun runs in this process, on the session's Ray."""
    n = 150
    rows = write_corpus(tmp_path / "in.parquet", n)
    with embedded(rpm=3000, tps=10_000_000, latency=0.05, fault_seed=5, **FAULTS) as service:
        config = job_config(
            tmp_path,
            service.base_url,
            limits={"requests_per_minute": 3000},
            output={"part_rows": 50},
            concurrency={"actors": 1, "max_in_flight": 16},  # one actor: a process less
            cache={"enabled": False},  # the journal alone (the cache would save some repays)
        )
        path = write_yaml(tmp_path, config)
        out, log = tmp_path / "out", tmp_path / "runs.log"
        loaded = load_config(path)  # as the run sees it (YAML sorts the question keys)
        schema = output_schema("id", pa.int64(), loaded.parsed_questions)
        fingerprint = loaded.fingerprint()

        def mid_run() -> bool:  # parts committed, rows in the journal, about half done
            parts, journaled = committed_so_far(out, schema, fingerprint)
            # The journal at least 5 rows in but half a part (0.5 s here) from its next cut,
            # so that a cut between this check and the kill cannot empty it.
            in_journal = len(journaled - parts)
            return bool(parts) and 5 <= in_journal <= 25 and len(parts | journaled) >= n // 2

        first = start(path, log, "--ray-address", ray_address)
        wait_for(mid_run, first, log, timeout=240)  # a guard against a hang, not a speed bound
        kill_9_joined(first)
        parts, journaled = committed_so_far(out, schema, fingerprint)
        assert parts and journaled  # the kill left both, and maybe a torn record
        committed = parts | journaled
        answered_by_then = good_answers(service.stats())

        again = cli_run(path)  # the same command, in this process on the session's Ray
        stats = service.stats()

        df = output(tmp_path)
        assert df["id"].to_list() == list(range(n))  # every id exactly once
        assert df["_error_type"].null_count() == n
        # Every row holds the service's answer: its evaluator's, run here, for each row, and
        # the service's own over HTTP (past its faults) for a few, which ties the two together.
        compiled = compile_questions(QUESTIONS)
        for row in df.to_dicts():
            assert_answers(row, answer_request(rows[row["id"]]["text"], QUESTIONS, compiled))
        for row in df.to_dicts()[:: n // 6]:
            assert_answered(service.base_url, rows[row["id"]]["text"], row)

    # The rerun sent none of the rows committed before the kill (the journal's included).
    skipped = int(again.stdout.split(" in error")[1].split(",")[1].split()[0])
    assert skipped == len(committed), (skipped, len(parts), len(journaled), len(committed))
    # Paid twice: full answers beyond one per state. Only the kill's losses may be paid again.
    lost_at_kill = answered_by_then - len(committed)
    paid_twice = good_answers(stats) - n
    assert 0 <= paid_twice == lost_at_kill <= 40, stats
    assert not (out / JOURNAL).exists()
    manifest = orjson.loads((out / MANIFEST).read_bytes())
    assert manifest["rows"] == n and manifest["finished"]


# --------------------------------------------------------------------------- retryable rows


def test_a_rerun_retries_the_rows_that_ended_in_a_retryable_error(
    ray_runtime: None, tmp_path: Path
) -> None:
    n = 60
    rows = write_corpus(tmp_path / "in.parquet", n)
    one = {"actors": 1}  # one worker: how many is not the point
    with embedded(fault_529=0.35, fault_500=0.35, fault_seed=2) as faulty:
        retries = {"max_attempts": 1}
        first = run(job_config(tmp_path, faulty.base_url, retries=retries, concurrency=one))
    before = output(tmp_path)
    failed = before.filter(pl.col("_error_type").is_not_null())
    assert set(failed["_error_type"]) == {"overloaded", "server_error"}
    assert 0 < failed.height < n
    assert sum(first["rows_in_error"].values()) == failed.height

    # The same service (the same origin: its port), its faults over: answers are reused only
    # from the service that gave them, so the rerun must be on that one.
    same_port = int(faulty.base_url.rsplit(":", 1)[1])
    with EmbeddedService(ServiceSettings(api_key=API_KEY, **LIFTED), port=same_port) as clean:
        assert clean.base_url == faulty.base_url
        second = run(job_config(tmp_path, clean.base_url, concurrency=one))
        assert clean.stats()["requests_accepted"] == failed.height  # only those are sent again
        after = output(tmp_path)
        assert after["id"].to_list() == list(range(n))
        assert after["_error_type"].null_count() == n
        by_id = {r["id"]: r for r in after.to_dicts()}
        for row_id in failed["id"].to_list()[:10]:
            assert_answered(clean.base_url, rows[row_id]["text"], by_id[row_id])
    assert second["rows_skipped_committed_earlier"] == n - failed.height
    assert second["rows_answered"] == failed.height


# --------------------------------------------------------------------------- faults


def test_every_kind_of_fault_ends_in_answers_or_typed_errors(
    ray_runtime: None, tmp_path: Path
) -> None:
    """529s, 500s, dropped connections, truncated bodies and answers slower than the timeout."""
    n = 80
    write_corpus(tmp_path / "in.parquet", n)
    faults = {**FAULTS, "fault_slow": 0.05}
    with embedded(**faults, latency=0.01, slow_seconds=1.5, fault_seed=9) as service:
        retries = {"max_attempts": 2, "attempt_timeout": 0.5}
        result = run(job_config(tmp_path, service.base_url, retries=retries))
        stats = service.stats()
    df = output(tmp_path)
    assert df["id"].to_list() == list(range(n))
    answered = df.filter(pl.col("_error_type").is_null())
    assert answered["helpful__p_true"].null_count() == 0
    in_error = df.filter(pl.col("_error_type").is_not_null())
    assert set(in_error["_error_type"]) <= RETRYABLE_ERROR_TYPES
    assert in_error["_error"].null_count() == 0 and in_error["helpful__p_true"].null_count() == len(
        in_error
    )
    assert stats["faults"]["slow"] > 0 and stats["faults_injected"] > 0
    assert result["retries"] == result["attempts"] - result["requests"] > 0
    assert result["rows_answered"] + sum(result["rows_in_error"].values()) == n


# --------------------------------------------------------------------------- a dead actor


def test_a_killed_worker_is_replaced_and_the_job_completes(
    ray_runtime: None, tmp_path: Path
) -> None:
    import ray

    n = 100
    rows = write_corpus(tmp_path / "in.parquet", n)
    killed: list[int] = []
    problems: list[BaseException] = []

    def kill_a_worker(service: EmbeddedService) -> None:
        try:
            deadline = time.monotonic() + 60
            while service.stats()["requests_accepted"] < 25:  # some rows are done
                assert time.monotonic() < deadline, "the job never got going"
                time.sleep(0.02)
            names = [
                name
                for name in ray.util.list_named_actors()
                if name.startswith("evalpipe-") and "-worker-" in name
            ]
            workers = [ray.get_actor(name) for name in sorted(names)]
            # One of this job's: an earlier job's workers may wait idle for the next one.
            actor = next(w for w in workers if ray.get(w.serving.remote()) is not None)
            pid = ray.get(actor.pid.remote())
            os.kill(pid, signal.SIGKILL)
            killed.append(pid)
        except BaseException as exc:  # reported by the test, not lost in the thread
            problems.append(exc)

    with embedded(latency=0.05, rpm=3000) as service:
        # One worker: the job cannot complete unless the killed one is replaced.
        config = job_config(
            tmp_path,
            service.base_url,
            limits={"requests_per_minute": 3000},
            concurrency={"actors": 1},
        )
        killer = threading.Thread(target=kill_a_worker, args=(service,), daemon=True)
        killer.start()
        result = run(config)
        killer.join(10)
        assert not problems, problems
        assert killed and not psutil.pid_exists(killed[0])
        df = output(tmp_path)
        assert df["id"].to_list() == list(range(n))  # every id once
        assert df["_error_type"].null_count() == n
        by_id = {r["id"]: r for r in df.to_dicts()}
        for row in rows[::20]:
            assert_answered(service.base_url, row["text"], by_id[row["id"]])
    assert result["actor_restarts"] >= 1
    assert result["rows_answered"] == n


# --------------------------------------------------------------------------- bad input


def _bad_path(tmp: Path, config: dict[str, Any]) -> None:
    config["input"]["path"] = str(tmp / "missing" / "reviews.parquet")


def _not_parquet(tmp: Path, config: dict[str, Any]) -> None:
    (tmp / "in.parquet").write_text("id,text\n1,a review in CSV\n")


def _duplicate_ids(tmp: Path, config: dict[str, Any]) -> None:
    rows = [{"id": i % 4, "text": f"review {i}"} for i in range(6)]
    pq.write_table(pa.Table.from_pylist(rows), tmp / "in.parquet")


def _unknown_key(tmp: Path, config: dict[str, Any]) -> None:
    config["output"]["part_row"] = 100


def _unknown_top_key(tmp: Path, config: dict[str, Any]) -> None:
    config["retry"] = {"max_attempts": 3}


@pytest.mark.parametrize(
    ("spoil", "fragments"),
    [
        (_bad_path, ["InputError: ", "missing/reviews.parquet", "does not exist"]),
        (_not_parquet, ["InputError: ", "in.parquet", "is not a Parquet file"]),
        (_duplicate_ids, ["InputError: ", "'id'", "0 (2 times)"]),
        (_unknown_key, ["ConfigError: ", "output.part_row", "did you mean 'part_rows'?"]),
        (_unknown_top_key, ["ConfigError: ", "retry", "did you mean 'retries'?"]),
    ],
    ids=["missing-input", "not-parquet", "duplicate-ids", "unknown-key", "unknown-section"],
)
def test_bad_input_is_one_line_exit_2_nothing_sent_nothing_written(
    service: EmbeddedService,
    tmp_path: Path,
    spoil: Callable[[Path, dict[str, Any]], None],
    fragments: list[str],
) -> None:
    write_corpus(tmp_path / "in.parquet", 5)
    config = job_config(tmp_path, service.base_url)
    spoil(tmp_path, config)
    path = write_yaml(tmp_path, config)
    before = sum(service.stats()["responses"].values())
    result = CliRunner().invoke(main, ["run", str(path)], env={"EVAL_API_KEY": API_KEY})
    assert sum(service.stats()["responses"].values()) == before  # not even GET /v1/models
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1, result.output
    assert all(fragment in lines[0] for fragment in fragments), lines[0]
    assert not (tmp_path / "out").exists()
