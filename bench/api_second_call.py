"""Bench l: how soon the Python API's second call sends, in one process (a notebook's next cell).

`ep.score` of a 1-row and of a 200-row corpus, three times each in one process, against the
embedded service with 0.2 s of latency: the first call starts Ray, the account's Budget and the
job's workers; the next ones find Ray up and the last job's workers idle (`evalpipe.send.fleet`).
"first request" is when the service saw the call's first request, measured from the call.
Target (issue 25): the second call's first request leaves <= 1 s after the call.

    .venv/bin/python bench/api_second_call.py
"""

from __future__ import annotations

import os
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import polars as pl

from common import KEY, KEY_ENV, header, load
from evalpipe.service import EmbeddedService, ServiceSettings


def watch_first(service: EmbeddedService, before: int, t0: float, seen: list[float]) -> None:
    """Notes in `seen` the seconds from `t0` until the service accepted more than `before`."""
    while service.stats()["requests_accepted"] <= before:
        time.sleep(0.002)
    seen.append(time.monotonic() - t0)


def main() -> None:
    header("Bench l: ep.score's first request, first call and the next ones")
    os.environ[KEY_ENV] = KEY
    os.environ["XDG_CACHE_HOME"] = tempfile.mkdtemp(prefix="evalpipe-bench-l-")  # no cache hits
    import evalpipe as ep

    questions = {"helpful": ep.Noul("Is the review helpful?", true="specific", false="vague")}
    settings = ServiceSettings(api_key=KEY, rpm=1e9, tps=1e13, latency=0.2)
    with EmbeddedService(settings) as service:
        svc = ep.Service(
            service.base_url, model="model-1.13.0", key_env=KEY_ENV,
            limits={"requests_per_minute": 60_000, "tokens_per_second": 1e9},
        )  # fmt: skip
        for call in range(1, 7):
            rows = 1 if call % 2 else 200
            df = pl.DataFrame(
                {"id": range(rows), "text": [f"call {call} row {i}" for i in range(rows)]}
            )
            before = service.stats()["requests_accepted"]
            t0 = time.monotonic()
            seen: list[float] = []
            watch = threading.Thread(target=watch_first, args=(service, before, t0, seen))
            watch.start()
            out = ep.score(df, id="id", state="text", questions=questions, service=svc,
                           progress=False)  # fmt: skip
            wall = time.monotonic() - t0
            watch.join()
            print(f"call {call}: {rows:>3} rows, first request {seen[0]:.2f} s after the call, "
                  f"all back in {wall:.2f} s ({out.height} rows), load {load()}",
                  flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
