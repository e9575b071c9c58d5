"""Bench k: the Python API's rerun of a scored cell, all answers cached.

A notebook's cell `ep.score(corpus, ...)` run again. The cache is warmed as bench h warms it
(the embedded service's own evaluator's answers, written through evalpipe.cache), then the same
`ep.score` call (no `output=`) is made twice in one process on the corpus's Parquet file: the
first pays for the imports and builds its table from the answer cache into the folder it keeps
(`evalpipe.api.kept`); the second, the rerun, resumes that finished output. Target (issue 25):
100,000 rows back in <= 3 s. A third call writes a new output (`output=`), so every row is
answered by the answer cache again: the figure for a cell whose call changed. The job runs on
this thread (no event loop here), so the thread's CPU time is the job's driver's: a figure that
other processes on a shared machine inflate less than the wall time.

    .venv/bin/python bench/api_cached.py --rows 100000
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import (
    BENCH_DIR,
    KEY,
    KEY_ENV,
    QUESTIONS,
    corpus,
    header,
    load,
    service,
    write_config,
)
from job_cache import warm_by_evaluating


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=100_000)
    args = parser.parse_args()
    header(f"Bench k: ep.score of {args.rows:,} rows, every answer cached")
    home = BENCH_DIR / "api-xdg"
    shutil.rmtree(home, ignore_errors=True)
    os.environ["XDG_CACHE_HOME"] = str(home)  # the API uses the default cache: this one
    os.environ[KEY_ENV] = KEY
    path = corpus(args.rows, 20)
    with service() as embedded:
        config, _ = write_config(
            "api-cached", path, embedded.base_url, rpm=1e9, tps=1e13,
            extra={"cache": {"enabled": True, "path": str(home / "evalpipe")}},
        )  # fmt: skip
        started = time.monotonic()
        warm_by_evaluating(path, config)
        print(f"warmed in {time.monotonic() - started:.0f} s", flush=True)
        import evalpipe as ep

        svc = ep.Service(
            embedded.base_url, model="model-1.13.0", key_env=KEY_ENV,
            limits={"requests_per_minute": 1e9, "tokens_per_second": 1e13},
        )  # fmt: skip
        calls = (("call 1", None), ("call 2 (the rerun)", None), ("a new output", "api-cached"))
        for name, folder in calls:
            out = None if folder is None else BENCH_DIR / "out" / folder
            if out is not None:
                shutil.rmtree(out, ignore_errors=True)
            before = embedded.stats()["requests_accepted"]
            t, cpu = time.monotonic(), time.thread_time()
            df = ep.score(path, id="id", state="text", questions=QUESTIONS, service=svc,
                          output=out, progress=False)  # fmt: skip
            wall, cpu = time.monotonic() - t, time.thread_time() - cpu
            sent = embedded.stats()["requests_accepted"] - before
            print(f"{name}: {wall:.2f} s (this thread's CPU {cpu:.2f} s), {df.height:,} "
                  f"rows, {sent} requests, load {load()}", flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
