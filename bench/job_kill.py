"""Bench g: requests paid twice when a run is killed or stopped, then run again.

An 800-row corpus at 3,000 RPM against the embedded service with 0.3 s of latency: about 15
requests are in flight at any moment. The job is started as a scheduler starts it (a session
of its own), and after `--after` seconds of sending it is
  - `kill -9`-ed (the process group, then whatever of its session survives, as a cgroup kill
    does), or
  - sent SIGTERM (a clean stop: in-flight requests finish and are journaled),
then the same command runs to the end. Paid twice = requests the service accepted in both runs
minus the distinct requests of the corpus; the output is checked to hold every id once.

    .venv/bin/python bench/job_kill.py                    # kill -9 and SIGTERM, 3 times each
    .venv/bin/python bench/job_kill.py --repeat 5 --after 4
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import (
    BENCH_DIR,
    EVALPIPE,
    KEY,
    KEY_ENV,
    ROOT,
    corpus,
    header,
    load,
    service,
    table,
    write_config,
)


def _session(pid: int) -> int | None:
    try:
        return os.getsid(pid)
    except OSError:
        return None


def kill_all(leader: int) -> None:
    """SIGKILL to the run's process group and every process left in its session."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(leader, signal.SIGKILL)
    for _ in range(200):
        left = [p for p in psutil.process_iter() if _session(p.pid) == leader]
        if not left:
            return
        for process in left:
            with contextlib.suppress(psutil.Error):
                process.kill()
        time.sleep(0.05)


def one(mode: str, config: Path, out: Path, embedded: object, after: float) -> tuple[int, int]:
    """(paid twice, rows in the output) for one interrupted run and its rerun."""
    env = {**os.environ, KEY_ENV: KEY}
    env.pop("RAY_ADDRESS", None)
    accepted = lambda: int(embedded.stats()["requests_accepted"])  # type: ignore[attr-defined]  # noqa: E731
    before = accepted()
    command = [EVALPIPE, "run", str(config), "--restart", "--progress-interval", "3600"]
    proc = subprocess.Popen(
        command, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        start_new_session=True,
    )  # fmt: skip
    while accepted() == before:  # start-up: wait for the first request
        time.sleep(0.05)
    time.sleep(after)
    if mode == "kill -9":
        kill_all(proc.pid)
    else:
        proc.send_signal(signal.SIGTERM)
    proc.wait()
    again = [EVALPIPE, "run", str(config), "--progress-interval", "3600"]
    subprocess.run(again, cwd=ROOT, env=env, capture_output=True, check=True)
    ids = pq.read_table(sorted(out.glob("part-*.parquet")), columns=["id"])["id"]
    assert len(ids) == len(set(ids.to_pylist())), "an id is in the output twice"
    return accepted() - before, len(ids)


def kill_arguments(description: str) -> argparse.Namespace:
    """The scenario's flags (bench g's, and bench s's: `scheduler_retry.py`)."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--rows", type=int, default=800)
    parser.add_argument("--rpm", type=float, default=3000)
    parser.add_argument("--latency", type=float, default=0.3)
    parser.add_argument("--after", type=float, default=5.0, help="seconds of sending first")
    parser.add_argument("--repeat", type=int, default=3)
    return parser.parse_args()


def main() -> None:
    args = kill_arguments(__doc__.splitlines()[0])
    header(f"g. requests paid twice after a kill ({load()})")
    path = corpus(args.rows, 20)
    rows = []
    with service(rpm=args.rpm, latency=args.latency) as embedded:
        config, out = write_config("kill", path, embedded.base_url, rpm=args.rpm, tps=1e9)
        for mode in ("kill -9", "SIGTERM"):
            for _ in range(args.repeat):
                paid, written = one(mode, config, out, embedded, args.after)
                twice = paid - args.rows
                rows.append((mode, f"{args.after:g} s", str(written), str(paid), str(twice)))
    table(rows, ("stop", "after", "rows out", "accepted", "paid twice"))
    print(f"(corpus {args.rows} rows at {args.rpm:g} RPM, latency {args.latency:g} s; "
          f"BENCH_DIR {BENCH_DIR})")  # fmt: skip


if __name__ == "__main__":
    main()
