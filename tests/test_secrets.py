"""The API key stays in the environment: never in an output file, the journal, the manifest, a
log line, an error message, or anything Ray carries between processes.

Ray is watched from the inside: every value Ray serializes, in the driver and (through a
`worker_process_setup_hook`) in every worker process, an argument of an actor or a task, or a
result, is pickled once more by a spy and searched for the key. The CLI runs for real, with
its Ray session in a temporary directory of its own so that its logs can be searched too.
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
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml
from click.testing import CliRunner

from conftest import LIFTED, job_config, own_ray, run_config
from evalpipe.cli.main import main
from evalpipe.config import load_config
from evalpipe.output.journal import read_journal
from evalpipe.output.manifest import MANIFEST
from evalpipe.output.outdir import JOURNAL
from evalpipe.output.table import output_schema
from evalpipe.service import EmbeddedService, ServiceSettings

SECRET = f"sk-evalpipe-{secrets.token_hex(16)}"  # searched for as bytes everywhere
NEEDLE = SECRET.encode()


def spy(record: str, needle: bytes) -> Callable[[], None]:
    """A hook that makes Ray's serializer note, per value, its type and whether it holds
    `needle`, in the file `record` (one line per value: pid, type, found)."""

    def install() -> None:
        import os
        import pickle

        import ray.cloudpickle
        from ray._private import serialization

        context = serialization.SerializationContext
        if hasattr(context, "_evalpipe_original"):
            return
        original = context.serialize

        def serialize(self: Any, value: Any) -> Any:
            try:
                data = ray.cloudpickle.dumps(value)
            except Exception:
                try:
                    data = pickle.dumps(value)
                except Exception:
                    data = repr(value).encode()
            with open(record, "a") as notes:
                notes.write(f"{os.getpid()}\t{type(value).__name__}\t{needle in data}\n")
            return original(self, value)

        context._evalpipe_original = original  # type: ignore[attr-defined]
        context.serialize = serialize  # type: ignore[method-assign]

    return install


def remove_spy() -> None:
    from ray._private import serialization

    context = serialization.SerializationContext
    original = context.__dict__.get("_evalpipe_original")
    if original is not None:
        context.serialize = original  # type: ignore[method-assign]
        del context._evalpipe_original  # type: ignore[attr-defined]


@pytest.fixture(scope="module")
def watched_ray(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """Ray (num_cpus=2) with the spy in the driver and in every worker; yields its notes."""
    import ray
    import ray.cloudpickle

    notes = tmp_path_factory.mktemp("spy") / "serialized.tsv"
    hook = spy(str(notes), NEEDLE)
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])  # the hook travels whole
    saved = os.environ.get("EVAL_API_KEY")
    os.environ["EVAL_API_KEY"] = SECRET  # the workers inherit it, as from a shell
    with own_ray():
        yield from _watched(notes, hook, saved)


def _watched(notes: Path, hook: Any, saved: str | None) -> Iterator[Path]:
    import ray
    import ray.cloudpickle

    ray.init(
        address="local",  # never a Ray another worker's test left to be found (a cluster)
        num_cpus=2,
        include_dashboard=False,
        logging_level="ERROR",
        log_to_driver=False,
        runtime_env={"worker_process_setup_hook": hook},
    )
    hook()
    try:
        yield notes
    finally:
        ray.shutdown()
        remove_spy()
        ray.cloudpickle.unregister_pickle_by_value(sys.modules[__name__])
        if saved is None:
            os.environ.pop("EVAL_API_KEY", None)
        else:
            os.environ["EVAL_API_KEY"] = saved


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


@pytest.mark.subprocess
def test_the_cli_writes_and_logs_no_key(tmp_path: Path) -> None:
    """`evalpipe run` for real: its journal and manifest while it runs; its parts, manifest,
    stdout and stderr and its Ray session's logs at the end. (Ahead of the tests on the watched
    Ray, which is started for them: it does not idle beside this run's own.)"""
    write_corpus(tmp_path / "in.parquet", 60)  # at 50 a second: running while looked at
    ray_tmp = Path(tempfile.mkdtemp(prefix="evr-", dir="/tmp"))  # short: Ray's socket paths
    env = {**os.environ, "EVAL_API_KEY": SECRET, "RAY_TMPDIR": str(ray_tmp)}
    settings = ServiceSettings(api_key=SECRET, rpm=3000, latency=0.05, fault_500=0.1)
    script = Path(sys.executable).with_name("evalpipe")
    fallback = [sys.executable, "-c", "from evalpipe.cli.main import main; main()"]
    command = [str(script)] if script.exists() else fallback
    try:
        with EmbeddedService(settings, mode="process") as service:
            config = config_for(
                tmp_path, service.base_url, limits={"requests_per_minute": 3000},
                concurrency={"actors": 1},  # a worker's logs are searched: one will do
            )  # fmt: skip
            path = tmp_path / "job.yaml"
            path.write_text(yaml.safe_dump(config))
            loaded = load_config(path)
            schema = output_schema("id", pa.string(), loaded.parsed_questions)
            journal = tmp_path / "out" / JOURNAL

            def journaled() -> int:
                with contextlib.suppress(FileNotFoundError):
                    return read_journal(journal, schema, loaded.fingerprint())[0].num_rows
                return 0

            run = subprocess.Popen(
                [*command, "run", str(path), "--progress-interval", "1"],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                env=env,
                start_new_session=True,
            )
            deadline = time.monotonic() + 240  # a guard against a hang, not a speed bound
            while journaled() < 5:
                assert run.poll() is None and time.monotonic() < deadline, "no rows journaled"
                time.sleep(0.02)
            assert (tmp_path / "out" / MANIFEST).exists()
            assert files_holding_the_key(tmp_path) == []  # the journal and manifest, live
            stdout, stderr = run.communicate(timeout=120)
        assert run.returncode == 0, stderr.decode()[-2000:]
        assert b"evalpipe summary" in stdout and b" rows " in stderr  # progress lines
        assert NEEDLE not in stdout and NEEDLE not in stderr
        assert not journal.exists() and list((tmp_path / "out").glob("part-*.parquet"))
        # RAY_TMPDIR/ray/session_<date>_<pid of the evalpipe process>
        sessions = [p for p in ray_tmp.glob("ray/session_*") if not p.is_symlink()]
        assert [s.name.rsplit("_", 1)[1] for s in sessions] == [str(run.pid)]
        assert len(list((sessions[0] / "logs").iterdir())) > 5
        assert files_holding_the_key(tmp_path, ray_tmp) == []
    finally:
        with contextlib.suppress(ProcessLookupError, NameError):
            os.killpg(run.pid, signal.SIGKILL)
        shutil.rmtree(ray_tmp, ignore_errors=True)


def test_the_key_never_crosses_ray(watched_ray: Path, tmp_path: Path) -> None:
    write_corpus(tmp_path / "in.parquet", 40)
    settings = ServiceSettings(api_key=SECRET, fault_500=0.3, fault_seed=4, **LIFTED)
    with EmbeddedService(settings) as service:
        config = config_for(tmp_path, service.base_url, concurrency={"actors": 1})  # one will do
        result = run_config(config)
    assert result["rows_answered"] > 0 and result["rows_in_error"]  # answers and errors both

    notes = [line.split("\t") for line in watched_ray.read_text().splitlines()]
    assert notes, "the spy saw nothing: the check would be empty"
    assert [n for n in notes if n[2] != "False"] == []
    driver = str(os.getpid())
    kinds = {kind for pid, kind, _ in notes if pid == driver}
    assert {"WorkerSettings", "list"} <= kinds  # actor arguments and chunks of jobs
    assert {pid for pid, _, _ in notes if pid != driver}, "no worker process was watched"
    assert files_holding_the_key(tmp_path / "out") == []


def test_a_refused_key_is_not_in_the_message(watched_ray: Path, tmp_path: Path) -> None:
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
