"""Bench n: what a Ray worker process of a job costs, in CPU seconds, from its start to the
job's end; and what a local Ray's start costs.

The suite's time goes mostly to CPU spent in Ray's processes, and the machine is shared, so
this counts CPU seconds (user + system, from /proc through psutil), never wall time. In this
process: a local Ray (`num_cpus=2`, as the tests' fixture starts it), left to settle (its
prestarted workers import Ray meanwhile); then a small job (`--rows` rows) against the embedded
service in a thread here, run the way `evalpipe run` runs it. Printed: the CPU of the Ray start
(this process and every process under it), then, at the job's end, each of Ray's worker
processes (the job's Workers, the account's Budget, idle ones) with its CPU since it started,
and the whole tree's. With `--import-probe`, a plain actor also reports what importing
the actors' modules adds to a fresh Ray worker (modules, CPU): what Ray imported already does not
count. `--no-prestart` starts Ray without its prestarted workers, to compare.

    PYTHONPATH=pipeline .venv/bin/python bench/worker_cpu.py
    PYTHONPATH=pipeline .venv/bin/python bench/worker_cpu.py --no-prestart --import-probe
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import psutil
import pyarrow as pa
import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import KEY, KEY_ENV, QUESTIONS, header, table

SETTLE_SECONDS = 1.0  # the tree is settled once it spent < 2% of a core over this long
# The modules of the job's actor classes: the Workers' and the account's Budget's.
PROBED = ("evalpipe.send.actors", "evalpipe.limits.account")
NO_PRESTART = {"enable_worker_prestart": False, "prestart_worker_first_driver": False}


def tree_cpu() -> dict[int, tuple[str, float]]:
    """CPU seconds (user + system) of this process and each process under it, by pid."""
    me = psutil.Process()
    out = {}
    for process in [me, *me.children(recursive=True)]:
        try:
            times = process.cpu_times()
            out[process.pid] = (" ".join(process.cmdline())[:40], times.user + times.system)
        except psutil.Error:
            continue
    return out


def settled(limit: float = 30.0) -> dict[int, tuple[str, float]]:
    """The tree's CPU once it stopped working (or after `limit` seconds)."""
    end = time.monotonic() + limit
    before = tree_cpu()
    while time.monotonic() < end:
        time.sleep(SETTLE_SECONDS)
        now = tree_cpu()
        if sum(c for _, c in now.values()) - sum(c for _, c in before.values()) < 0.02:
            return now
        before = now
    return before


def start_ray(prestart: bool) -> float:
    """Start a local Ray like the tests' fixture; the CPU it took, settled."""
    import ray

    before = sum(c for _, c in tree_cpu().values())
    ray.init(
        address="local",
        num_cpus=2,
        include_dashboard=False,
        logging_level="ERROR",
        log_to_driver=False,
        _system_config=None if prestart else NO_PRESTART,
    )
    return sum(c for _, c in settled().values()) - before


def import_probe(module: str) -> tuple[float, int, list[str]]:
    """In a fresh Ray worker: the CPU and the modules that importing `module` adds."""
    import ray

    @ray.remote(num_cpus=0)
    class Probe:
        def run(self, module: str) -> tuple[float, int, list[str]]:
            before = set(sys.modules)
            start = time.process_time()
            importlib.import_module(module)

            added = set(sys.modules) - before
            tops = sorted({name.split(".")[0] for name in added})
            return time.process_time() - start, len(added), tops

    probe: Any = Probe.remote()  # type: ignore[attr-defined]
    result: tuple[float, int, list[str]] = ray.get(probe.run.remote(module))
    ray.kill(probe)
    return result


def small_job(folder: Path, rows: int) -> dict[str, Any]:
    """A job of `rows` distinct rows against the embedded service (thread), as `evalpipe run`."""
    from evalpipe.config import parse_config
    from evalpipe.engine import EventLog
    from evalpipe.service import EmbeddedService, ServiceSettings
    from evalpipe.session import opened

    texts = [
        f"Review {i}: the kettle {'broke' if i % 3 else 'works'} after {i} days."
        for i in range(rows)
    ]
    pq.write_table(pa.table({"id": list(range(rows)), "text": texts}), folder / "in.parquet")
    settings = ServiceSettings(api_key=KEY, rpm=10_000_000, tps=10_000_000_000)
    with EmbeddedService(settings) as service:
        config = {
            "input": {"path": str(folder / "in.parquet"), "id_column": "id", "state": "text"},
            "output": {"path": str(folder / "out")},
            "service": {"base_url": service.base_url, "api_key_env": KEY_ENV},
            "model": "model-1.13.0",
            "limits": {"requests_per_minute": 60_000, "tokens_per_second": 10_000_000},
            "questions": QUESTIONS,
        }
        with opened(parse_config(config), EventLog()) as session:
            summary: dict[str, Any] = session.run(progress_interval=3600).summary
    return summary


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=200)
    parser.add_argument("--no-prestart", action="store_true")
    parser.add_argument("--import-probe", action="store_true")
    args = parser.parse_args()
    os.environ[KEY_ENV] = KEY
    os.environ["XDG_CACHE_HOME"] = tempfile.mkdtemp(prefix="evalpipe-bench-cache-")
    import evalpipe

    header(f"bench n: Ray worker CPU ({evalpipe.__file__})")
    ray_cpu = start_ray(prestart=not args.no_prestart)
    print(f"Ray start (prestart {'off' if args.no_prestart else 'on'}): {ray_cpu:.2f} CPU-s")
    if args.import_probe:
        for module in PROBED:
            cpu, count, tops = import_probe(module)
            print(f"import {module} in a fresh Ray worker: {cpu:.2f} CPU-s, {count} modules")
            print("  top-level packages added:", ", ".join(tops))
    before = sum(c for _, c in tree_cpu().values())
    with tempfile.TemporaryDirectory() as folder:
        summary = small_job(Path(folder), args.rows)
    end = settled()
    rows = [
        (str(pid), name, f"{cpu:.2f}")
        for pid, (name, cpu) in sorted(end.items())
        if name.startswith("ray::") or "default_worker" in name
    ]
    table(rows, ("pid", "process", "CPU-s since its start"))
    total = sum(c for _, c in end.values()) - before
    print(f"job: {summary['rows_answered']} rows answered, whole tree {total:.2f} CPU-s")
    import ray

    logs = Path(ray._private.worker._global_node.get_logs_dir_path())
    started = len(list(logs.glob("python-core-worker-*.log")))
    ray.shutdown()
    print(f"Ray worker processes started: {started}")


if __name__ == "__main__":
    main()
