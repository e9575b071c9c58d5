"""Faults in our own parts: each ends in a finished run with every row once, or in one line
with an exit code of its own and a state that a plain resume finishes.

Real parts throughout: the session's Ray, the embedded service over loopback HTTP, a real
SQLite file, a real tmpfs (when this machine lets the tests mount one), moto's S3 server on
loopback. A fault is brought about from a thread while the job runs in the test's own thread,
once the job is visibly mid-run (answers accepted by the service).
"""

from __future__ import annotations

import contextlib
import ctypes
import io
import os
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

from conftest import API_KEY, Since, embedded, job_config, run_config
from evalpipe.config import load_config
from evalpipe.engine.events import EventLog
from evalpipe.planning.prepared import prepare
from evalpipe.service import EmbeddedService


def corpus(tmp: Path, n: int) -> list[int]:
    """`n` rows of distinct short texts at tmp/in.parquet; their ids."""
    things = ("lamp", "kettle", "tent", "jacket", "chair")
    rows = [
        {"id": i, "text": f"Review {i}: the {things[i % 5]} {'broke' if i % 4 else 'works'}."}
        for i in range(n)
    ]
    pq.write_table(pa.Table.from_pylist(rows), tmp / "in.parquet")
    return [row["id"] for row in rows]


def table(out: Path) -> pl.DataFrame:
    return pl.read_parquet(out / "part-*.parquet")


def assert_every_row_once(out: Path, ids: list[int]) -> pl.DataFrame:
    df = table(out)
    assert sorted(df["id"].to_list()) == ids  # each row exactly once
    assert df["_error_type"].null_count() == len(df), df["_error_type"].value_counts()
    return df


def when(ready: Callable[[], bool], timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while not ready():
        assert time.monotonic() < deadline, "the job never got there"
        time.sleep(0.02)


@contextmanager
def meanwhile(fault: Callable[[], None]) -> Iterator[list[BaseException]]:
    """Run `fault` in a thread beside the block; its exceptions are re-raised afterwards."""
    raised: list[BaseException] = []

    def run() -> None:
        try:
            fault()
        except BaseException as exc:  # handed to the test's thread
            raised.append(exc)

    thread = threading.Thread(target=run, name="fault", daemon=True)
    thread.start()
    yield raised
    thread.join(60)
    if raised:
        raise raised[0]


def accepted(service: EmbeddedService | Since) -> int:
    return int(service.stats()["requests_accepted"])


@pytest.fixture
def svc(service: EmbeddedService) -> Since:
    """The session's service (its account's Budget made once, not once a test), counted from
    the test's start: for the tests whose point is not a service or a Budget of their own."""
    return Since(service)


# --------------------------------------------------------------------------- the budget


@pytest.mark.parametrize(
    ("how", "replacement"),
    [("ray.kill", "the account's"), ("kill -9", "the account's"), ("ray.kill", "the job's own")],
)
def test_the_account_budget_killed_mid_run_is_replaced_and_every_row_once(
    ray_runtime: None,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    how: str,
    replacement: str,
) -> None:
    """The account's Budget killed while the job sends (`ray.kill`, or its process killed):
    the driver notices, makes a new one (or, when the account's cannot be had, one of the
    job's own) and hands it to the workers, whose requests waited meanwhile; one warning,
    within the limits, every row once."""
    import signal

    import ray
    from ray.exceptions import GetTimeoutError

    from evalpipe.limits.account import NAMESPACE, account_name
    from evalpipe.send import fleet

    if replacement == "the job's own":
        first = fleet.account_budget

        def only_once(*args: Any, **kwargs: Any) -> Any:
            monkeypatch.setattr(fleet, "account_budget", unavailable)
            return first(*args, **kwargs)

        def unavailable(*args: Any, **kwargs: Any) -> Any:
            raise GetTimeoutError("Get timed out: the driver's node has no room")

        monkeypatch.setattr(fleet, "account_budget", only_once)

    ids = corpus(tmp_path, 400)
    rpm = 12_000  # 200 requests a second, enforced by the service as the account's limit
    killed_at: list[int] = []
    with embedded(rpm=rpm) as service:
        name = account_name(service.base_url, API_KEY)

        def kill_the_budget() -> None:
            when(lambda: accepted(service) >= 100)
            budget = ray.get_actor(name, namespace=NAMESPACE)
            if how == "ray.kill":
                ray.kill(budget)
            else:
                os.kill(ray.get(budget.__ray_call__.remote(lambda _: os.getpid())), signal.SIGKILL)
            killed_at.append(accepted(service))

        config = job_config(tmp_path, service.base_url, limits={"requests_per_minute": rpm})
        log = io.StringIO()
        with meanwhile(kill_the_budget):
            result = run_config(config, log=EventLog(stream=log))
        stats = service.stats()
    assert killed_at[0] < len(ids) * 0.75  # mid-run
    assert_every_row_once(tmp_path / "out", ids)
    assert result["rows_answered"] == len(ids) == stats["requests_accepted"]  # none paid twice
    assert stats["responses"].get("429", 0) <= 0.01 * stats["requests_accepted"], stats
    warnings = [line for line in log.getvalue().splitlines() if line.startswith("Warning:")]
    assert len(warnings) == 1 and "budget actor died (" in warnings[0], warnings
    if replacement == "the account's":  # named, for the next job to find; the job left it
        budget = ray.get_actor(name, namespace=NAMESPACE)  # (its leaving is sent, not awaited)
        when(lambda: ray.get(budget.stats.remote())["jobs"] == 0, timeout=30)
    else:
        assert "budget of its own" in warnings[0]
        with pytest.raises(ValueError):
            ray.get_actor(name, namespace=NAMESPACE)


# --------------------------------------------------------------------------- a full disk


@contextmanager
def small_disk(path: Path, size: str) -> Iterator[Path]:
    """A real tmpfs of `size` at `path` (mount(2): root, or CAP_SYS_ADMIN), unmounted after;
    the test is skipped where this machine does not let it mount one."""
    libc = ctypes.CDLL(None, use_errno=True)
    path.mkdir(parents=True, exist_ok=True)
    target = str(path).encode()
    if libc.mount(b"tmpfs", target, b"tmpfs", 0, f"size={size}".encode()) != 0:
        pytest.skip(f"cannot mount a tmpfs here: {os.strerror(ctypes.get_errno())}")
    try:
        yield path
    finally:
        libc.umount2(target, 2)  # MNT_DETACH: even if something still holds a file there


def fill(disk: Path, leave: int) -> Path:
    """A ballast file that leaves `leave` bytes free on `disk`."""
    ballast = disk / "ballast"
    stats = os.statvfs(disk)
    with ballast.open("wb") as f:
        f.write(b"\0" * max(0, stats.f_bavail * stats.f_frsize - leave))
    return ballast


def test_a_full_output_disk_stops_with_one_line_and_exit_5_then_a_resume_finishes(
    ray_runtime: None, tmp_path: Path, svc: Since
) -> None:
    from click.testing import CliRunner

    from evalpipe.cli.main import main
    from evalpipe.output.journal import read_journal
    from evalpipe.output.outdir import JOURNAL

    ids = corpus(tmp_path, 700)
    with small_disk(tmp_path / "disk", "4m") as disk:
        out = disk / "out"
        config = job_config(tmp_path, svc.base_url, output={"path": str(out), "part_rows": 100_000})
        path = tmp_path / "job.yaml"
        path.write_text(yaml.safe_dump(config))
        ballast = fill(disk, 64 * 1024)  # the journal fills it a quarter of the way in
        full = CliRunner().invoke(main, ["run", str(path)])
        paid = accepted(svc)
        assert full.exit_code == 5, full.output
        line = full.output.strip().splitlines()[-1]
        assert line.startswith(f"OutputFull: output.path '{out}': the disk is full at {out} ")
        assert "No space left on device" in line and "needs about" in line, line
        assert "Traceback" not in full.output and API_KEY not in full.output
        # The journal is whole (a torn record was cut back) and holds rows finished before.
        prepared = prepare(load_config(path))
        fingerprint = prepared.config.fingerprint()
        journaled, torn = read_journal(out / JOURNAL, prepared.schema, fingerprint)
        assert torn == 0 and 0 < journaled.num_rows < len(ids)

        ballast.unlink()  # the space is freed: the same command resumes
        again = CliRunner().invoke(main, ["run", str(path)])
        assert again.exit_code == 0, again.output
        assert_every_row_once(out, ids)
        repaid = accepted(svc) - len(ids)
    # At most what was in flight, or answered but not yet journaled, when the disk filled.
    assert paid < len(ids) and repaid <= paid - journaled.num_rows, (paid, repaid)


# --------------------------------------------------------------------------- the answer cache


def cached_states(n: int) -> list[str]:
    return [f"cached state {i}: " + "words " * 30 for i in range(n)]


def filled_cache(tmp: Path, n: int = 2000) -> tuple[Path, list[str]]:
    """A cache file holding answers for `n` states (each answer names its state)."""
    from test_cache import fill, job_cache

    cache, _ = job_cache(tmp)
    states = cached_states(n)
    fill(cache, states)
    cache.close()
    return tmp / "cache" / "answers.sqlite3", states


def right_answers(cache: Any, states: list[str]) -> int:
    """How many states the cache answers; each answer it gives is the state's own."""
    from evalpipe.planning import state_key

    hits = cache.lookup([state_key(s) for s in states])
    by_digest = {state_key(s): s for s in states}
    for digest, hit in hits.items():
        assert all(a["for"] == by_digest[digest] for a in hit.answers.values())
    return len(hits)


@contextmanager
def held(file: Path) -> Iterator[None]:
    """Another process's connection holding the cache under a write lock (BEGIN EXCLUSIVE)."""
    import sqlite3

    other = sqlite3.connect(file, isolation_level=None)
    other.execute("BEGIN EXCLUSIVE")
    other.execute("DELETE FROM meta WHERE name = 'nothing'")
    try:
        yield
    finally:
        other.execute("ROLLBACK")
        other.close()


def test_a_cache_held_under_a_write_lock_reads_on_and_writes_once_it_is_free(
    tmp_path: Path,
) -> None:
    from test_cache import entries, fill, job_cache

    file, states = filled_cache(tmp_path, 50)
    cache, warnings = job_cache(tmp_path)
    with held(file):
        assert right_answers(cache, states) == len(states)  # WAL: readers never wait
        started = time.monotonic()
        fill(cache, cached_states(60)[50:])  # a commit while it is held: kept for later
        print(f"commit under the lock returned after {time.monotonic() - started:.2f}s")
        assert cache.on and len(cache.pending) == 10 * 3
    cache.commit()
    cache.close()
    assert warnings == [] and entries(file) == 60 * 3


def test_a_cache_held_when_the_job_opens_it_is_read_and_written_later(tmp_path: Path) -> None:
    from test_cache import entries, fill, job_cache

    file, states = filled_cache(tmp_path, 50)
    with held(file):
        cache, warnings = job_cache(tmp_path)
        assert cache.on and right_answers(cache, states) == len(states)
        fill(cache, cached_states(60)[50:])
    cache.close()  # the lock is gone: what waited is written
    assert len(warnings) <= 1 and entries(file) == 60 * 3


@pytest.mark.parametrize("damage", ["truncated", "scribbled"])
def test_a_damaged_cache_file_is_at_most_one_warning_and_never_a_wrong_answer(
    tmp_path: Path, damage: str
) -> None:
    from test_cache import fill, job_cache

    file, states = filled_cache(tmp_path)
    data = bytearray(file.read_bytes())
    if damage == "truncated":
        data = data[: len(data) // 3]
    else:
        for at in range(4096, len(data), 8192):  # a run of garbage in every other page
            data[at : at + 512] = os.urandom(512)
    file.write_bytes(bytes(data))
    cache, warnings = job_cache(tmp_path)
    assert right_answers(cache, states) < len(states) or warnings
    fill(cache, cached_states(2100)[2000:])
    cache.close()
    assert len(warnings) <= 1, warnings


def test_a_cache_on_a_full_disk_is_one_warning_and_the_rest_without_it(tmp_path: Path) -> None:
    from test_cache import fill, job_cache

    with small_disk(tmp_path / "cache", "1m") as disk:
        cache, warnings = job_cache(tmp_path)
        fill(cache, cached_states(20))
        with (disk / "ballast").open("wb") as f, contextlib.suppress(OSError):
            f.write(b"\0" * (2 << 20))  # the rest of the disk
        fill(cache, cached_states(3000)[20:])
        assert not cache.on and len(warnings) == 1 and "full" in warnings[0], warnings
        assert right_answers(cache, cached_states(20)) == 0  # off: nothing, never wrong
        cache.close()


def answer_columns(out: Path) -> pl.DataFrame:
    df = table(out)
    return df.select(sorted(c for c in df.columns if "__" in c or c == "id")).sort("id")


def warnings_in(log: io.StringIO) -> list[str]:
    return [line for line in log.getvalue().splitlines() if line.startswith("Warning:")]


def test_a_job_whose_cache_is_held_mid_run_finishes_and_writes_it_once_free(
    ray_runtime: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, svc: Since
) -> None:
    from evalpipe.cache import answers, store

    for module in (answers, store):  # how long a write waits for the lock: 2 s, here 0.5 s
        monkeypatch.setattr(module, "BUSY_SECONDS", 0.5)
    ids = corpus(tmp_path, 400)
    file = tmp_path / "cache" / "answers.sqlite3"
    first = job_config(
        tmp_path, svc.base_url, cache={"path": str(file)}, limits={"requests_per_minute": 9000}
    )

    def hold_the_cache() -> None:
        when(lambda: file.exists() and accepted(svc) >= 100)
        with held(file):
            time.sleep(1)  # longer than any wait of ours: the job must not wait it out

    log = io.StringIO()
    with meanwhile(hold_the_cache):
        result = run_config(first, log=EventLog(stream=log))
    assert_every_row_once(tmp_path / "out", ids)
    assert result["cache"] == "on" and len(warnings_in(log)) <= 1, warnings_in(log)
    # What waited was written once the lock went: a second job finds every answer.
    again = run_config({**first, "output": {"path": str(tmp_path / "out2")}})
    assert again["rows_from_cache"] == len(ids) and accepted(svc) == len(ids)
    assert answer_columns(tmp_path / "out2").equals(answer_columns(tmp_path / "out"))


@pytest.mark.parametrize("damage", ["truncated", "scribbled"])
def test_a_job_on_a_damaged_cache_finishes_with_the_right_answers(
    ray_runtime: None, tmp_path: Path, damage: str, svc: Since
) -> None:
    ids = corpus(tmp_path, 300)
    file = tmp_path / "cache" / "answers.sqlite3"
    first = job_config(tmp_path, svc.base_url, cache={"path": str(file)})
    run_config(first)
    data = bytearray(file.read_bytes())
    if damage == "truncated":
        data = data[: len(data) // 3]
    else:
        for at in range(4096, len(data), 8192):
            data[at : at + 512] = os.urandom(512)
    file.write_bytes(bytes(data))
    log = io.StringIO()
    second = {**first, "output": {"path": str(tmp_path / "out2")}}
    result = run_config(second, log=EventLog(stream=log))
    assert len(warnings_in(log)) <= 1, warnings_in(log)
    assert result["rows_answered"] == len(ids)
    assert_every_row_once(tmp_path / "out2", ids)
    assert answer_columns(tmp_path / "out2").equals(answer_columns(tmp_path / "out"))


# --------------------------------------------------------------------------- the object store

# The outage is 20 s; the suite stops the store for 2 s. Mid-run, pyarrow's own retries
# beneath `evalpipe.stores.patiently` are cut to STORE_ATTEMPTS attempts a request (under a
# second), so even this short outage is waited out by `patiently` (the store's patience is
# 120 s): EVALPIPE_TEST_OUTAGE_SECONDS=20 runs the issue's.
OUTAGE_SECONDS = float(os.environ.get("EVALPIPE_TEST_OUTAGE_SECONDS", "2"))


class S3Server:
    """moto's S3 server on loopback, which a test can stop and start again on the same port
    (its buckets and objects live in this process, so they are there again)."""

    def __init__(self) -> None:
        import logging

        from moto.server import ThreadedMotoServer

        logging.getLogger("werkzeug").setLevel(logging.WARNING)
        self._server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
        self._server.start()
        self.host, self.port = self._server.get_host_and_port()

    def stop(self) -> None:
        self._server.stop()

    def start(self) -> None:
        from moto.server import ThreadedMotoServer

        self._server = ThreadedMotoServer(ip_address=self.host, port=self.port, verbose=False)
        self._server.start()


def aws_env(monkeypatch: pytest.MonkeyPatch, endpoint: str) -> None:
    """pyarrow's and boto3's S3 clients pointed at `endpoint`, with test credentials only."""
    for name, value in {
        "AWS_ENDPOINT_URL": endpoint,
        "AWS_ACCESS_KEY_ID": "test-access-key",
        "AWS_SECRET_ACCESS_KEY": "test-secret-key",
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_EC2_METADATA_DISABLED": "true",
        "AWS_CONFIG_FILE": "/dev/null",
        "AWS_SHARED_CREDENTIALS_FILE": "/dev/null",
    }.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("AWS_PROFILE", raising=False)


@pytest.fixture
def s3_server(monkeypatch: pytest.MonkeyPatch) -> Iterator[S3Server]:
    import boto3

    server = S3Server()
    aws_env(monkeypatch, f"http://{server.host}:{server.port}")
    boto3.client("s3").create_bucket(Bucket="tables")
    yield server
    server.stop()


def s3_table(prefix: str) -> pl.DataFrame:
    import pyarrow.fs as pafs

    fs = pafs.FileSystem.from_uri("s3://tables")[0]
    return pl.from_arrow(pq.read_table(prefix, filesystem=fs))  # type: ignore[return-value]


def s3_parts(prefix: str) -> int:
    import pyarrow.fs as pafs

    fs = pafs.FileSystem.from_uri("s3://tables")[0]
    infos = fs.get_file_info(pafs.FileSelector(prefix, allow_not_found=True))
    return sum(1 for i in infos if i.base_name.startswith("part-"))


def test_an_object_store_away_mid_run_is_waited_out(
    ray_runtime: None, tmp_path: Path, s3_server: S3Server, svc: Since
) -> None:
    """Corpus and output on S3, the server stopped (OUTAGE_SECONDS) once parts are uploaded, while
    files of the corpus are still to be read: both sides wait, the run finishes."""
    import pyarrow.fs as pafs

    ids = corpus(tmp_path, 600)
    rows = pq.read_table(tmp_path / "in.parquet")
    fs = pafs.FileSystem.from_uri("s3://tables")[0]
    for n in range(6):  # six files, opened one after another as the run reads on
        pq.write_table(rows.slice(100 * n, 100), f"tables/corpus/part-{n}.parquet", filesystem=fs)
    out = "s3://tables/away"
    config = job_config(
        tmp_path, svc.base_url, output={"path": out, "part_rows": 100},
        input={"path": "s3://tables/corpus", "batch_rows": 50},
        limits={"requests_per_minute": 12_000}, concurrency={"max_in_flight": 8},
    )  # fmt: skip
    stopped: list[int] = []

    def outage() -> None:
        when(lambda: s3_parts("tables/away") >= 2)
        s3_server.stop()
        stopped.append(accepted(svc))
        time.sleep(OUTAGE_SECONDS)
        s3_server.start()

    with meanwhile(outage):
        result = run_config(config)
    paid = accepted(svc)
    assert stopped[0] < 400  # mid-run, with files of the corpus still to read
    df = s3_table("tables/away")
    assert sorted(df["id"].to_list()) == ids and df["_error_type"].null_count() == len(ids)
    assert result["rows_answered"] == len(ids) == paid  # nothing paid twice


def test_an_object_store_that_stays_away_is_one_error_and_a_resume_finishes(
    ray_runtime: None,
    tmp_path: Path,
    s3_server: S3Server,
    monkeypatch: pytest.MonkeyPatch,
    svc: Since,
) -> None:
    from click.testing import CliRunner

    from evalpipe.cli.main import main
    from evalpipe.output import sink

    monkeypatch.setattr(sink, "PATIENCE_SECONDS", 1.0)  # "stays away": longer than this
    ids = corpus(tmp_path, 400)
    out = "s3://tables/gone"
    config = job_config(
        tmp_path, svc.base_url, output={"path": out, "part_rows": 50},
        limits={"requests_per_minute": 12_000},
    )  # fmt: skip
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(config))

    def outage() -> None:
        when(lambda: s3_parts("tables/gone") >= 2)
        s3_server.stop()

    with meanwhile(outage):
        failed = CliRunner().invoke(main, ["run", str(path)])
    assert failed.exit_code == 1, failed.output
    line = failed.output.strip().splitlines()[-1]
    assert line.startswith(f"OutputError: output.path '{out}': cannot write (the store ")
    assert "could not be reached for" in line and "run the same command" in line, line
    s3_server.start()
    again = CliRunner().invoke(main, ["run", str(path)])
    assert again.exit_code == 0, again.output
    repaid = accepted(svc) - len(ids)
    df = s3_table("tables/gone")
    assert sorted(df["id"].to_list()) == ids and df["_error_type"].null_count() == len(ids)
    assert repaid == 0, repaid  # what was in flight when it ended was journaled, not lost


def test_beneath_patience_pyarrow_tries_a_request_store_attempts_times(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """An output (or a corpus) waited on patiently: pyarrow's S3 client tries a request
    STORE_ATTEMPTS times (here, at a port that hangs up on every connection, which it counts),
    then hands the error to `patiently`; not for 6 s, as a filesystem from `from_uri` does
    (patience.py)."""
    import socket

    import pyarrow.fs as pafs

    from evalpipe.errors import InputError
    from evalpipe.stores import Folder, resolve, unreachable
    from evalpipe.stores.patience import STORE_ATTEMPTS

    connections = [0]
    listener = socket.create_server(("127.0.0.1", 0))

    def hang_up() -> None:
        with contextlib.suppress(OSError):  # closed: the test is over
            while True:
                connection, _ = listener.accept()
                connections[0] += 1
                connection.close()

    threading.Thread(target=hang_up, name="hang-up", daemon=True).start()
    aws_env(monkeypatch, f"http://127.0.0.1:{listener.getsockname()[1]}")
    try:
        folder = Folder("s3://tables/out")
        plain = folder.fs
        folder.patience = 120.0  # as the sink does once the output is open
        assert folder.fs is not plain and folder.fs.__reduce__()[1] == plain.__reduce__()[1]
        with pytest.raises(OSError) as away:
            folder.fs.get_file_info("tables/out/_manifest.json")
        assert unreachable(away.value) and connections[0] == STORE_ATTEMPTS > 1, away.value
        corpus_fs, _ = resolve("s3://tables/corpus", InputError, "input.path", patient=True)
        with pytest.raises(OSError):  # the corpus's reads mid-run (Source) likewise
            corpus_fs.open_input_file("tables/corpus/part-0.parquet")
        assert connections[0] == 2 * STORE_ATTEMPTS
    finally:
        listener.close()
    folder.patience = 0.0  # before the output is open: pyarrow's own retries, as they were
    assert folder.fs is plain
    local, _ = resolve(str(tmp_path), InputError, "input.path", patient=True)
    assert isinstance(local, pafs.LocalFileSystem)  # only S3's client retries for seconds


def test_patience_waits_for_a_store_that_cannot_be_reached_and_for_nothing_else() -> None:
    from evalpipe.stores import patiently, unreachable

    away = OSError("AWS Error NETWORK_CONNECTION during PutObject operation: curlCode: 7")
    assert unreachable(away) and not unreachable(FileNotFoundError("no such key"))
    assert not unreachable(PermissionError("AWS Error ACCESS_DENIED")) and not unreachable(
        away.__class__("bad")
    )
    now, slept = [0.0], []

    def sleep(seconds: float) -> None:
        slept.append(seconds)
        now[0] += seconds

    calls = iter([away, away, away, "done"])

    def flaky() -> str:
        outcome = next(calls)
        if isinstance(outcome, OSError):
            raise outcome
        return outcome

    assert patiently(flaky, 60, sleep, lambda: now[0]) == "done" and slept == [0.5, 1.0, 2.0]

    def gone() -> str:
        raise away

    with pytest.raises(OSError, match=r"could not be reached for 60s \(AWS Error NETWORK"):
        patiently(gone, 60, sleep, lambda: now[0])
    with pytest.raises(FileNotFoundError):
        patiently(lambda: (_ for _ in ()).throw(FileNotFoundError("x")), 60, sleep, lambda: 0.0)


# --------------------------------------------------------------------------- the service


@pytest.mark.parametrize(
    ("hang", "attempt_timeout"), [(0.3, 30.0), (1.5, 0.5)], ids=["then-drops", "outlasts-attempt"]
)
def test_a_service_that_hangs_and_drops_or_cuts_a_200_short_is_retried_and_counted(
    ray_runtime: None, tmp_path: Path, hang: float, attempt_timeout: float, svc: Since
) -> None:
    """The session's service, its faults set for this test's job (and set back after)."""
    ids = corpus(tmp_path, 120)
    service, settings = svc.service, svc.service.settings
    service.set_faults(fault_hang=0.1, fault_truncate=0.1, slow_seconds=hang)
    try:
        retries = {"max_attempts": 10, "attempt_timeout": attempt_timeout}
        result = run_config(job_config(tmp_path, svc.base_url, retries=retries))
    finally:
        service.set_faults(
            fault_hang=settings.fault_hang, fault_truncate=settings.fault_truncate,
            slow_seconds=settings.slow_seconds,
        )  # fmt: skip
    injected = svc.stats()["faults"]
    assert injected.get("hang", 0) > 0 and injected.get("truncate", 0) > 0, injected
    assert_every_row_once(tmp_path / "out", ids)
    assert result["rows_answered"] == len(ids) and result["rows_in_error"] == {}
    assert result["retries"] == injected["hang"] + injected["truncate"], (result, injected)
