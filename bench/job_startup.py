"""Bench f: start-up, from the command to the first request.

Measured from outside: `evalpipe run` is started as a subprocess against the embedded service
already running in its own process, which is sampled every 20 ms, so "first request" is the
moment the service accepted its first evaluate request. Beside it, the job's own figure
(`startup_seconds` of the summary: from the start of the `run` command's body to the first
chunk handed to an actor), and a job with `base_url: embedded` (the job starts the service
itself, in parallel with Ray), for which only the job's own figure exists. Also the bare cost
of the interpreter and imports (`evalpipe --version`). With `--joined`, also a job that joins
a Ray already running (`--ray-address`), started and stopped by this bench. Each is repeated
`--repeat` times.

    .venv/bin/python bench/job_startup.py              # 3 runs of each
    .venv/bin/python bench/job_startup.py --repeat 1   # quick
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import (
    EVALPIPE,
    KEY,
    KEY_ENV,
    ServiceWatch,
    corpus,
    header,
    load,
    run_job,
    service,
    table,
    write_config,
)


def spread(values: list[float]) -> str:
    if not values:
        return "-"
    if len(values) == 1:
        return f"{values[0]:.2f} s"
    return f"{statistics.median(values):.2f} s ({min(values):.2f}-{max(values):.2f})"


def joined(path: Path, repeat: int) -> tuple[list[float], list[float]]:
    """Start-up when the job joins a Ray that is already running (`--ray-address`): the
    figure a scheduler that keeps a Ray up between runs would see. This process owns that
    Ray (it stops with it), so nothing is left behind."""
    import ray

    os.environ[KEY_ENV] = KEY  # the Ray workers inherit this process's environment
    ray.init(include_dashboard=False, logging_level="ERROR", log_to_driver=False)
    address = ray.get_runtime_context().gcs_address
    outside, inside = [], []
    try:
        for _ in range(repeat):
            with service() as embedded:
                config, out = write_config(
                    "startup-joined", path, embedded.base_url, rpm=1e9, tps=1e13, actors=2
                )
                with ServiceWatch(embedded, interval=0.5) as watch:
                    job = run_job(config, out, args=["--ray-address", address])
                first = watch.first_accepted(job.started)
            if first is not None:
                outside.append(first - job.started)
            inside.append(job.summary.get("startup_seconds", float("nan")))
    finally:
        ray.shutdown()
    return outside, inside


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--rows", type=int, default=200)
    parser.add_argument(
        "--joined", action="store_true", help="also join a Ray this bench keeps running"
    )
    args = parser.parse_args()
    header(f"Bench f: start-up, {args.repeat} run(s) of each, {args.rows}-row job")
    path = corpus(args.rows, 20)
    version = []
    for _ in range(args.repeat):
        start = time.monotonic()
        subprocess.run([EVALPIPE, "--version"], check=True, capture_output=True)
        version.append(time.monotonic() - start)
    outside, inside, embedded_inside, loads = [], [], [], []
    for _ in range(args.repeat):
        with service() as embedded:
            config, out = write_config(
                "startup", path, embedded.base_url, rpm=1e9, tps=1e13, actors=2
            )
            with ServiceWatch(embedded, interval=0.5) as watch:
                job = run_job(config, out)
            first = watch.first_accepted(job.started)
        if first is not None:
            outside.append(first - job.started)
        inside.append(job.summary["startup_seconds"])
        loads.append(load())
        config, out = write_config("startup-embedded", path, "embedded", rpm=1e9, tps=1e13)
        job = run_job(config, out)
        embedded_inside.append(job.summary["startup_seconds"])
    joined_outside, joined_inside = joined(path, args.repeat) if args.joined else ([], [])
    rows = [
        ("`evalpipe --version` (interpreter + CLI imports)", spread(version)),
        ("command -> first request accepted (service side)", spread(outside)),
        ("job's startup_seconds (external service)", spread(inside)),
        ("job's startup_seconds (base_url: embedded)", spread(embedded_inside)),
    ]
    if args.joined:
        rows += [
            ("joined a running Ray: command -> first request accepted", spread(joined_outside)),
            ("joined a running Ray: job's startup_seconds", spread(joined_inside)),
        ]
    table(rows, ("measure", "median (min-max)"))
    print(f"load during the runs: {', '.join(loads)}")


if __name__ == "__main__":
    main()
