"""Bench h: a run answered from a warm answer cache: its wall time and its memory.

For each corpus size (distinct short states, as bench e), the cache is warmed first, then the
whole job (`evalpipe run`, a subprocess, as a user runs it) scores the corpus into a new output
against the embedded service in its own process. What is measured: the command's wall time
(from its start to its exit: Python, Ray, the scans, the lookups, the Parquet written), the
evaluate requests the service accepted (must be 0), and the peak RSS by role (as bench e;
with nothing to send, the job starts no Ray actor).

Warming: `--warm evaluate` (the default) writes the cache through evalpipe.cache.answers with the
answers the embedded service's own evaluator gives for each state (what a first run would
store, without its sending time); `--warm run` warms it with a real first run.

    .venv/bin/python bench/job_cache.py                            # 100,000 and 1,000,000 rows
    .venv/bin/python bench/job_cache.py --rows 100000 --warm run   # the 20 s target alone
"""

from __future__ import annotations

import argparse
import shutil
import sys
import time
from pathlib import Path

import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import (
    BENCH_DIR,
    QUESTIONS,
    corpus,
    header,
    load,
    mib,
    output_rows,
    run_job,
    service,
    table,
    write_config,
)
from evalpipe.cache.answers import open_job_cache
from evalpipe.cache.store import Store
from evalpipe.config import load_config
from evalpipe.planning import Planner, state_key
from evalpipe.service.evaluator import answer as evaluate, compile_questions

MODEL = "model-1.13.0"
ROLES = ("driver", "actor", "budget")
# A Ray of the job's own, as on a machine where no other Ray runs: without an address, ray.init
# joins a cluster that `ray start` left running on the machine.
LOCAL_RAY = ["--ray-address", "local"]


def warm_by_evaluating(corpus_path: Path, config: Path) -> int:
    """Write the evaluator's answer of every (state, question) into the job's cache; returns
    how many states. The same keys and values a run writes (JobCache.add, commit)."""
    planner = Planner(QUESTIONS)
    compiled = compile_questions(QUESTIONS)
    cache = open_job_cache(load_config(config), QUESTIONS, planner.question_tokens)
    assert cache.on, cache.note
    states = 0
    for batch in pq.ParquetFile(corpus_path).iter_batches(batch_size=10_000, columns=["text"]):
        for text in batch.column(0).to_pylist():
            request = planner.plan(text).requests
            cache.add(state_key(text), evaluate(text, compiled), MODEL, request[0].tokens, request)
            states += 1
        cache.commit()  # at most 30,000 answers wait: JobCache keeps 50,000 for a commit
    cache.close()
    return states


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", default="100000,1000000", help="corpus sizes, comma-separated")
    parser.add_argument("--warm", choices=("evaluate", "run"), default="evaluate")
    parser.add_argument("--actors", type=int, default=2)
    args = parser.parse_args()
    sizes = [int(n) for n in args.rows.split(",")]
    header(f"Bench h: runs answered from a warm cache ({', '.join(f'{n:,}' for n in sizes)} rows)")
    rows_out, peaks = [], {}
    for n in sizes:
        path = corpus(n, 20)
        folder = BENCH_DIR / f"cache-{n}"
        shutil.rmtree(folder, ignore_errors=True)
        with service() as embedded:
            config, out = write_config(
                f"cache-{n}", path, embedded.base_url, rpm=1e9, tps=1e13, actors=args.actors,
                extra={"cache": {"enabled": True, "path": str(folder)}},
            )  # fmt: skip
            started = time.monotonic()
            if args.warm == "run":
                assert run_job(config, out, args=LOCAL_RAY).returncode == 0  # out: --restart
            else:
                warm_by_evaluating(path, config)
            warmed = time.monotonic() - started
            before = embedded.stats()["requests_accepted"]
            job = run_job(config, out, memory=True, args=LOCAL_RAY)
            requests = embedded.stats()["requests_accepted"] - before
        assert job.returncode == 0 and job.memory is not None
        if requests:  # a warm cache should leave nothing to send: say what the job said
            print(job.stderr[-3000:], file=sys.stderr)
        s, wall = job.summary, job.ended - job.started
        entries = Store.open(folder / "answers.sqlite3", write=False)
        cached = entries.stats()
        entries.close()
        peaks[n] = job.memory.peak
        print(
            f"{n:,} rows: warmed in {warmed:.0f} s ({args.warm}); cache {cached['entries']:,} "
            f"answers, {mib(cached['bytes'])}; run {wall:.1f} s from the command to its exit "
            f"({s['wall_seconds']:.1f} s in the job, {s['startup_seconds']:.1f} s start-up), "
            f"{requests} evaluate requests, {s['rows_from_cache']:,} rows from the cache, "
            f"{output_rows(out):,} output rows",
            flush=True,
        )
        rows_out.append(
            (f"{n:,}", f"{wall:.1f} s", str(requests), f"{s['rows_from_cache']:,}",
             *(mib(job.memory.peak.get(role, 0)) for role in ROLES), load())
        )  # fmt: skip
    table(rows_out, ("rows", "wall", "requests", "from cache", *ROLES, "load"))
    small, large = sizes[0], sizes[-1]
    if large != small:
        for role in ("driver", "actor"):
            if not peaks[small].get(role):
                continue  # nothing to send: no actor was started
            ratio = peaks[large].get(role, 0) / max(1, peaks[small].get(role, 0))
            print(f"{role}: {large:,}-row peak / {small:,}-row peak = {ratio:.2f}")


if __name__ == "__main__":
    main()
