"""The guard rails bench: the cost cap and the time limit, as a nightly scheduler meets them.

    cost cap   `evalpipe run --max-cost X` with X a share (default 40%) of `plan`'s cost: how
               close the service's billed tokens come to the cap, the exit code, and how many
               requests the resume (without a cap) pays twice;
    time limit `evalpipe run --max-duration D` on a service slowed to a low RPM: how long after
               D the process ended, the exit code, and what the resume pays twice.

Each run is a subprocess, as a scheduler starts it, against the embedded service in a process
of its own; figures come from the service's counters.

    .venv/bin/python bench/job_guards.py
    .venv/bin/python bench/job_guards.py --rows 3000 --share 0.4 --duration 10
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import (
    EVALPIPE,
    KEY,
    KEY_ENV,
    LIFTED,
    ROOT,
    corpus,
    header,
    load,
    service,
    table,
    write_config,
)

PRICE = 2.0  # dollars per million input tokens


def _env() -> dict[str, str]:
    env = {**os.environ, KEY_ENV: KEY}
    env.pop("RAY_ADDRESS", None)
    return env


def _run(config: Path, *flags: str) -> tuple[int, float, float]:
    """(exit code, seconds of the process, the summary's wall seconds: from the command's
    start to the job's end, before Ray's shutdown) of `evalpipe run CONFIG FLAGS`."""
    command = [EVALPIPE, "run", str(config), "--progress-interval", "3600", "--log-format",
               "json", *flags]  # fmt: skip
    started = time.monotonic()
    done = subprocess.run(command, cwd=ROOT, env=_env(), capture_output=True, text=True)
    events = [json.loads(line) for line in done.stderr.splitlines() if line.startswith("{")]
    wall = next((e["wall_seconds"] for e in events if e["event"] == "summary"), float("nan"))
    return done.returncode, time.monotonic() - started, wall


def _ids(out: Path) -> int:
    parts = sorted(out.glob("part-*.parquet"))
    if not parts:  # stopped before a row was committed
        return 0
    ids = pq.read_table(parts, columns=["id"])["id"].to_pylist()
    assert len(ids) == len(set(ids)), "an id is in the output twice"
    return len(ids)


def cost_cap(rows: int, rpm: float, share: float) -> tuple[str, ...]:
    path = corpus(rows, 20)
    with service(rpm=rpm) as embedded:
        config, out = write_config("guards-cost", path, embedded.base_url, rpm=rpm, tps=1e9,
                                 extra={"pricing": {"default": PRICE}})  # fmt: skip
        plan = subprocess.run([EVALPIPE, "plan", str(config), "--json"], cwd=ROOT, env=_env(),
                              capture_output=True, text=True, check=True)  # fmt: skip
        cost = json.loads(plan.stdout)["estimated_cost_usd"]
        cap = cost * share
        code, _, _ = _run(config, "--restart", "--max-cost", f"{cap:.6f}")
        billed = embedded.stats()["tokens_accepted"] * PRICE / 1_000_000
        resumed, _, _ = _run(config)
        paid = embedded.stats()["requests_accepted"]
    return (
        f"cost cap {share:.0%}", str(code), f"${cap:.6f}", f"${billed:.6f}",
        f"{billed / cap:.2%}", str(resumed), str(_ids(out)), str(paid - rows),
    )  # fmt: skip


def time_limit(rows: int, rpm: float, duration: float) -> tuple[str, ...]:
    path = corpus(rows, 20)
    with service(rpm=rpm) as embedded:
        config, out = write_config("guards-time", path, embedded.base_url, rpm=rpm, tps=1e9)
        code, seconds, wall = _run(config, "--restart", "--max-duration", f"{duration:g}s")
        done = _ids(out)
        embedded.set_limits(rpm=LIFTED["rpm"], tps=None)
        resumed, _, _ = _run(config, "--set", "limits.requests_per_minute=1000000")
        paid = embedded.stats()["requests_accepted"]
    return (
        f"--max-duration {duration:g}s", str(code), f"+{wall - duration:.1f} s",
        f"+{seconds - duration:.1f} s", f"{done} rows", str(resumed), str(_ids(out)),
        str(paid - rows),
    )  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=3000)
    parser.add_argument("--rpm", type=float, default=6000, help="the cost run's RPM")
    parser.add_argument("--share", type=float, default=0.4, help="the cap, of plan's cost")
    parser.add_argument("--slow-rpm", type=float, default=600, help="the timed run's RPM")
    parser.add_argument("--duration", type=float, default=10.0, help="--max-duration, seconds")
    args = parser.parse_args()
    header(f"guard rails: cost cap and time limit ({load()})")
    cost = cost_cap(args.rows, args.rpm, args.share)
    table([cost], ("run", "exit", "cap", "billed", "of cap", "resume", "rows out", "twice"))
    timed = time_limit(args.rows, args.slow_rpm, args.duration)
    table(
        [timed], ("run", "exit", "job ends", "process ends", "done", "resume", "rows out", "twice")
    )
    print(
        f"(corpus {args.rows} rows; cost run at {args.rpm:g} RPM, timed run at "
        f"{args.slow_rpm:g} RPM; after D: the job's end (its summary's wall time), then the "
        "process's (a local Ray's shutdown too))"
    )


if __name__ == "__main__":
    main()
