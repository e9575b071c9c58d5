"""`evalpipe.airflow` in a real Airflow 3: a metadata database (`airflow db migrate`), a dags
folder, the DAGs serialized (`airflow dags reserialize`), then `airflow dags test`, which runs
the tasks in its own process against the session's embedded service and joins the session's
Ray. What is checked is what Airflow kept (its database: task states and tries, XComs), what
its OpenLineage provider sent (a file transport), the table, and the service's counters.

Each `airflow dags test` costs ~25 s, so there are three: one DAG run whose two tasks score a
corpus (its XCom is the summary, its lineage is Airflow's alone) and reach a cost cap (failed
once, not retried though `retries=3`); and a task killed with SIGKILL mid-run, then run again
for the same night, which pays again for no more than what was in flight.
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

from conftest import API_KEY, embedded, job_config
from evalpipe.service import EmbeddedService
from test_resume import kill_9_joined

pytest.importorskip("airflow", reason="the scheduler extras: `make test` installs them")

pytestmark = [pytest.mark.schedulers, pytest.mark.subprocess, pytest.mark.ray]

NIGHT = "2026-11-27"
ROWS = 30
SLOW_ROWS = 300  # 0.2 s a request, 16 in flight: ~4 s of sending, so the kill comes mid-run
PRICE = 100.0  # dollars per million tokens: about a cent a request
CAP = 0.05  # dollars: a few requests

DAGS = textwrap.dedent(
    """\
    import os
    from datetime import timedelta

    import pendulum
    from airflow.sdk import DAG

    from evalpipe.airflow import EvalpipeOperator

    START = pendulum.datetime(2026, 11, 1, tz="UTC")
    RAY = os.environ["EVALPIPE_TEST_RAY"]

    with DAG("nightly", schedule=None, start_date=START, catchup=False):
        EvalpipeOperator(task_id="score", config=os.environ["EVALPIPE_TEST_JOB"],
                         partition={"dt": "{{ ds }}"}, ray_address=RAY, retries=2)
        EvalpipeOperator(task_id="capped", config=os.environ["EVALPIPE_TEST_CAPPED"],
                         partition={"dt": "{{ ds }}"}, max_cost="{{ params.cap }}",
                         params={"cap": CAP_USD}, ray_address=RAY, retries=3,
                         retry_delay=timedelta(seconds=0))

    with DAG("killed", schedule=None, start_date=START, catchup=False):
        EvalpipeOperator(task_id="score", config=os.environ["EVALPIPE_TEST_SLOW"],
                         partition={"dt": "{{ ds }}"}, ray_address=RAY, retries=2)
    """
).replace("CAP_USD", repr(CAP))


def write_job(folder: Path, base_url: str, rows: int, **changes: Any) -> Path:
    folder.mkdir()
    data = [{"id": i, "text": f"Review {i}: it {'works' if i % 3 else 'broke'} on day {i}."}
            for i in range(rows)]  # fmt: skip
    pq.write_table(pa.Table.from_pylist(data), folder / "in.parquet")
    config = job_config(folder, base_url, output={"format": "delta"},
                        pricing={"default": PRICE}, **changes)  # fmt: skip
    path = folder / "job.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


class Airflow:
    """An Airflow home of the module's own: its environment, commands and database."""

    def __init__(self, home: Path, env: dict[str, str]) -> None:
        self.home, self.env = home, env

    def command(self, *args: str) -> list[str]:
        return [str(Path(sys.executable).with_name("airflow")), *args]

    def run(self, *args: str, timeout: float = 240) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(self.command(*args), env=self.env, capture_output=True, text=True,
                              timeout=timeout)  # fmt: skip
        assert done.returncode == 0 or args[:2] == ("dags", "test"), done.stderr[-3000:]
        return done

    def start(self, *args: str, log: Path) -> subprocess.Popen[bytes]:
        with log.open("wb") as out:
            return subprocess.Popen(self.command(*args), env=self.env, stdout=out,
                                    stderr=subprocess.STDOUT, start_new_session=True)  # fmt: skip

    def rows(self, sql: str, *params: Any) -> list[tuple[Any, ...]]:
        with sqlite3.connect(self.home / "airflow.db") as db:
            return db.execute(sql, params).fetchall()

    def tries(self, dag: str) -> dict[str, tuple[str, int]]:
        """task id -> (state, try number) of the DAG's latest run."""
        found = self.rows("SELECT task_id, state, try_number FROM task_instance "
                          "WHERE dag_id = ?", dag)  # fmt: skip
        return {task: (state, tries) for task, state, tries in found}

    def xcom(self, dag: str, task: str) -> Any:
        [(value,)] = self.rows("SELECT value FROM xcom WHERE dag_id = ? AND task_id = ? "
                               "AND key = 'return_value'", dag, task)  # fmt: skip
        return json.loads(value) if isinstance(value, str | bytes) else value


@pytest.fixture(scope="module")
def airflow(
    ray_address: str, service: EmbeddedService, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Airflow]:
    """A migrated database, the dags folder serialized, and the jobs' configs."""
    home = tmp_path_factory.mktemp("airflow")
    (home / "dags").mkdir()
    (home / "dags" / "evalpipe_dags.py").write_text(DAGS)
    jobs = home / "jobs"
    jobs.mkdir()
    (home / "own-lineage.yml").write_text(  # where the run's own events would go: never used
        f"transport: {{type: file, log_file_path: {home / 'own-lineage.jsonl'}, append: true}}\n"
    )
    env = {
        **os.environ,
        "AIRFLOW_HOME": str(home),
        "AIRFLOW__CORE__DAGS_FOLDER": str(home / "dags"),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__OPENLINEAGE__TRANSPORT": json.dumps(
            {"type": "file", "log_file_path": str(home / "lineage.jsonl"), "append": True}
        ),
        "OPENLINEAGE_CONFIG": str(home / "own-lineage.yml"),
        "EVAL_API_KEY": API_KEY,
        "EVALPIPE_TEST_RAY": ray_address,
        "EVALPIPE_TEST_JOB": str(write_job(jobs / "score", service.base_url, ROWS)),
        "EVALPIPE_TEST_CAPPED": str(write_job(jobs / "capped", service.base_url, ROWS)),
        "EVALPIPE_TEST_SLOW": str(jobs / "slow" / "job.yaml"),  # written by its test
    }
    env.pop("RAY_ADDRESS", None)
    flow = Airflow(home, env)
    flow.run("db", "migrate")
    flow.run("dags", "reserialize")
    yield flow


def accepted(service: EmbeddedService) -> int:
    return int(service.stats()["requests_accepted"])


def lineage_events(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def test_a_dag_scores_a_corpus_its_xcom_is_the_summary_and_a_cost_cap_is_not_retried(
    airflow: Airflow, service: EmbeddedService
) -> None:
    before = accepted(service)
    done = airflow.run("dags", "test", "nightly", NIGHT)
    paid = accepted(service) - before

    tries = airflow.tries("nightly")
    assert tries["score"] == ("success", 1), done.stdout[-3000:] + done.stderr[-3000:]
    summary = airflow.xcom("nightly", "score")
    assert summary["rows_total"] == ROWS and summary["rows_answered"] == ROWS
    assert summary["input_tokens"] > 0 and summary["cost_usd"] > 0
    scored = pl.read_delta(str(Path(airflow.env["EVALPIPE_TEST_JOB"]).parent / "out"))
    assert scored.filter(pl.col("dt") == NIGHT).height == ROWS  # {{ ds }} is the partition

    # The cap: failed on its first try, though three retries were allowed; its summary kept.
    assert tries["capped"] == ("failed", 1)
    capped = airflow.xcom("nightly", "capped")
    assert capped["cost_usd"] <= CAP and 0 < capped["requests"] < ROWS
    assert paid == ROWS + capped["requests"]  # the cap was spent once

    # Lineage sent once, by Airflow's provider, with the run's corpus and table.
    events = lineage_events(airflow.home / "lineage.jsonl")
    [complete] = [e for e in events if e["eventType"] == "COMPLETE"
                  and e["job"]["name"] == "nightly.score"]  # fmt: skip
    assert complete["inputs"][0]["name"].endswith("score/in.parquet")
    assert complete["outputs"][0]["name"].endswith("score/out")
    assert complete["outputs"][0]["outputFacets"]["outputStatistics"]["rowCount"] == ROWS
    assert "schema" in complete["outputs"][0]["facets"]
    assert lineage_events(airflow.home / "own-lineage.jsonl") == []


def test_a_task_killed_mid_run_and_run_again_pays_nothing_twice_beyond_what_was_in_flight(
    airflow: Airflow, tmp_path: Path
) -> None:
    """SIGKILL to the task's process (it runs in `airflow dags test`'s) and to its workers on
    the session's Ray, once a third of the rows were paid for; then the same task for the same
    night again. Rows committed or journaled before the kill are not sent again: what is paid
    twice is at most what was in flight (16) and what came back in the last moments."""
    with embedded(latency=0.2, rpm=6000) as slow:
        write_job(Path(airflow.env["EVALPIPE_TEST_SLOW"]).parent, slow.base_url, SLOW_ROWS,
                  limits={"requests_per_minute": 6000}, concurrency={"max_in_flight": 8},
                  cache={"enabled": False})  # fmt: skip
        first = airflow.start("dags", "test", "killed", NIGHT, log=tmp_path / "first.log")
        deadline = time.monotonic() + 180  # a guard against a hang, not a speed requirement
        while accepted(slow) < SLOW_ROWS // 3:
            assert first.poll() is None, (tmp_path / "first.log").read_text()[-3000:]
            assert time.monotonic() < deadline, (tmp_path / "first.log").read_text()[-3000:]
            time.sleep(0.05)
        kill_9_joined(first)
        paid_before = accepted(slow)
        assert paid_before < SLOW_ROWS  # killed mid-run

        airflow.run("dags", "test", "killed", NIGHT)
        paid = accepted(slow)

    assert airflow.tries("killed")["score"] == ("success", 1)
    summary = airflow.xcom("killed", "score")
    table = pl.read_delta(str(Path(airflow.env["EVALPIPE_TEST_SLOW"]).parent / "out"))
    assert sorted(table.filter(pl.col("dt") == NIGHT)["id"].to_list()) == list(range(SLOW_ROWS))
    skipped = summary["rows_skipped_committed_earlier"]
    paid_twice = paid - SLOW_ROWS
    assert skipped >= paid_before - 40  # what the killed try paid for, but for the last moments
    assert 0 <= paid_twice == paid_before - skipped <= 40, (paid_before, paid, skipped)
