"""Bench o: ep.score in a real Jupyter kernel, as issue 35 judges it.

A kernel started by jupyter_client (as JupyterLab starts one) against the embedded service at
3,000 RPM (50 ms per answer): two calls in a row (when the second's first request left, from
the cell's start); a call interrupted 6 s in through the kernel manager (when the cell returned,
requests sent 2 s after the interrupt); the same cell again (rows, order, states paid twice);
a third run (requests sent, seconds); then SIGKILL to the kernel (Ray processes left 30 s later).

    .venv/bin/python bench/kernel_calls.py
"""

from __future__ import annotations

import os
import signal
import sys
import tempfile
import textwrap
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import psutil
from jupyter_client.manager import KernelManager

from common import KEY, KEY_ENV, header, load
from evalpipe.service import EmbeddedService, ServiceSettings

ROWS = 1000


def run(kc: Any, code: str, km: Any = None, interrupt_at: float | None = None) -> dict[str, Any]:
    t0 = time.monotonic()
    msg_id = kc.execute(textwrap.dedent(code))
    out: dict[str, Any] = {"t0": t0, "text": "", "error": None}
    while True:
        due = interrupt_at is not None and time.monotonic() - t0 >= interrupt_at
        if due and "interrupted" not in out:
            km.interrupt_kernel()
            out["interrupted"] = time.monotonic()
        try:
            m = kc.get_iopub_msg(timeout=0.02)
        except Exception:
            continue
        if m["parent_header"].get("msg_id") != msg_id:
            continue
        if m["msg_type"] == "stream":
            out["text"] += m["content"]["text"]
        elif m["msg_type"] == "error":
            out["error"] = m["content"]["ename"]
        elif m["msg_type"] == "status" and m["content"]["execution_state"] == "idle":
            out["t1"] = time.monotonic()
            return out


def first_request_after(
    service: EmbeddedService, before: int, t0: float, seen: list[float]
) -> None:
    while service.stats()["requests_accepted"] <= before:
        time.sleep(0.002)
    seen.append(time.monotonic() - t0)


def main() -> None:
    header("Bench o: ep.score in a real Jupyter kernel (issue 35)")
    settings = ServiceSettings(api_key=KEY, rpm=3000, tps=1e9, latency=0.05)
    with EmbeddedService(settings) as service:
        env = {**os.environ, KEY_ENV: KEY, "XDG_CACHE_HOME": tempfile.mkdtemp(prefix="bench-o-")}
        env.pop("RAY_ADDRESS", None)
        km = KernelManager(kernel_name="python3")
        km.start_kernel(env=env)
        kc = km.client()
        kc.start_channels()
        kc.wait_for_ready(timeout=120)
        accepted = lambda: int(service.stats()["requests_accepted"])  # noqa: E731
        run(
            kc,
            f"""
            import evalpipe as ep, polars as pl
            ids = range({ROWS})
            df = pl.DataFrame({{"id": ids, "text": [f"review {{i}}" for i in ids]}})
            svc = ep.Service("{service.base_url}", model="model-1.13.0", key_env="{KEY_ENV}",
                             limits={{"requests_per_minute": 3000, "tokens_per_second": 1e9}})
            q = {{"helpful": ep.Noul("Is the review helpful?", true="specific", false="vague")}}
            call = lambda f: ep.score(f, id="id", state="text", questions=q, service=svc)
        """,
        )
        for name, rows in (("first call", "df[:100]"), ("second call", "df[100:200]")):
            seen: list[float] = []
            before = accepted()
            t0 = time.monotonic()
            watch = threading.Thread(target=first_request_after, args=(service, before, t0, seen))
            watch.start()
            out = run(kc, f"print(call({rows}).height)")
            watch.join()
            print(f"{name}: first request {seen[0]:.2f} s after the cell started; "
                  f"cell {out['t1'] - out['t0']:.2f} s; {out['text'].strip()} rows")  # fmt: skip
        start = accepted()
        cell = "out = call(df[200:]); print(out.height, out['id'].to_list() == df[200:]['id'].to_list(), out['helpful__p_true'].null_count())"  # noqa: E501
        out = run(kc, cell, km=km, interrupt_at=6.0)
        at_stop = accepted()
        time.sleep(2.0)
        after = accepted() - at_stop
        print(f"interrupt 6 s in: {out['error']}, returned {out['t1'] - out['interrupted']:.2f} s "
              f"after it; {at_stop - start} requests before, {after} in the 2 s after")  # fmt: skip
        out = run(kc, cell)
        paid = accepted() - start
        print(
            f"same cell again: {out['text'].strip()} (rows, input order, nulls) in "
            f"{out['t1'] - out['t0']:.2f} s; states paid twice: {paid - (ROWS - 200)}"
        )
        before = accepted()
        out = run(kc, cell)
        print(f"third run: {accepted() - before} requests, {out['t1'] - out['t0']:.2f} s")
        ray = [p for p in psutil.Process(km.provisioner.process.pid).children(recursive=True)]
        os.kill(km.provisioner.process.pid, signal.SIGKILL)
        time.sleep(30)
        left = [p.pid for p in ray if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
        print(f"SIGKILL: {len(ray)} child processes before, {len(left)} alive 30 s later")
        kc.stop_channels()
    print(f"load: {load()}")


if __name__ == "__main__":
    main()
