"""`ep.score` in a real Jupyter kernel, cell after cell, as a data scientist runs it.

The kernel is started by jupyter_client as JupyterLab starts one (a process of its own, in a
session of its own, interrupted by SIGINT to its process group), and starts its own Ray on its
first call: that Ray's life is what is under test, so the session's Ray is not used. One kernel
serves the module's tests, in order: two calls in a row; an interrupt through the kernel manager,
then the same cell to its end; a call after the kept Ray's GCS was killed by hand; and last the
kernel killed with SIGKILL, after which no Ray process of it may be left. `evalpipe run` killed
with `kill -9` on its own pid must leave no Ray process either.

The service is the embedded one, in this process, over loopback; its counters say what it
answered (billed) and when.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest
import yaml

from conftest import API_KEY, embedded, job_config
from evalpipe.service import EmbeddedService

pytestmark = pytest.mark.subprocess  # a kernel, and `evalpipe run`, of their own
ROWS = 400
CORE = ("raylet", "gcs_server")
REAPED_SECONDS = 30.0  # what the issue asks: no Ray process of a killed kernel 30 s later


class Kernel:
    """A kernel started as Jupyter starts one, and a way to run a cell in it."""

    def __init__(self, env: dict[str, str]) -> None:
        from jupyter_client.manager import KernelManager

        self.manager = KernelManager(kernel_name="python3")
        self.manager.start_kernel(env=env)
        self.client = self.manager.client()
        self.client.start_channels()
        self.client.wait_for_ready(timeout=120)

    @property
    def pid(self) -> int:
        return int(self.manager.provisioner.process.pid)

    def run(self, code: str, interrupt_when: Any = None) -> dict[str, Any]:
        """Run a cell to its end: its stdout, stderr, error name, the message types it sent,
        and when the interrupt was sent (`interrupt_when()` turned true) and the cell ended."""
        msg_id = self.client.execute(textwrap.dedent(code))
        out: dict[str, Any] = {"stdout": "", "stderr": "", "error": None, "types": set()}
        while True:
            if interrupt_when is not None and "interrupted" not in out and interrupt_when():
                self.manager.interrupt_kernel()
                out["interrupted"] = time.monotonic()
            try:
                message = self.client.get_iopub_msg(timeout=0.05)
            except Exception:  # queue.Empty: nothing yet
                continue
            if message["parent_header"].get("msg_id") != msg_id:
                continue
            kind, content = message["msg_type"], message["content"]
            out["types"].add(kind)
            if kind == "stream":
                out[content["name"]] += content["text"]
            elif kind == "error":
                out["error"] = content["ename"]
            elif kind == "status" and content["execution_state"] == "idle":
                out["ended"] = time.monotonic()
                return out

    def ray_processes(self) -> list[psutil.Process]:
        return [p for p in psutil.Process(self.pid).children(recursive=True) if _is_ray(p)]

    def close(self) -> None:
        self.client.stop_channels()
        if self.manager.is_alive():
            self.manager.shutdown_kernel(now=True)


def _is_ray(process: psutil.Process) -> bool:
    try:
        name = process.name()
        line = " ".join(process.cmdline())
    except psutil.Error:
        return False
    return name.startswith(("ray::", "raylet", "gcs_server")) or "/ray/" in line


def _alive(processes: list[psutil.Process]) -> list[str]:
    out = []
    for process in processes:
        try:
            if process.status() != psutil.STATUS_ZOMBIE:
                out.append(f"{process.pid} {process.name()}")
        except psutil.Error:
            continue
    return out


def _left_after(processes: list[psutil.Process], seconds: float) -> list[str]:
    """The processes still alive once they all ended, or `seconds` passed."""
    end = time.monotonic() + seconds
    while _alive(processes) and time.monotonic() < end:
        time.sleep(0.1)
    return _alive(processes)


@pytest.fixture(scope="module")
def answers() -> Iterator[EmbeddedService]:
    """The module's service: each answer takes 50 ms, so an interrupt finds some in flight."""
    with embedded(latency=0.05) as svc:
        yield svc


@pytest.fixture(scope="module")
def kernel(answers: EmbeddedService, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Kernel]:
    tmp = tmp_path_factory.mktemp("kernel")
    env = {**os.environ, "EVAL_API_KEY": API_KEY, "XDG_CACHE_HOME": str(tmp / "cache")}
    env.pop("RAY_ADDRESS", None)  # the kernel's Ray is its own: that is what is tested
    kernel = Kernel(env)
    setup = kernel.run(f"""
        import evalpipe as ep, polars as pl
        df = pl.DataFrame({{"id": range({ROWS}), "text": [f"review {{i}}: fine" for i in range({ROWS})]}})
        svc = ep.Service("{answers.base_url}", model="model-1.13.0", key_env="EVAL_API_KEY",
                         limits={{"requests_per_minute": 6000, "tokens_per_second": 1e9}})
        q = {{"helpful": ep.Noul("Is the review helpful?", true="specific", false="vague")}}
        def call(frame, progress=False):
            return ep.score(frame, id="id", state="text", questions=q, service=svc,
                            progress=progress)
        def exact(out, frame):
            assert out["id"].to_list() == frame["id"].to_list(), "not in input order"
            assert out["helpful__p_true"].null_count() == 0, out["_error"].drop_nulls()[:3]
            return out.height
    """)  # noqa: E501
    assert setup["error"] is None, setup
    yield kernel
    kernel.close()


def _accepted(service: EmbeddedService) -> int:
    return int(service.stats()["requests_accepted"])


def test_calls_in_a_row_from_any_thread_reuse_the_kernels_ray(
    kernel: Kernel, answers: EmbeddedService
) -> None:
    """The second call finds the first call's Ray up (it was started on a thread that lives
    as long as the kernel, not on the call's), and so do calls from a worker thread and from
    `asyncio.run` on one. Progress is a widget updated in place, with no warning from a
    library the user did not ask for."""
    before = _accepted(answers)
    first = kernel.run("print(exact(call(df[:60], progress=True), df[:60]))")
    assert first["error"] is None and first["stdout"].strip() == "60", first
    assert "comm_open" in first["types"] and "comm_msg" in first["types"]  # the widget
    assert first["stderr"] == "", first["stderr"]  # no TqdmWarning, no Ray notice
    second = kernel.run("print(exact(call(df[60:120]), df[60:120]))")
    assert second["error"] is None and second["stdout"].strip() == "60", second
    assert _accepted(answers) - before == 120
    core = {p.name(): p.pid for p in kernel.ray_processes() if p.name() in CORE}
    assert sorted(core) == ["gcs_server", "raylet"]
    elsewhere = kernel.run("""
        import asyncio, concurrent.futures
        with concurrent.futures.ThreadPoolExecutor(1) as pool:  # its thread ends after
            print(exact(pool.submit(call, df[120:130]).result(), df[120:130]))
        async def awaited():
            return await ep.ascore(df[130:140], id="id", state="text", questions=q, service=svc)
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            print(exact(pool.submit(asyncio.run, awaited()).result(), df[130:140]))
        print(exact(call(df[140:150]), df[140:150]))
    """)
    assert elsewhere["error"] is None and elsewhere["stdout"].split() == ["10"] * 3, elsewhere
    assert {p.name(): p.pid for p in kernel.ray_processes() if p.name() in CORE} == core


def test_an_interrupt_then_the_same_cell_again(kernel: Kernel, answers: EmbeddedService) -> None:
    """An interrupt through the kernel manager stops the call (KeyboardInterrupt) and sends
    nothing more; the same cell then scores every row once, in input order, and a third run
    sends nothing at all."""
    cell = "out = call(df[150:]); print(exact(out, df[150:]))"
    start = _accepted(answers)
    stopped = kernel.run(cell, interrupt_when=lambda: _accepted(answers) - start >= 40)
    assert stopped["error"] == "KeyboardInterrupt", stopped
    after_stop = _accepted(answers)
    time.sleep(1.0)
    assert _accepted(answers) == after_stop  # nothing sent once the call returned
    again = kernel.run(cell)
    assert again["error"] is None and again["stdout"].strip() == str(ROWS - 150), again
    paid = _accepted(answers) - start
    assert ROWS - 150 <= paid <= ROWS - 150 + 40, paid  # at most the requests in flight again
    third = kernel.run(cell)
    assert third["error"] is None and _accepted(answers) - start == paid


def test_a_call_after_the_kept_rays_gcs_was_killed(
    kernel: Kernel, answers: EmbeddedService
) -> None:
    """A kept Ray whose GCS died is noticed, not trusted: a fresh Ray, a one-line warning,
    and the call finishes; nothing of the dead Ray (its raylet, workers, agents) is left."""
    dead = kernel.ray_processes()
    names = [p.name() for p in dead]
    assert "raylet" in names and any(name.startswith("ray::") for name in names), names
    [gcs] = [p for p in dead if p.name() == "gcs_server"]
    gcs.kill()
    before = _accepted(answers)
    out = kernel.run("print(exact(call(df[:30].with_columns(text=pl.col('text') + '!')), df[:30]))")
    assert out["error"] is None and out["stdout"].strip() == "30", out
    assert "the Ray this process kept is gone" in out["stderr"]
    assert _accepted(answers) - before == 30
    assert gcs.pid not in {p.pid for p in kernel.ray_processes() if p.name() == "gcs_server"}
    assert _left_after(dead, REAPED_SECONDS) == []


def test_the_results_browser_in_the_kernel_is_drawn_inline_and_stops(
    kernel: Kernel, tmp_path: Path
) -> None:
    """`ep.browse` as a data scientist calls it in a notebook: the cell's value is the page,
    drawn inline (an IFrame, a `display_data` message); it serves rows only with its token; a
    second browser beside the first works; `stop()` ends each, and the kernel goes on."""
    import httpx

    from browsedata import write_run

    write_run(tmp_path / "out", range(50), 1, "model-1.13.0")
    shown = kernel.run(f"b = ep.browse({str(tmp_path / 'out')!r}); b")
    assert shown["error"] is None and "display_data" in shown["types"], shown
    urls = kernel.run(f"c = ep.browse({str(tmp_path / 'out')!r}); print(b.url); print(c.url)")
    assert urls["error"] is None, urls
    first, second = urls["stdout"].split()
    for url in (first, second):
        base, token = url.split("/?token=")
        rows = httpx.get(f"{base}/api/rows", params={"token": token, "offset": 0, "limit": 5})
        assert rows.status_code == 200 and len(rows.json()["rows"]) == 5, rows.text
        assert httpx.get(f"{base}/api/rows").status_code == 403
    stopped = kernel.run("b.stop(); c.stop(); print('stopped')")
    assert stopped["error"] is None and stopped["stdout"].strip() == "stopped", stopped
    for url in (first, second):
        with pytest.raises(httpx.ConnectError):
            httpx.get(url)


def test_a_kernel_killed_with_sigkill_leaves_no_ray_process(kernel: Kernel) -> None:
    """What a kernel restart does: SIGKILL. Every Ray process the kernel started ends."""
    ray = kernel.ray_processes()
    assert any(p.name().startswith("ray::") for p in ray), [p.name() for p in ray]
    os.kill(kernel.pid, signal.SIGKILL)
    assert _left_after(ray, REAPED_SECONDS) == []


def test_evalpipe_run_killed_with_kill_9_leaves_no_ray_process(
    answers: EmbeddedService, tmp_path: Path
) -> None:
    """A scheduler's `kill -9` on the run's own pid (not its group) leaves no Ray behind."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = 2000
    pq.write_table(
        pa.table({"id": list(range(rows)), "text": [f"row {i}" for i in range(rows)]}),
        tmp_path / "in.parquet",
    )
    config = job_config(  # one worker: what is killed is a Ray with actors, however many
        tmp_path, answers.base_url, limits={"requests_per_minute": 600}, concurrency={"actors": 1}
    )
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(config), encoding="utf-8")
    env = {**os.environ, "EVAL_API_KEY": API_KEY}
    env.pop("RAY_ADDRESS", None)
    before = _accepted(answers)
    run = subprocess.Popen(
        [str(Path(sys.executable).with_name("evalpipe")), "run", str(path)],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        start_new_session=True,  # as a scheduler's child: its own group, killed by pid
    )  # fmt: skip
    try:
        while _accepted(answers) - before < 5:
            assert run.poll() is None, "the run ended before it sent"
            time.sleep(0.1)
        ray = [p for p in psutil.Process(run.pid).children(recursive=True) if _is_ray(p)]
        assert any(p.name() == "raylet" for p in ray)
        os.kill(run.pid, signal.SIGKILL)
        run.wait()
        assert _left_after(ray, REAPED_SECONDS) == []
    finally:
        if run.poll() is None:
            run.kill()


def test_the_reaper_looks_in_one_walk_of_the_process_table_and_kills_what_it_knew(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Each look of the reaper finds every descendant of the processes it knows in one walk of
    the process table, however many it knows (a walk per process cost ~4% of a core beside
    each run, issue 48); at the end it kills them all."""
    from evalpipe.cluster import reaper

    tree = subprocess.Popen(
        ["sh", "-c", "sleep 60 & sleep 60 & sh -c 'sleep 60 & wait' & wait"],
        start_new_session=True,
    )
    try:
        root = psutil.Process(tree.pid)
        deadline = time.monotonic() + 10
        while len(root.children(recursive=True)) < 4 and time.monotonic() < deadline:
            time.sleep(0.05)
        below = {p.pid for p in root.children(recursive=True)}
        assert len(below) == 4
        walks: list[int] = []
        walk = reaper.walk
        monkeypatch.setattr(reaper, "walk", lambda: walks.append(1) or walk())
        known = {tree.pid: walk()[tree.pid][1]}
        reaper.remember(known)
        assert set(known) == {tree.pid, *below}
        reaper.remember(known)
        assert walks == [1, 1]  # one walk a look, for five processes known
        reaper.kill_known(known)
        tree.wait(timeout=10)
        time.sleep(0.2)
        assert not [pid for pid in below if psutil.pid_exists(pid)
                    and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE]  # fmt: skip
    finally:
        if tree.poll() is None:
            os.killpg(tree.pid, signal.SIGKILL)
