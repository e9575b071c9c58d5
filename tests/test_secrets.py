"""The API key stays in the environment: never in an output file, the journal, the manifest, a
log line, an error message, or anything Ray carries between processes.

One `evalpipe run` for real, in a process of its own with a Ray of its own whose session is in
a temporary directory of its own, so that its logs can be searched too; and Ray is watched
from the inside: every value Ray serializes, in that driver and (through Ray's
`worker_process_setup_hook`) in every worker process, an argument of an actor or a task, or a
result, is pickled once more by a spy (tests/rayspy.py) and searched for the key. The run's
service fails a share of calls, so answers and errors both cross Ray. Its tests read that one
run: what it wrote while it ran and at its end, what it printed and logged, what crossed Ray.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
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
from click.testing import CliRunner

import rayspy
from conftest import LIFTED, job_config
from evalpipe.cli.main import main
from evalpipe.config import load_config
from evalpipe.output.journal import read_journal
from evalpipe.output.manifest import MANIFEST
from evalpipe.output.outdir import JOURNAL
from evalpipe.output.table import output_schema
from evalpipe.service import EmbeddedService, ServiceSettings

SECRET = f"sk-evalpipe-{secrets.token_hex(16)}"  # searched for as bytes everywhere
NEEDLE = SECRET.encode()
TESTS = Path(__file__).resolve().parent


def config_for(tmp: Path, base_url: str, **changes: Any) -> dict[str, Any]:
    return job_config(tmp, base_url, retries={"max_attempts": 2}, **changes)


def write_corpus(path: Path, n: int) -> None:
    rows = [{"id": f"r{i}", "text": f"Review {i}: works as described, mostly."} for i in range(n)]
    pq.write_table(pa.Table.from_pylist(rows), path)


def files_holding_the_key(*roots: Path) -> list[str]:
    """Every regular file under `roots` whose bytes contain the key."""
    found = []
    for root in roots:
        for folder, _, names in os.walk(root):
            for name in names:
                path = Path(folder) / name
                if path.is_symlink() or not path.is_file():
                    continue  # sockets, pipes, links to elsewhere
                with contextlib.suppress(OSError):
                    if NEEDLE in path.read_bytes():
                        found.append(str(path))
    return found


def test_the_search_finds_a_planted_key(tmp_path: Path) -> None:
    (tmp_path / "deep" / "er").mkdir(parents=True)
    (tmp_path / "deep" / "er" / "x.log").write_bytes(b"... Bearer " + NEEDLE + b" ...")
    (tmp_path / "clean.log").write_text("nothing here")
    assert files_holding_the_key(tmp_path) == [str(tmp_path / "deep" / "er" / "x.log")]


@dataclass
class Run:
    """The watched `evalpipe run`: its folder, its Ray's temporary directory, its process."""

    folder: Path
    ray_tmp: Path
    pid: int
    returncode: int
    stdout: bytes
    stderr: bytes
    live: list[str]  # what existed while it ran (the journal, the manifest)
    live_holding_the_key: list[str]  # the files then holding the key
    notes: list[list[str]]  # the spy's: pid, type, found

    @property
    def out(self) -> Path:
        return self.folder / "out"


@pytest.fixture(scope="module")
def watched_run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Run]:
    """`evalpipe run` (the CLI, with the spy installed ahead of it) on 60 rows, at 50 a second:
    running while its journal and manifest are looked at. One worker: what crosses Ray and
    what a worker logs are the point, not how many workers there are."""
    folder = tmp_path_factory.mktemp("watched-run")
    write_corpus(folder / "in.parquet", 60)
    notes = folder / "serialized.tsv"
    ray_tmp = Path(tempfile.mkdtemp(prefix="evr-", dir="/tmp"))  # short: Ray's socket paths
    path = os.pathsep.join(p for p in (str(TESTS), os.environ.get("PYTHONPATH")) if p)
    env = {
        **os.environ, "EVAL_API_KEY": SECRET, "RAY_TMPDIR": str(ray_tmp),
        "XDG_CACHE_HOME": str(folder / "cache"),  # the answer cache is searched too
        "PYTHONPATH": path,  # the spy's module, for the driver and Ray's workers
        rayspy.NOTES_ENV: str(notes), "RAY_JOB_CONFIG_JSON_ENV_VAR": rayspy.job_config(),
    }  # fmt: skip
    spied = "import rayspy; rayspy.install(); from evalpipe.cli.main import main; main()"
    settings = ServiceSettings(api_key=SECRET, rpm=3000, latency=0.05, fault_500=0.2,
                               fault_seed=4)  # fmt: skip
    run = None
    try:
        with EmbeddedService(settings) as service:
            config = job_config(
                folder, service.base_url, limits={"requests_per_minute": 3000},
                concurrency={"actors": 1},
                retries={"max_attempts": 1},  # a failed call is the row's error: a fifth of them
            )  # fmt: skip
            config_path = folder / "job.yaml"
            config_path.write_text(yaml.safe_dump(config))
            loaded = load_config(config_path)
            schema = output_schema("id", pa.string(), loaded.parsed_questions)
            journal = folder / "out" / JOURNAL

            def journaled() -> int:
                with contextlib.suppress(FileNotFoundError):
                    return read_journal(journal, schema, loaded.fingerprint())[0].num_rows
                return 0

            run = subprocess.Popen(
                [sys.executable, "-c", spied, "run", str(config_path), "--progress-interval", "1"],
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, start_new_session=True,
            )  # fmt: skip
            deadline = time.monotonic() + 240  # a guard against a hang, not a speed bound
            while journaled() < 5:
                if run.poll() is not None:
                    assert run.stderr is not None
                    raise AssertionError(f"it ended first: {run.stderr.read()[-2000:]!r}")
                assert time.monotonic() < deadline, "no rows journaled"
                time.sleep(0.02)
            live = [p.name for p in (journal, folder / "out" / MANIFEST) if p.exists()]
            live_holding_the_key = files_holding_the_key(folder)
            stdout, stderr = run.communicate(timeout=120)
        lines = notes.read_text().splitlines() if notes.exists() else []
        yield Run(folder, ray_tmp, run.pid, run.returncode, stdout, stderr, live,
                  live_holding_the_key, [line.split("\t") for line in lines])  # fmt: skip
    finally:
        if run is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(run.pid, signal.SIGKILL)
        shutil.rmtree(ray_tmp, ignore_errors=True)


@pytest.mark.subprocess
def test_the_cli_writes_and_logs_no_key(watched_run: Run) -> None:
    """`evalpipe run` for real: its journal and manifest while it runs; its parts, manifest,
    answer cache, stdout and stderr and its Ray session's logs at the end."""
    run = watched_run
    assert MANIFEST in run.live  # (the journal held 5 rows a moment before)
    assert run.live_holding_the_key == []  # the journal and manifest, live
    assert run.returncode == 0, run.stderr.decode()[-2000:]
    assert b"evalpipe summary" in run.stdout and b" rows " in run.stderr  # progress lines
    assert NEEDLE not in run.stdout and NEEDLE not in run.stderr
    assert not (run.out / JOURNAL).exists() and list(run.out.glob("part-*.parquet"))
    # RAY_TMPDIR/ray/session_<date>_<pid of the evalpipe process>: a Ray of its own
    sessions = [p for p in run.ray_tmp.glob("ray/session_*") if not p.is_symlink()]
    assert [s.name.rsplit("_", 1)[1] for s in sessions] == [str(run.pid)]
    assert len(list((sessions[0] / "logs").iterdir())) > 5
    assert files_holding_the_key(run.folder, run.ray_tmp) == []


@pytest.mark.subprocess
def test_the_key_never_crosses_ray(watched_run: Run) -> None:
    run = watched_run
    assert run.returncode == 0, run.stderr.decode()[-2000:]
    table = pl.read_parquet(run.out / "part-*.parquet")
    errors = table["_error_type"].is_not_null().sum()
    assert 0 < errors < table.height  # answers and errors both crossed Ray
    assert run.notes, "the spy saw nothing: the check would be empty"
    assert [n for n in run.notes if n[2] != "False"] == []
    driver = str(run.pid)
    kinds = {kind for pid, kind, _ in run.notes if pid == driver}
    assert {"WorkerSettings", "list"} <= kinds  # actor arguments and chunks of jobs
    assert {pid for pid, _, _ in run.notes if pid != driver}, "no worker process was watched"


def test_a_refused_key_is_not_in_the_message(tmp_path: Path) -> None:
    """The service refuses the key at the job's first call, before any worker is started."""
    write_corpus(tmp_path / "in.parquet", 5)
    other = f"sk-other-{secrets.token_hex(8)}"
    with EmbeddedService(ServiceSettings(api_key=other, **LIFTED)) as service:
        path = tmp_path / "job.yaml"
        path.write_text(yaml.safe_dump(config_for(tmp_path, service.base_url)))
        result = CliRunner().invoke(main, ["run", str(path)], env={"EVAL_API_KEY": SECRET})
    assert result.exit_code == 3, result.output
    assert result.output.strip().splitlines()[-1].startswith("AuthError: ")
    assert SECRET not in result.output and other not in result.output
    assert files_holding_the_key(tmp_path) == []
