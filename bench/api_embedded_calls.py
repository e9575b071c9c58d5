"""Bench: a notebook's calls in a row on `ep.Service("embedded")`, as the tutorial makes them.

`ep.score` of a few fresh rows, `--calls` times in one process (each call's texts are new, so
each sends): the first call starts Ray (a local one, as a notebook's first call does), the
service and the account's Budget; the next ones find Ray up. Per call: its wall time, the
machine's busy CPU-seconds meanwhile (every process: the service's, Ray's, this one's), and
what is running after it: embedded service processes (children of this process) and account
Budget actors on Ray. Before the embedded service was kept for the process (evalpipe.service.
kept_service), every call started a service process, and so a new account with a Budget.

    .venv/bin/python bench/api_embedded_calls.py [--calls 5] [--rows 5]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import polars as pl
import psutil

from common import KEY, KEY_ENV, header, load


def busy() -> float:
    """The machine's busy CPU-seconds so far (all but idle and iowait)."""
    times = psutil.cpu_times()
    return sum(times) - times.idle - getattr(times, "iowait", 0.0)


def services() -> int:
    """Embedded service processes this process runs (`python -m evalpipe.service`)."""
    count = 0
    for child in psutil.Process().children(recursive=True):
        try:
            count += "evalpipe.service" in " ".join(child.cmdline())
        except psutil.Error:
            continue
    return count


def budgets() -> int:
    """Account Budget actors alive on this process's Ray."""
    import ray

    from evalpipe.limits.account import NAMESPACE

    named = ray.util.list_named_actors(all_namespaces=True)
    ours = [a for a in named if a["namespace"] == NAMESPACE]
    return sum(a["name"].startswith("evalpipe-budget") for a in ours)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=5)
    parser.add_argument("--rows", type=int, default=5)
    args = parser.parse_args()
    header("ep.score in a row on ep.Service('embedded'): each call's wall and machine CPU")
    os.environ[KEY_ENV] = KEY
    os.environ.pop("RAY_ADDRESS", None)  # a Ray of the process's own, as in a notebook
    os.environ["XDG_CACHE_HOME"] = tempfile.mkdtemp(prefix="evalpipe-bench-embedded-")
    import evalpipe as ep

    questions = {"helpful": ep.Noul("Is the review helpful?", true="specific", false="vague")}
    limits = {"requests_per_minute": 60_000, "tokens_per_second": 10_000_000}
    svc = ep.Service("embedded", model="model-1.13.0", key_env=KEY_ENV, limits=limits)
    walls, cpus = [], []
    for call in range(1, args.calls + 1):
        df = pl.DataFrame(
            {"id": range(args.rows), "text": [f"call {call}: review {i}" for i in range(args.rows)]}
        )
        cpu0, t0 = busy(), time.monotonic()
        out = ep.score(df, id="id", state="text", questions=questions, service=svc, progress=False)
        wall, cpu = time.monotonic() - t0, busy() - cpu0
        time.sleep(1.0)  # what the call left behind settles (a service stopping, a Budget)
        walls.append(wall)
        cpus.append(cpu)
        print(f"call {call}: {out.height} rows in {wall:.2f} s, machine CPU {cpu:.2f} s; "
              f"then {services()} service process(es), {budgets()} Budget(s); load {load()}",
              flush=True)  # fmt: skip
    if len(walls) > 1:
        later = len(walls) - 1
        print(f"calls 2-{len(walls)}: mean wall {sum(walls[1:]) / later:.2f} s, "
              f"mean machine CPU {sum(cpus[1:]) / later:.2f} s", flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
