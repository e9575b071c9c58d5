"""Hosts that share nothing but the tier: `evalpipe run` processes, each with a home and a cache
folder of its own, on one key, against one service and one redis-server.

They join the session's Ray (`--ray-address`: a Ray of their own costs each ~5 s, and what is
shown here, the answers, the claims and the lease, goes through the tier, not Ray); the pace
across hosts on Rays of their own is bench/shared_tier.py's (figures in bench/RESULTS.md). A host
whose output or exit is what is checked, and which is not the one killed, runs in this process
as that host (`here`: its cache folder), sparing it the imports and Ray workers of a process of
its own; beside another host, once that one is sending. A dead host's lease is waited out by
watching it leave the tier, not by sleeping longer than it."""

from __future__ import annotations

import json
import os
import secrets
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

from conftest import API_KEY, Redis, _s3_environment, cli_run, embedded, job_config

pytestmark = [pytest.mark.subprocess, pytest.mark.ray]
EVALPIPE = str(Path(sys.executable).with_name("evalpipe"))


def corpus(folder: Path, rows: int) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    texts = [{"id": i, "text": f"Review {i}: the kettle {'works' if i % 3 else 'broke'}."}
             for i in range(rows)]  # fmt: skip
    pq.write_table(pa.Table.from_pylist(texts), folder / "in.parquet")
    return folder


LEASE = 3.0  # `shared.lease_seconds` of these hosts: a dead host's output is free this soon


def host(
    tmp: Path,
    name: str,
    base_url: str,
    tier: str,
    output: str | None = None,
    rpm: int = 60_000,
    lease: float | None = LEASE,
) -> Path:
    """A host's config: its own folder (home, cache); the corpus in `tmp`; `output` else its own;
    `rpm` its requests per minute; `lease` its `shared.lease_seconds` (None: the default)."""
    folder = tmp / name
    (folder / "cache").mkdir(parents=True)
    shared: dict[str, Any] = {"url": tier}
    if lease is not None:
        shared["lease_seconds"] = lease
    config = job_config(tmp, base_url, shared=shared, limits={"requests_per_minute": rpm})
    config["output"] = {"path": output or str(folder / "out")}
    config["concurrency"] = {"actors": 1}  # each host's actors are new Ray workers: one will do
    (folder / "job.yaml").write_text(yaml.safe_dump(config))
    return folder


def start(folder: Path, key: str, ray: str, extra: dict[str, str] | None = None) -> Any:
    """The host's `evalpipe run`, on the session's Ray (whose token stays where Ray keeps it)."""
    token = Path.home() / ".ray" / "auth_token"
    env = {**os.environ, "HOME": str(folder), "XDG_CACHE_HOME": str(folder / "cache"),
           "EVAL_API_KEY": key, "RAY_AUTH_TOKEN_PATH": str(token), **(extra or {})}  # fmt: skip
    command = [EVALPIPE, "run", str(folder / "job.yaml"), "--ray-address", ray,
               "--log-format", "json"]  # fmt: skip
    return subprocess.Popen(
        command, env=env, stderr=subprocess.PIPE, text=True, start_new_session=True
    )


def ended(process: Any) -> tuple[int, list[dict[str, Any]]]:
    _, err = process.communicate(timeout=300)  # a guard against a hang, not a bound
    events = [json.loads(line) for line in err.splitlines() if line.startswith("{")]
    return process.returncode, events


def ids(output: Path) -> list[int]:
    return sorted(pq.read_table(output, columns=["id"]).column(0).to_pylist())


def here(folder: Path, monkeypatch: pytest.MonkeyPatch, *options: str, **env: str) -> Any:
    """The host's `evalpipe run` in this process (on the session's Ray, `cli_run`: no imports
    and no Ray workers of its own to start), as that host: its cache folder, and `env`."""
    for name, value in {**env, "XDG_CACHE_HOME": str(folder / "cache")}.items():
        monkeypatch.setenv(name, value)
    return cli_run(folder / "job.yaml", *options)


def refused_here(folder: Path, monkeypatch: pytest.MonkeyPatch, **env: str) -> Any:
    """`here` for a run that is to be refused: its result (exit code, JSON log), whatever its
    exit."""
    from click.testing import CliRunner

    from evalpipe.cli.main import main

    for name, value in {**env, "XDG_CACHE_HOME": str(folder / "cache")}.items():
        monkeypatch.setenv(name, value)
    args = ["run", str(folder / "job.yaml"), "--log-format", "json"]
    return CliRunner().invoke(main, args)


def lapsed(server: Redis, output: str) -> None:
    """Until the lease on `output` is gone from the tier (a host that holds it frozen, cut off
    or dead: it lapses `LEASE` after its last renewal), rather than sleeping a lease and more."""
    from evalpipe.tier.lease import lease_key

    client, key = server.client(), lease_key(output.rstrip("/"))
    deadline = time.monotonic() + 120  # a guard against a hang, not a bound
    while client.exists(key):
        assert time.monotonic() < deadline, "the lease never lapsed"
        time.sleep(0.05)
    client.close()


def test_two_hosts_at_once_pay_each_state_once_and_a_fresh_one_sends_nothing(
    tmp_path: Path, redis_server: Redis, ray_address: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    corpus(tmp_path, 120)
    key = API_KEY  # the account is this test's alone: its service's origin is in the prefix
    with embedded(latency=0.05, rpm=3000) as service:  # the hosts keep to it: no 429s
        # the default lease: the claims (as long, at most) outlast a loaded machine's pauses,
        # so no state is paid twice for a claim that lapsed while its host was alive
        a, b = (host(tmp_path, n, service.base_url, redis_server.url, rpm=3000, lease=None)
                for n in "ab")  # fmt: skip
        first = start(a, key, ray_address)  # a process of its own
        while service.stats()["requests_accepted"] < 1:  # it sends: b starts beside it
            assert first.poll() is None, ended(first)
            time.sleep(0.02)
        here(b, monkeypatch)  # in this process, as host b: it exits 0
        rc, events = ended(first)
        assert rc == 0, events
        paid = service.stats()["requests_accepted"]
        assert paid == 120  # each distinct state once, by one host or the other
        fresh = host(tmp_path, "c", service.base_url, redis_server.url, lease=None)
        result = here(fresh, monkeypatch, "--log-format", "json")
        assert service.stats()["requests_accepted"] == paid  # it sent nothing
    for name in "abc":
        assert ids(tmp_path / name / "out") == list(range(120))
    events = [json.loads(line) for line in result.stderr.splitlines() if line.startswith("{")]
    summary = next(e for e in events if e["event"] == "summary")
    assert summary["rows_from_cache"] == 120


def test_a_tier_killed_mid_run_is_a_warning_and_every_row_comes_once(
    tmp_path: Path, ray_address: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The host runs in this process (`here`: it exits 0), the tier is killed by a thread once
    the run was paid 30 of its 150 rows."""
    corpus(tmp_path, 150)
    server = Redis(tmp_path).start()
    killed, done = threading.Event(), threading.Event()
    try:
        with embedded(latency=0.05, rpm=3000) as service:
            folder = host(tmp_path, "a", service.base_url, server.url, rpm=3000)  # 3 s of it

            def kill_the_tier() -> None:
                while not done.is_set():
                    if service.stats()["requests_accepted"] >= 30:
                        server.stop()
                        killed.set()
                        return
                    time.sleep(0.05)

            watcher = threading.Thread(target=kill_the_tier, name="kill-the-tier")
            watcher.start()
            try:
                result = here(folder, monkeypatch, "--log-format", "json")
            finally:
                done.set()
                watcher.join()
    finally:
        server.stop()
    assert killed.is_set()  # mid-run: the run went on to answer every row
    events = [json.loads(line) for line in result.stderr.splitlines() if line[:1] == "{"]
    warnings = [e["message"] for e in events if e["event"] == "warning"]
    assert any("shared tier" in w and "lost" in w for w in warnings), warnings
    assert ids(folder / "out") == list(range(150))


def test_a_second_host_on_a_held_output_exits_9_then_runs_once_the_lease_lapses(
    tmp_path: Path,
    redis_server: Redis,
    ray_address: str,
    s3_endpoint: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    corpus(tmp_path, 150)  # the first host dies once the second exits 9: rows cost little
    output = f"s3://tables/tier-{secrets.token_hex(4)}/out"  # a store: no OS lock in common
    key, env = API_KEY, _s3_environment(s3_endpoint)
    with embedded(latency=0.05, rpm=600) as service:  # 15 s of sending: still running
        first = host(tmp_path, "a", service.base_url, redis_server.url, output)
        second = host(tmp_path, "b", service.base_url, redis_server.url, output)
        running = start(first, key, ray_address, env)
        while service.stats()["requests_accepted"] < 5 and running.poll() is None:
            time.sleep(0.05)
        refused = refused_here(second, monkeypatch, **env)  # its exit and log are checked
        assert refused.exit_code == 9, refused.output[-3000:]
        events = [json.loads(line) for line in refused.stderr.splitlines() if line[:1] == "{"]
        error = next(e for e in events if e["event"] == "error")
        assert error["error_type"] == "OutputLocked" and "shared tier" in error["message"]
        sent = service.stats()["requests_accepted"]
        os.killpg(running.pid, signal.SIGKILL)  # the first host dies: its lease lapses
        running.wait()
        service.set_limits(rpm=10_000_000)  # the rest goes quickly
        lapsed(redis_server, output)
        here(second, monkeypatch, **env)  # the second host again: it exits 0
        assert service.stats()["requests_accepted"] >= sent
