"""Bench s: what a scheduler's retry pays, through the Dagster asset (`evalpipe.dagster`).

Bench g (`job_kill.py`) kills `evalpipe run`; this one kills a scheduler's step instead: a
process that materializes one partition of an `evalpipe_asset` (Dagster's `materialize()`,
a Ray of its own, a Delta output) is killed with `kill -9` (its process group and what is left
of its session, as a cgroup kill) after `--after` seconds of sending, and the same partition is
materialized again, as the asset's retry policy or a backfill would. Then a third time, when
the partition is whole. Paid twice = requests the service accepted over the first two minus
the corpus's rows; the table is checked to hold every id of the night once.

The corpus: 800 distinct short states at 3,000 RPM against the embedded service with 0.3 s of
latency (about 15 requests in flight), as in bench g.

    .venv/bin/python bench/scheduler_retry.py              # 3 kills and their retries
    .venv/bin/python bench/scheduler_retry.py --repeat 5 --after 4
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import polars as pl

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import BENCH_DIR, KEY, KEY_ENV, ROOT, corpus, header, load, service, table, write_config
from job_kill import kill_all, kill_arguments

NIGHT = "2026-11-20"
# The step as Dagster runs it: the asset over the job config, one partition materialized; its
# metadata printed as the last line.
STEP = """
import json, sys
import dagster as dg
from evalpipe.dagster import evalpipe_asset

asset = evalpipe_asset(sys.argv[1], name="reviews_scored", start_date="2026-11-01")
result = dg.materialize([asset], partition_key=sys.argv[2])
[m] = result.asset_materializations_for_node("reviews_scored")
print(json.dumps({k: getattr(v, "value", v) for k, v in m.metadata.items()
                  if k not in ("summary", "table_uri")}, default=str))
"""


def materialize(config: Path, env: dict[str, str]) -> tuple[dict[str, Any], float]:
    """The partition materialized to the end: its metadata, and the seconds it took."""
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-c", STEP, str(config), NIGHT], cwd=ROOT, env=env,
                          capture_output=True, text=True)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1]), time.monotonic() - started


def one(config: Path, out: Path, embedded: Any, rows: int, after: float) -> tuple[str, ...]:
    env = {**os.environ, KEY_ENV: KEY}
    env.pop("RAY_ADDRESS", None)
    accepted = lambda: int(embedded.stats()["requests_accepted"])  # noqa: E731
    shutil.rmtree(out, ignore_errors=True)
    before = accepted()
    step = subprocess.Popen([sys.executable, "-c", STEP, str(config), NIGHT], cwd=ROOT, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)  # fmt: skip
    while accepted() == before:  # start-up: wait for the first request
        assert step.poll() is None, "the step ended before it sent anything"
        time.sleep(0.05)
    time.sleep(after)
    kill_all(step.pid)
    step.wait()
    at_kill = accepted() - before
    retried, retry_seconds = materialize(config, env)
    paid = accepted() - before
    whole, whole_seconds = materialize(config, env)
    ids = pl.read_delta(str(out)).filter(pl.col("dt") == NIGHT)["id"]
    assert ids.n_unique() == len(ids) == rows, (ids.n_unique(), len(ids))
    return (
        f"{after:g} s", str(at_kill), str(retried["rows_skipped_committed_earlier"]),
        str(retried["requests"]), str(paid - rows), f"{retry_seconds:.1f}",
        str(whole["requests"]), f"{whole_seconds:.1f}",
    )  # fmt: skip


def main() -> None:
    args = kill_arguments(__doc__.splitlines()[0])
    header(f"s. a scheduler's retry after kill -9, through the Dagster asset ({load()})")
    path = corpus(args.rows, 20)
    found = []
    with service(rpm=args.rpm, latency=args.latency) as embedded:
        config, out = write_config(
            "scheduler", path, embedded.base_url, rpm=args.rpm, tps=1e9,
            extra={"output": {"format": "delta"}},
        )  # fmt: skip
        for _ in range(args.repeat):
            found.append(one(config, out, embedded, args.rows, args.after))
    table(found, ("kill after", "paid at kill", "retry skipped", "retry sent", "paid twice",
                  "retry s", "third sent", "third s"))  # fmt: skip
    print(f"(corpus {args.rows} rows at {args.rpm:g} RPM, latency {args.latency:g} s, Delta "
          f"output; BENCH_DIR {BENCH_DIR})")  # fmt: skip


if __name__ == "__main__":
    main()
