"""`evalpipe.airflow` in a real Airflow 3: a metadata database (`airflow db migrate`), a dags
folder, then `airflow dags test`, which serializes the DAG, runs the tasks in its own process
against embedded services and joins the session's Ray. What is checked is what Airflow kept (its
database: task states, tries, XComs), what its OpenLineage provider sent (a file transport), the
tables, and the services' counters.

An `airflow dags test` costs ~25 s on an idle machine, so the module makes one, for one night,
that shows every point: the first task scores a corpus (its XCom is the summary; its lineage is
sent by Airflow alone); the second runs the same job for the same night again and pays nothing;
the third reaches a cost cap (failed once though `retries=3`); the fourth resumes a run of its
job for that night that was killed with SIGKILL mid-run (an `evalpipe run` on the session's
Ray, as a worker's death would leave it) and pays again for no more than what was in flight.
The DAG file's import (Airflow's parse) brings none of what only a run needs.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import os
import sqlite3
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from dataclasses import dataclass
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

EVALPIPE = str(Path(sys.executable).with_name("evalpipe"))

# Whether Airflow is installed, not imported: its import (~1 s) would cost every collection.
pytestmark = [
    pytest.mark.skipif(
        importlib.util.find_spec("airflow") is None,
        reason="the scheduler extras: `make test` installs them",
    ),
    pytest.mark.schedulers, pytest.mark.subprocess, pytest.mark.ray,
]  # fmt: skip

NIGHT = "2026-11-27"
ROWS = 30
SLOW_ROWS = 150  # 0.2 s a request, 16 in flight: ~2 s of sending, so the kill comes mid-run
PRICE = 100.0  # dollars per million tokens: about a cent a request
CAP = 0.05  # dollars: a few requests
IN_FLIGHT = 2 * 8  # two workers, `concurrency.max_in_flight: 8` each
LAST_MOMENTS = 24  # answers back within the last ~0.2 s before the kill, not yet journaled

DAGS = textwrap.dedent(
    """\
    import os
    import sys
    from datetime import timedelta

    import pendulum
    from airflow.sdk import DAG

    from evalpipe.airflow import EvalpipeOperator

    START = pendulum.datetime(2026, 11, 1, tz="UTC")
    RAY = os.environ["EVALPIPE_TEST_RAY"]
    ANYWAY = "all_done"  # the slow task runs after the capped one failed
    PARSED = ",".join(sorted(m for m in sys.modules if m.startswith("evalpipe.session")))

    with DAG("nightly", schedule=None, start_date=START, catchup=False,
             description=f"evalpipe.session at parse: [{PARSED}]"):
        score = EvalpipeOperator(task_id="score", config=os.environ["EVALPIPE_TEST_JOB"],
                                 partition={"dt": "{{ ds }}"}, ray_address=RAY, retries=2)
        rescore = EvalpipeOperator(task_id="rescore", config=os.environ["EVALPIPE_TEST_JOB"],
                                   partition={"dt": "{{ ds }}"}, ray_address=RAY, retries=2)
        capped = EvalpipeOperator(task_id="capped", config=os.environ["EVALPIPE_TEST_CAPPED"],
                                  partition={"dt": "{{ ds }}"}, max_cost="{{ params.cap }}",
                                  params={"cap": CAP_USD}, ray_address=RAY, retries=3,
                                  retry_delay=timedelta(seconds=0))
        slow = EvalpipeOperator(task_id="slow", config=os.environ["EVALPIPE_TEST_SLOW"],
                                partition={"dt": "{{ ds }}"}, ray_address=RAY, retries=2,
                                trigger_rule=ANYWAY)
        score >> rescore >> capped >> slow
    """
).replace("CAP_USD", repr(CAP))


def write_job(folder: Path, base_url: str, rows: int, cached: bool = False, **changes: Any) -> Path:
    """The job, without an answer cache (the jobs score the same texts, and what each paid is
    counted), or with one of its own (in its folder) when `cached`."""
    folder.mkdir(parents=True)
    data = [{"id": i, "text": f"Review {i}: it {'works' if i % 3 else 'broke'} on day {i}."}
            for i in range(rows)]  # fmt: skip
    pq.write_table(pa.Table.from_pylist(data), folder / "in.parquet")
    cache = {"enabled": True, "path": str(folder / "cache")} if cached else {"enabled": False}
    config = job_config(
        folder, base_url, output={"format": "delta"}, pricing={"default": PRICE}, cache=cache,
        **changes,
    )  # fmt: skip
    path = folder / "job.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


class Airflow:
    """An Airflow home of the module's own: its environment, commands and database."""

    def __init__(self, home: Path, env: dict[str, str]) -> None:
        self.home, self.env = home, env
        self.migrating: subprocess.Popen[bytes] | None = None  # `airflow db migrate`

    def migrated(self) -> None:
        """Wait for the database's migration, which must have succeeded."""
        if self.migrating is not None:
            code = self.migrating.wait(timeout=900)
            assert code == 0, (self.home / "migrate.log").read_text()[-3000:]
            self.migrating = None

    def command(self, *args: str) -> list[str]:
        return [str(Path(sys.executable).with_name("airflow")), *args]

    def run(self, *args: str, timeout: float = 900) -> subprocess.CompletedProcess[str]:
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


def accepted(service: EmbeddedService) -> int:
    return int(service.stats()["requests_accepted"])


def lineage_events(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


@dataclass
class Night:
    """What the night's `airflow dags test` left: its task states and tries and XComs, what the
    session's service was paid, and what the slow service was paid by the killed run and in all."""

    airflow: Airflow
    tries: dict[str, tuple[str, int]]
    xcoms: dict[str, Any]
    paid: int  # the session's service: score, rescore and capped
    slow_paid_at_kill: int
    slow_paid: int  # the slow service: the killed run and the task's

    def table(self, job: str) -> pl.DataFrame:
        out = Path(self.airflow.env[job]).parent / "out"
        return pl.read_delta(str(out)).filter(pl.col("dt") == NIGHT)


@pytest.fixture(scope="module")
def airflow(ray_address: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Airflow]:
    """A migrated database and the dags folder serialized; the jobs are written by `night`."""
    home = tmp_path_factory.mktemp("airflow")
    (home / "dags").mkdir()
    (home / "dags" / "evalpipe_dags.py").write_text(DAGS)
    (home / "own-lineage.yml").write_text(  # where the run's own events would go: never used
        f"transport: {{type: file, log_file_path: {home / 'own-lineage.jsonl'}, append: true}}\n"
    )
    jobs = home / "jobs"
    env = {
        **os.environ,
        "AIRFLOW_HOME": str(home),
        "AIRFLOW__CORE__DAGS_FOLDER": str(home / "dags"),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__OPENLINEAGE__TRANSPORT": json.dumps(
            {"type": "file", "log_file_path": str(home / "lineage.jsonl"), "append": True}
        ),
        # The provider's events from a thread, not a fork of the task's process (which holds
        # Ray's driver) per event: the how-to's advice (docs/how-to/schedulers.md).
        "AIRFLOW__OPENLINEAGE__EXECUTE_IN_THREAD": "True",
        "OPENLINEAGE_CONFIG": str(home / "own-lineage.yml"),
        "EVAL_API_KEY": API_KEY,
        "EVALPIPE_TEST_RAY": ray_address,
        "EVALPIPE_TEST_JOB": str(jobs / "score" / "job.yaml"),
        "EVALPIPE_TEST_CAPPED": str(jobs / "capped" / "job.yaml"),
        "EVALPIPE_TEST_SLOW": str(jobs / "slow" / "job.yaml"),
    }
    env.pop("RAY_ADDRESS", None)
    flow = Airflow(home, env)
    # `dags test` serializes the DAG itself; the migration runs while `night` kills its run
    flow.migrating = flow.start("db", "migrate", log=home / "migrate.log")
    yield flow
    if flow.migrating is not None:  # no test waited for it
        flow.migrating.kill()
        flow.migrating.wait()


def _xcoms(airflow: Airflow) -> dict[str, Any]:
    found = airflow.rows("SELECT task_id, value FROM xcom WHERE dag_id = 'nightly' "
                         "AND key = 'return_value'")  # fmt: skip
    return {task: json.loads(value) for task, value in found}


def killed_mid_run(job: Path, slow: EmbeddedService, ray_address: str, log: Path) -> int:
    """`evalpipe run` of `job` for the night (the partition the task renders), on the session's
    Ray, killed with SIGKILL with its workers once it paid for a third of its rows, as a dead
    Airflow worker's task would be; what the slow service had accepted then."""
    env = {**os.environ, "EVAL_API_KEY": API_KEY}
    env.pop("RAY_ADDRESS", None)
    command = [EVALPIPE, "run", str(job), "--ray-address", ray_address,
               "--set", f"output.partition.dt={json.dumps(NIGHT)}"]  # fmt: skip
    with log.open("wb") as out:
        run = subprocess.Popen(command, env=env, stdout=out, stderr=subprocess.STDOUT,
                               start_new_session=True)  # fmt: skip
    deadline = time.monotonic() + 300  # a guard against a hang, not a speed requirement
    while accepted(slow) < SLOW_ROWS // 3:
        assert run.poll() is None, log.read_text()[-3000:]
        assert time.monotonic() < deadline, log.read_text()[-3000:]
        time.sleep(0.02)
    kill_9_joined(run)
    return accepted(slow)


@pytest.fixture(scope="module")
def night(
    airflow: Airflow, service: EmbeddedService, ray_address: str,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Night]:  # fmt: skip
    """The slow job's run for the night killed mid-run, then the night's DAG run once: score,
    rescore (the same job again), capped, and slow (which resumes the killed run)."""
    with embedded(latency=0.2, rpm=6000) as slow:
        env = airflow.env
        one = {"actors": 1}  # one worker: several are the slow job's point, not theirs
        # score's job keeps its answers (as a job does by default), so that rescore, which finds
        # every row committed, starts no Ray worker: a run whose first rows the cache answers
        # starts Ray only when a request is due. What it skips, the table says it had.
        write_job(Path(env["EVALPIPE_TEST_JOB"]).parent, service.base_url, ROWS, cached=True,
                  concurrency=one)  # fmt: skip
        write_job(Path(env["EVALPIPE_TEST_CAPPED"]).parent, service.base_url, ROWS,
                  concurrency=one)  # fmt: skip
        slow_job = write_job(
            Path(env["EVALPIPE_TEST_SLOW"]).parent, slow.base_url, SLOW_ROWS,
            limits={"requests_per_minute": 6000}, concurrency={"max_in_flight": 8},
        )  # fmt: skip
        log = tmp_path_factory.mktemp("night") / "killed.log"
        at_kill = killed_mid_run(slow_job, slow, ray_address, log)
        airflow.migrated()
        before = accepted(service)
        airflow.run("dags", "test", "nightly", NIGHT)
        yield Night(airflow, airflow.tries("nightly"), _xcoms(airflow),
                    accepted(service) - before, at_kill, accepted(slow))  # fmt: skip


def test_a_dag_scores_a_corpus_and_its_xcom_holds_the_summary(night: Night) -> None:
    assert night.tries["score"] == ("success", 1)
    summary = night.xcoms["score"]
    assert summary["rows_total"] == ROWS and summary["rows_answered"] == ROWS
    assert summary["requests"] == ROWS and summary["rows_in_error"] == {}
    assert summary["input_tokens"] > 0
    assert summary["cost_usd"] == pytest.approx(summary["input_tokens"] * PRICE / 1e6)
    assert sorted(night.table("EVALPIPE_TEST_JOB")["id"].to_list()) == list(range(ROWS))


def test_a_cost_cap_reached_is_not_retried(night: Night) -> None:
    """Failed on its first try though three retries were allowed, its summary kept; the cap
    was spent once."""
    assert night.tries["capped"] == ("failed", 1)
    capped = night.xcoms["capped"]
    assert 0 < capped["requests"] < ROWS and capped["cost_usd"] <= CAP
    assert night.paid == ROWS + capped["requests"]  # score's, then the cap's (rescore: none)


def test_lineage_is_sent_once_by_airflow_with_the_runs_datasets(night: Night) -> None:
    home = night.airflow.home
    events = lineage_events(home / "lineage.jsonl")
    completes = [
        e for e in events if e["eventType"] == "COMPLETE" and e["job"]["name"] == "nightly.score"
    ]
    [complete] = completes  # one task, one try: one event
    [corpus], [table] = complete["inputs"], complete["outputs"]
    assert corpus["name"].endswith("score/in.parquet") and corpus["namespace"] == "file"
    assert table["name"].endswith("score/out")
    assert table["outputFacets"]["outputStatistics"]["rowCount"] == ROWS
    assert "sentiment__choice" in {f["name"] for f in table["facets"]["schema"]["fields"]}
    assert lineage_events(home / "own-lineage.jsonl") == []  # the run sent none of its own
    # The provider sent them from a thread, as the how-to advises.
    advised = "`AIRFLOW__OPENLINEAGE__EXECUTE_IN_THREAD`"
    assert night.airflow.env[advised.strip("`")] == "True"
    assert advised in (Path(__file__).parents[1] / "docs" / "how-to" / "schedulers.md").read_text()


def test_a_task_resuming_a_run_killed_mid_run_pays_nothing_twice_beyond_what_was_in_flight(
    night: Night,
) -> None:
    """Rows committed or journaled before the kill are not sent again: what is paid twice is
    at most what was in flight and what came back in the last moments before the kill."""
    assert SLOW_ROWS // 3 <= night.slow_paid_at_kill < SLOW_ROWS  # killed mid-run
    assert night.tries["slow"] == ("success", 1)
    summary = night.xcoms["slow"]
    skipped = summary["rows_skipped_committed_earlier"]
    assert 0 < skipped < SLOW_ROWS  # it resumed the killed run, for the night the task rendered
    paid_twice = night.slow_paid - SLOW_ROWS
    assert 0 <= paid_twice == night.slow_paid_at_kill - skipped, (night.slow_paid, skipped)
    assert paid_twice <= IN_FLIGHT + LAST_MOMENTS, (night.slow_paid_at_kill, skipped)
    assert summary["requests"] == SLOW_ROWS - skipped
    assert sorted(night.table("EVALPIPE_TEST_SLOW")["id"].to_list()) == list(range(SLOW_ROWS))


def test_a_finished_task_run_again_for_the_same_night_pays_nothing(night: Night) -> None:
    assert night.tries["rescore"] == ("success", 1)
    summary = night.xcoms["rescore"]
    assert summary["requests"] == 0 and summary["input_tokens"] == 0
    assert summary["rows_skipped_committed_earlier"] == ROWS


def test_the_dag_files_import_leaves_the_run_to_the_task(night: Night) -> None:
    """Airflow parses a DAG file again and again: importing the operator brought none of what
    only a run needs (`evalpipe.session`), which the tasks then ran with."""
    [(description,)] = night.airflow.rows("SELECT description FROM dag WHERE dag_id = 'nightly'")
    assert description == "evalpipe.session at parse: []", description
    assert night.tries["score"] == ("success", 1)


def test_the_canary_rides_on_airflows_lineage_as_the_runs_facet(tmp_path: Path) -> None:
    """With Airflow's provider sending the task's events, the run sends none: the canary's
    result goes into the provider's run facets (`evalpipe_canary`), as the run's own would."""
    from evalpipe.airflow import EvalpipeOperator
    from evalpipe.engine import Datasets
    from evalpipe.session import Ran

    schema = pa.schema([("id", pa.int64()), ("text", pa.string())])
    canary = {"passed": True, "rows": 20, "answered": 20, "compared_with": "labels", "tests": []}
    operator = EvalpipeOperator(task_id="score", config=tmp_path / "job.yaml")
    operator._ran = Ran(
        exit_code=0, error=None, summary={"canary": canary}, summary_text="", rows_committed=3,
        table=str(tmp_path / "out"), partition={}, delta_version=None,
        datasets=Datasets(tmp_path / "in.parquet", schema, 3, tmp_path / "out", schema),
    )  # fmt: skip
    found = operator.get_openlineage_facets_on_complete(None)
    facet = found.run_facets["evalpipe_canary"]
    assert facet.passed is True and facet.rows == 20 and facet.compared_with == "labels"
    operator._ran = dataclasses.replace(operator._ran, summary={})
    assert operator.get_openlineage_facets_on_complete(None).run_facets == {}


def test_every_name_of_the_surface_resolves() -> None:
    """(test_layout leaves the extras' subpackages to their own tier.)"""
    import evalpipe.airflow

    assert all(hasattr(evalpipe.airflow, name) for name in evalpipe.airflow.__all__)
