"""The job on a multi-node Ray cluster: three nodes simulated on this machine.

One `ray.cluster_utils.Cluster` for the module (a head and two worker nodes, one CPU each; the
job's actors take no CPU), in a Ray temp folder of its own so that no other Ray on the machine
joins it by `address="auto"`. The jobs run against the embedded service; their output is read
back and checked against the service's own answers, and Ray's actor table (the GCS's record
of where each actor ran) tells where the Budget and the workers were placed.

What must hold: the workers spread over the nodes, one Budget on the driver's node serves
them, and a worker node removed mid-run loses nothing and stops nothing: its chunks go to
workers on the other nodes, no replacement is placed on the lost node, and the run finishes
with every row exactly once. Rates are measured by bench/job_cluster.py, not here.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

from conftest import API_KEY, CLIENT, QUESTIONS, embedded, job_config, own_ray, run_config
from evalpipe.config import parse_config
from evalpipe.engine.summary import format_summary
from evalpipe.limits.account import account_name
from evalpipe.limits.placement import choose_node
from evalpipe.send.fleet import sizes

NODES = 3


@pytest.fixture(scope="module")
def cluster() -> Iterator[Any]:
    os.environ["EVAL_API_KEY"] = API_KEY  # the nodes' processes inherit it, as on a real cluster
    temp = tempfile.mkdtemp(prefix="evp-ray-", dir="/tmp")  # short: Ray puts sockets in it
    with own_ray():
        yield from _cluster(temp)


def _cluster(temp: str) -> Iterator[Any]:
    import ray
    from ray.cluster_utils import Cluster

    node = {"num_cpus": 1, "temp_dir": temp}
    head = {**node, "include_dashboard": False, "include_log_monitor": False, "no_monitor": True}
    started = Cluster(initialize_head=True, head_node_args=head)  # as the session's (conftest)
    for _ in range(NODES - 1):
        started.add_node(wait=False, **node)  # the worker nodes start side by side
    started.wait_for_nodes()
    ray.init(address=started.address, logging_level="ERROR", log_to_driver=False)
    yield started
    ray.shutdown()
    started.shutdown()
    shutil.rmtree(temp, ignore_errors=True)


def write_corpus(path: Path, n: int) -> list[dict[str, Any]]:
    rows = [
        {"id": i, "text": f"Review {i}: the {['lamp', 'kettle'][i % 2]} works."} for i in range(n)
    ]
    pq.write_table(pa.Table.from_pylist(rows), path)
    return rows


def cluster_config(
    tmp: Path, base_url: str, rpm: float, actors: int = NODES, **concurrency: int
) -> dict[str, Any]:
    limits = {"requests_per_minute": rpm}
    return job_config(tmp, base_url, limits=limits, concurrency={"actors": actors, **concurrency})


def check_output(tmp: Path, rows: list[dict[str, Any]], service: Any) -> int:
    """Every row exactly once, answered as the service answers its state when asked (a
    sample, asked all at once: the service may be a slow one); returns how many it asked."""

    df = pl.read_parquet(tmp / "out" / "part-*.parquet").sort("id")
    assert df["id"].to_list() == [r["id"] for r in rows]
    assert df["_error_type"].null_count() == len(rows)
    sample = df.filter(pl.col("id") % 37 == 0).to_dicts()

    def ask(row: dict[str, Any]) -> dict[str, Any]:
        body = {"state": rows[row["id"]]["text"], "model": "model-1.13.0", "questions": QUESTIONS}
        auth = {"Authorization": f"Bearer {API_KEY}"}
        reply = CLIENT.post(f"{service.base_url}/v1/evaluate", json=body, headers=auth, timeout=30)
        return dict(reply.json()["answers"])

    with ThreadPoolExecutor(len(sample)) as pool:
        replies = list(pool.map(ask, sample))
    for row, answers in zip(sample, replies, strict=True):
        assert row["helpful__p_true"] == answers["helpful"]["noul"]
        assert row["sentiment__choice"] == answers["sentiment"]["choice"]
        assert row["quality__score"] == answers["quality"]["score"]
    return len(sample)


def actors_of(job: str, base_url: str) -> dict[str, list[str]]:
    """Ray's record of where the actors of Ray job `job` (one driver's) ran, and the Budget of
    its account (the service at `base_url`, the test key): {"workers": [node, ...] in start
    order, "budgets": [node, ...]}. Workers by job, because a driver elsewhere on the machine
    that joins with `address="auto"` may start its own actors here."""
    import ray

    everyone = ray._private.state.actors().values()
    table = [a for a in everyone if a["JobID"] == job]
    workers = sorted(
        (a for a in table if a["ActorClassName"] == "Worker"),
        key=lambda a: int(a["Name"].rsplit("-", 1)[1]),
    )
    account = account_name(base_url, API_KEY)
    budgets = [a for a in everyone if a["Name"] == account and a["State"] == "ALIVE"]
    return {
        "workers": [a["Address"]["NodeID"] for a in workers],
        "budgets": [a["Address"]["NodeID"] for a in budgets],
    }


def job_of(pid: int) -> str:
    """The Ray job id of the driver process `pid`."""
    import ray

    (job,) = [j["JobID"] for j in ray._private.state.jobs() if j["DriverPid"] == pid]
    return str(job)


def test_workers_spread_over_the_nodes_and_the_budget_stays_with_the_driver(
    cluster: Any, tmp_path: Path
) -> None:
    """`evalpipe run --ray-address`, as a user joins a cluster: the workers run one per node,
    the one Budget runs on the driver's node, the JSON summary says so, every row once."""
    rows = write_corpus(tmp_path / "in.parquet", 120)
    with embedded(rpm=6000, tps=10_000_000) as service:
        config = tmp_path / "job.yaml"
        config.write_text(yaml.safe_dump(cluster_config(tmp_path, service.base_url, rpm=6000)))
        env = {**os.environ, "EVAL_API_KEY": API_KEY}
        env.pop("RAY_ADDRESS", None)
        command = [str(Path(sys.executable).with_name("evalpipe")), "run", str(config)]
        command += ["--ray-address", cluster.address, "--log-format", "json"]
        run = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        _, err = run.communicate(timeout=240)
        assert run.returncode == 0, err.decode()[-3000:]
        asked = check_output(tmp_path, rows, service)
        assert service.stats()["requests_accepted"] == len(rows) + asked  # each row sent once
    events = [json.loads(line) for line in err.decode().splitlines() if line.startswith("{")]
    summary = next(e for e in events if e["event"] == "summary")
    assert (summary["workers"], summary["nodes"], summary["actor_restarts"]) == (NODES, NODES, 0)
    assert summary["rows_answered"] == len(rows)

    placed = actors_of(job_of(run.pid), service.base_url)
    nodes = {node.node_id for node in cluster.list_all_nodes()}
    assert sorted(placed["workers"]) == sorted(nodes)  # one worker on each node
    # The driver joined the head node (the address it was given): the Budget runs there.
    assert set(placed["budgets"]) == {cluster.head_node.node_id}


def test_a_worker_node_lost_mid_run_loses_nothing_and_stops_nothing(
    cluster: Any, tmp_path: Path
) -> None:
    """A worker node goes away after a third of the answers: its worker's chunks go to the
    workers on the other nodes, its replacement is placed on a live node, the run finishes
    (no exception: exit 0) with every row exactly once. (The module's last test: the node
    stays gone.)"""
    import ray

    rows = write_corpus(tmp_path / "in.parquet", 240)
    head = cluster.head_node.node_id
    victim = next(n for n in cluster.list_all_nodes() if n.node_id != head)
    removed = threading.Event()

    # 100 requests a second, each 0.2 s: the run lasts about 2.5 s. A worker holds at most 24
    # requests in flight and 5 chunks of 8 rows, so the 240 rows are spread over the three
    # workers and each still holds rows not yet answered when the node goes.
    with embedded(rpm=6000, tps=10_000_000, latency=0.2) as service:

        def remove_a_node() -> None:
            while service.stats()["requests_accepted"] < len(rows) // 3:
                time.sleep(0.02)
            cluster.remove_node(victim)
            removed.set()

        threading.Thread(target=remove_a_node, daemon=True).start()
        config = cluster_config(tmp_path, service.base_url, rpm=6000, max_in_flight=24)
        summary = run_config(config)
        assert removed.is_set()
        paid = service.stats()["requests_accepted"]
        check_output(tmp_path, rows, service)

    assert summary["rows_answered"] == len(rows)
    assert summary["actor_restarts"] == 1  # the lost node's one worker, replaced once
    assert (summary["workers"], summary["nodes"]) == (NODES + 1, NODES)
    assert "workers       4 on 3 nodes, 1 of them replacing workers that died" in format_summary(
        summary
    )
    # this process is the driver
    placed = actors_of(ray.get_runtime_context().get_job_id(), service.base_url)
    assert placed["workers"][:NODES].count(victim.node_id) == 1
    assert victim.node_id not in placed["workers"][NODES:]  # the replacement went elsewhere
    assert set(placed["budgets"]) == {head}
    # What the lost node's worker held (its chunks not yet reported: in flight, or answered
    # within the last moments before the node went) was sent again, nothing more.
    chunk, _, outstanding = sizes(parse_config(config))
    assert len(rows) <= paid <= len(rows) + chunk * outstanding


def test_workers_go_to_the_least_loaded_live_node_the_drivers_last() -> None:
    alive = ["head", "a", "b"]
    assert choose_node(alive, [], "head") == "a"
    assert choose_node(alive, ["a"], "head") == "b"
    assert choose_node(alive, ["a", "b"], "head") == "head"
    assert choose_node(alive, ["a", "b", "head", None], "head") == "a"  # None: not yet known
    assert choose_node(["head", "b"], ["a", "b"], "head") == "head"  # "a" is dead: not chosen
