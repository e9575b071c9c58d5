"""Scheduled runs, tried as a scheduler would: one run per output, SIGTERM and SIGINT, a second
signal, the process group stopped with the workers dying first, the JSON log, lineage, the
run history, --max-error-rate.

The signal tests run `evalpipe run` as a subprocess in a session of its own (as cron and
systemd start it) against the embedded service in a process of its own, with latency, so that
requests are in flight when the signal comes. The service's own counters tell what was paid.
Most runs join the session's Ray (`--ray-address`, as on a cluster); the one whose workers must
die in its own session starts a Ray of its own. A signal is sent on what the test sees (rows
journaled, requests accepted), never after a set time; the run that follows a stop, whose output
is what is checked, runs in this process with the job's pace lifted (`LIFTED`: the account's
limit is not what it tests). Each run has one worker (`actors: 1`): how many is not what these
tests test, and each is a process more.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import orjson
import polars as pl
import psutil
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml
from click.testing import CliRunner

from conftest import API_KEY, cli_run, embedded, job_config, shared_service
from evalpipe.cli.main import main
from evalpipe.engine.stopping import StopNow, StopSignals, through_ray
from evalpipe.output.lock import LOCK_NAME, hold, output_lock
from evalpipe.output.manifest import MANIFEST
from evalpipe.service import EmbeddedService

RPM = 3000
ROWS = 150  # 3 s at 3,000 RPM (after Ray's start): requests are in flight when a signal comes
SLOW = 10.0  # seconds a slow answer takes: far longer than two signals take to come
LIFTED = ("--set", "limits.requests_per_minute=600000")  # the rerun's pace: the service's own
SUMMARY_KEYS = {
    "rows_total",
    "rows_answered",
    "rows_in_error",
    "rows_reused_identical_state",
    "requests",
    "attempts",
    "retries",
    "rate_limited_429",
    "input_tokens",
    "cost_usd",
    "wall_seconds",
    "startup_seconds",
    "achieved_rpm",
    "achieved_tps",
    "models",
}


@pytest.fixture(scope="module")
def slow_service() -> Iterator[EmbeddedService]:
    """A service in its own process with 0.3 s of latency: requests are in flight for a while.
    Its own limit is far above a run's (the job's `RPM` paces a run; a rerun lifts it). The
    module's runs on the session's Ray share its account's Budget (`shared_service`)."""
    options = {"rpm": 100 * RPM, "tps": 10_000_000, "latency": 0.3}
    with shared_service(mode="process", **options) as service:
        yield service


def write_corpus(path: Path, n: int = ROWS) -> None:
    rows = [{"id": i, "text": f"Review {i}: it {'works' if i % 3 else 'broke'} on day {i}."}
            for i in range(n)]  # fmt: skip
    pq.write_table(pa.Table.from_pylist(rows), path)


def write_config(tmp: Path, base_url: str, rpm: float = RPM, **changes: Any) -> Path:
    """The job, with one worker."""
    changes = {"concurrency": {"actors": 1}, **changes}
    config = job_config(tmp, base_url, limits={"requests_per_minute": rpm}, **changes)
    path = tmp / "job.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def evalpipe(*args: str) -> list[str]:
    return [str(Path(sys.executable).with_name("evalpipe")), *args]


def start(args: list[str], err: Path) -> subprocess.Popen[bytes]:
    env = {**os.environ, "EVAL_API_KEY": API_KEY}
    env.pop("RAY_ADDRESS", None)
    with err.open("wb") as stderr:
        return subprocess.Popen(
            evalpipe(*args),
            stdout=subprocess.PIPE,
            stderr=stderr,
            env=env,
            start_new_session=True,
        )


def rerun(config: Path) -> None:
    """The same command again, in this process on the session's Ray (what is checked is the
    output), its pace lifted."""
    cli_run(config, *LIFTED)


def wait_until(condition: Callable[[], bool], process: subprocess.Popen[bytes], err: Path) -> None:
    deadline = time.monotonic() + 120  # a guard against a hang, not a speed requirement
    while not condition():
        if process.poll() is not None:
            raise AssertionError(f"the run ended too soon: {err.read_text()[-3000:]}")
        assert time.monotonic() < deadline, err.read_text()[-3000:]
        time.sleep(0.05)


def accepted(service: EmbeddedService) -> int:
    return int(service.stats()["requests_accepted"])


def exactly_once(out: Path, n: int = ROWS) -> pl.DataFrame:
    df = pl.read_parquet(out / "part-*.parquet").sort("id")
    assert df["id"].to_list() == list(range(n))
    return df


def clean(stderr: str) -> None:
    """What a stop may never print: a traceback, or Ray's native stack dump."""
    assert "Traceback" not in stderr, stderr[-3000:]
    assert "***" not in stderr and "SIGTERM received" not in stderr, stderr[-3000:]


def session_workers(leader: int) -> list[psutil.Process]:
    """The run's Ray workers: processes of its session outside its process group."""
    found = []
    for process in psutil.process_iter():
        with contextlib.suppress(psutil.Error, OSError):
            if os.getsid(process.pid) == leader and os.getpgid(process.pid) != leader:
                found.append(process)
    return found


# --------------------------------------------------------------------------- one run per output


def test_a_second_run_on_a_held_output_exits_9_before_touching_anything(
    service: EmbeddedService, tmp_path: Path
) -> None:
    write_corpus(tmp_path / "in.parquet", 20)
    config = write_config(tmp_path, service.base_url)
    out = tmp_path / "out"
    out.mkdir()
    (out / "keep.txt").write_text("the first run's")
    before_files = {p.name: p.stat().st_mtime_ns for p in out.iterdir()}
    before_requests = sum(service.stats()["responses"].values())
    with hold(output_lock(out), str(out)):  # the first run, still on
        for extra in ([], ["--restart"]):
            result = CliRunner().invoke(main, ["run", str(config), *extra])
            assert result.exit_code == 9, result.output
            line = result.output.strip().splitlines()[-1]
            assert line.startswith(f"OutputLocked: {out} is in use by pid {os.getpid()} on ")
            assert socket.gethostname() in line and " since " in line
    assert sum(service.stats()["responses"].values()) == before_requests  # not even a probe
    after = {p.name: p.stat().st_mtime_ns for p in out.iterdir()}
    assert after == before_files | {LOCK_NAME: after[LOCK_NAME]}  # nothing else touched


def test_two_runs_at_once_on_one_output_one_waits_out(
    service: EmbeddedService, ray_address: str, tmp_path: Path
) -> None:
    """The first run, a process of its own, holds the output; it is held still (SIGSTOP) from
    the moment it took the lock until the second has tried, so what the second finds does not
    depend on how fast the first goes. The second is the same command in this process."""
    rows = 30  # how many is not the point: the lock is taken before the first row
    write_corpus(tmp_path / "in.parquet", rows)
    config = write_config(tmp_path, service.base_url, rpm=60_000)
    first = start(["run", str(config), "--ray-address", ray_address], tmp_path / "first.err")
    lock = tmp_path / "out" / LOCK_NAME
    try:
        wait_until(lambda: lock.exists() and lock.stat().st_size > 0, first, tmp_path / "first.err")
        first.send_signal(signal.SIGSTOP)
        second = CliRunner().invoke(main, ["run", str(config)])
    finally:
        first.send_signal(signal.SIGCONT)
    assert second.exit_code == 9, second.output
    line = second.output.strip().splitlines()[-1]
    assert line.startswith(f"OutputLocked: {tmp_path / 'out'} is in use by pid {first.pid} on ")
    assert socket.gethostname() in line
    assert first.wait(timeout=240) == 0, (tmp_path / "first.err").read_text()[-3000:]
    exactly_once(tmp_path / "out", rows)


# --------------------------------------------------------------------------- SIGTERM, SIGINT


def test_sigterm_stops_cleanly_with_a_json_log_and_the_rerun_is_exactly_once(
    slow_service: EmbeddedService, ray_address: str, tmp_path: Path
) -> None:
    write_corpus(tmp_path / "in.parquet")
    config = write_config(tmp_path, slow_service.base_url)
    err = tmp_path / "run.err"
    before = accepted(slow_service)
    json_log = ["--log-format", "json", "--progress-interval", "0.5"]
    run = start(["run", str(config), *json_log, "--ray-address", ray_address], err)

    def journaled_some() -> bool:
        done = [json.loads(x) for x in err.read_text().splitlines() if '"progress"' in x]
        return bool(done) and done[-1]["rows_done"] >= ROWS // 5

    wait_until(journaled_some, run, err)
    run.send_signal(signal.SIGTERM)
    stdout, _ = run.communicate(timeout=120)
    assert run.returncode == 143, err.read_text()[-3000:]
    assert stdout == b""  # JSON form: nothing but JSON lines, and those on stderr
    text = err.read_text()
    clean(text)
    events = [json.loads(line) for line in text.splitlines()]  # every line is one object
    kinds = [e["event"] for e in events]
    assert kinds[0] == "start" and "progress" in kinds and kinds[-2:] == ["summary", "stopped"]
    assert len({e["run_id"] for e in events}) == 1 and all(e["time"].endswith("Z") for e in events)
    summary, stopped = events[-2], events[-1]
    assert set(summary) >= SUMMARY_KEYS
    assert stopped["signal"] == "SIGTERM" and stopped["exit_code"] == 143
    paid_first = accepted(slow_service) - before
    # Every request that was sent was let finish and journaled, then folded into parts.
    out = tmp_path / "out"
    assert not (out / "_journal.bin").exists()
    kept = pl.read_parquet(out / "part-*.parquet")
    assert kept.height == stopped["rows_committed"] == summary["rows_answered"]
    assert summary["requests"] == paid_first

    rerun(config)
    df = exactly_once(out)
    assert accepted(slow_service) - before == ROWS  # nothing paid twice
    runs = orjson.loads((out / MANIFEST).read_bytes())["runs"]
    assert [r["ended_how"] for r in runs] == ["stopped", "finished"]
    first_run = runs[0]["run_id"]
    assert first_run == events[0]["run_id"]
    assert set(df["_run_id"].unique()) == {first_run, runs[1]["run_id"]}
    assert df.filter(pl.col("_run_id") == first_run).height == kept.height
    assert df["_scored_at"].null_count() == 0


def test_a_second_signal_stops_at_once_with_the_journal_intact(
    slow_service: EmbeddedService, ray_address: str, tmp_path: Path
) -> None:
    write_corpus(tmp_path / "in.parquet")
    # A fifth of the answers take SLOW seconds: rows are journaled from the first answers on,
    # and once a slow one is drawn, a request is in flight when the second signal comes.
    service = slow_service
    slow_before = service.stats()["faults"]["slow"]
    service.set_faults(fault_slow=0.2, slow_seconds=SLOW)
    try:
        config = write_config(tmp_path, service.base_url, output={"path": str(tmp_path / "out")})
        err = tmp_path / "run.err"
        joined = ["--ray-address", ray_address]
        run = start(["run", str(config), "--progress-interval", "0.5", *joined], err)
        journal = tmp_path / "out" / "_journal.bin"

        def journaled_and_stuck() -> bool:
            stats = service.stats()
            stuck = stats["faults"]["slow"] > slow_before and stats["inflight"] > 0
            return stuck and journal.exists() and journal.stat().st_size > 2000

        wait_until(journaled_and_stuck, run, err)
        run.send_signal(signal.SIGINT)
        time.sleep(0.3)
        run.send_signal(signal.SIGINT)
        run.communicate(timeout=120)
    finally:
        service.set_faults(fault_slow=0.0)  # the rerun's answers (and the next test's) at once
    assert run.returncode == 130, err.read_text()[-3000:]
    text = err.read_text()
    clean(text)
    assert "Stopped by SIGINT" in text and "at once" in text
    assert journal.exists()  # not folded: the next run folds it
    rerun(config)
    exactly_once(tmp_path / "out")
    assert not journal.exists()


def test_a_second_signal_inside_rays_wait_is_stop_now(ray_runtime: None) -> None:
    """The second signal mostly comes while the driver waits in `ray.wait`, whose native code
    turns any exception but KeyboardInterrupt into a SystemError (the CLI then exited 1)."""
    import ray

    never = ray.remote(num_cpus=0)(lambda: time.sleep(60)).remote()  # by value: no import
    stop = StopSignals()
    stop.install()
    try:
        stop.ask(signal.SIGINT)  # the first signal
        threading.Timer(0.5, os.kill, (os.getpid(), signal.SIGINT)).start()
        with pytest.raises(StopNow), through_ray():
            for _ in range(30):  # as the driver does: short waits (Ray checks signals as one ends)
                assert not ray.wait([never], timeout=1)[0]
    finally:
        stop.restore()
        ray.cancel(never, force=True)


def test_sigterm_to_the_process_group_with_the_workers_dying_first(
    slow_service: EmbeddedService, ray_runtime: None, tmp_path: Path
) -> None:
    """The run starts a Ray of its own (its workers in the run's session, as under cron);
    the rerun runs in this process, on the session's Ray."""
    write_corpus(tmp_path / "in.parquet")
    # two workers, as by default: the stop with workers dying first is the point, so as many
    # of them as a run has unless told (with one, a run hung once in its stop with three tests
    # at once, not yet understood)
    config = write_config(tmp_path, slow_service.base_url, concurrency={"actors": 2})
    err = tmp_path / "run.err"
    before = accepted(slow_service)
    run = start(["run", str(config), "--progress-interval", "0.5"], err)
    wait_until(lambda: accepted(slow_service) - before >= ROWS // 5, run, err)
    workers = session_workers(run.pid)
    assert workers, "no Ray worker found in the run's session"
    for worker in workers:  # as a cgroup's kill reaches them: the workers go first
        with contextlib.suppress(psutil.Error):
            worker.terminate()
    os.killpg(run.pid, signal.SIGTERM)
    run.communicate(timeout=120)
    assert run.returncode == 143, err.read_text()[-3000:]
    text = err.read_text()
    clean(text)
    assert "Stopped by SIGTERM" in text
    assert not [line for line in text.splitlines() if "Ray" in line or "raylet" in line]
    paid_first = accepted(slow_service) - before
    rerun(config)
    exactly_once(tmp_path / "out")
    in_flight_bound = RPM / 60 * 2  # 2 s of requests: in flight, or answered but not journaled
    assert accepted(slow_service) - before - ROWS <= min(paid_first, in_flight_bound)


# --------------------------------------------------------------------------- exit 4


def test_too_many_rows_in_error_exit_4_after_writing_everything(
    ray_runtime: None, tmp_path: Path
) -> None:
    write_corpus(tmp_path / "in.parquet", 30)
    with embedded(fault_500=1.0) as service:  # every answer a 500: every row server_error
        config = write_config(tmp_path, service.base_url, rpm=60_000, retries={"max_attempts": 1})
        refused = CliRunner().invoke(main, ["run", str(config), "--max-error-rate", "0.5"])
        tolerant = CliRunner().invoke(main, ["run", str(config), "--max-error-rate", "1"])
    assert refused.exit_code == 4, refused.output
    assert refused.output.strip().splitlines()[-1].startswith("TooManyErrors: 100.00% of the")
    assert "evalpipe summary" in refused.output  # the summary came first
    df = exactly_once(tmp_path / "out", 30)
    assert set(df["_error_type"]) == {"server_error"}
    assert tolerant.exit_code == 0, tolerant.output
