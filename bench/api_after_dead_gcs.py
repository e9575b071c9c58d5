"""Bench: the Python API's next call after the kept Ray's GCS died (a notebook's next cell).

In one process, as a notebook keeps it: `ep.score` of 10 rows starts a local Ray and keeps it;
then the Ray's `gcs_server` is killed with SIGKILL, and the same call on 10 fresh rows is timed
from the kill to the service's first request of the call, and to the call's return. The next
call finds the kept Ray dead, lets it go and starts a fresh one (`evalpipe.cluster`); what it
waited through before that fresh start is what this measures. Three rounds, each in a process
of its own (each round's first call starts its Ray).

    .venv/bin/python bench/api_after_dead_gcs.py
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import header

ROUNDS = 3

ROUND = r"""
import json, os, tempfile, threading, time, warnings
import polars as pl
import psutil
import evalpipe as ep
from evalpipe.service import EmbeddedService, ServiceSettings

warnings.simplefilter("ignore")
os.environ["EVAL_API_KEY"] = "bench-key"
os.environ["XDG_CACHE_HOME"] = tempfile.mkdtemp(prefix="evalpipe-bench-gcs-")
questions = {"helpful": ep.Noul("Is the review helpful?", true="specific", false="vague")}
settings = ServiceSettings(api_key="bench-key", rpm=1e9, tps=1e13)
with EmbeddedService(settings) as service:
    svc = ep.Service(service.base_url, model="model-1.13.0", key_env="EVAL_API_KEY",
                     limits={"requests_per_minute": 60_000, "tokens_per_second": 1e9})

    def call(n):
        df = pl.DataFrame({"id": range(10), "text": [f"call {n} row {i}" for i in range(10)]})
        return ep.score(df, id="id", state="text", questions=questions, service=svc,
                        progress=False)

    call(1)
    [gcs] = [p for p in psutil.Process().children(recursive=True) if p.name() == "gcs_server"]
    before = service.stats()["requests_accepted"]
    seen = []

    def first():
        while service.stats()["requests_accepted"] <= before:
            time.sleep(0.002)
        seen.append(time.monotonic() - t0)

    t0 = time.monotonic()
    gcs.kill()
    watch = threading.Thread(target=first)
    watch.start()
    out = call(2)
    done = time.monotonic() - t0
    watch.join()
    print(json.dumps({"first_request": seen[0], "returned": done, "rows": out.height}))
"""


def main() -> None:
    header("The API's next call after the kept Ray's GCS was killed (SIGKILL)")
    firsts, returns = [], []
    for n in range(1, ROUNDS + 1):
        ran = subprocess.run(
            [sys.executable, "-c", ROUND], capture_output=True, text=True, check=True,
            env={**os.environ, "PYTHONWARNINGS": "ignore"},
        )  # fmt: skip
        found = json.loads(ran.stdout.strip().splitlines()[-1])
        assert found["rows"] == 10, found
        firsts.append(found["first_request"])
        returns.append(found["returned"])
        print(f"round {n}: the call's first request {found['first_request']:.2f} s after the "
              f"kill, the call back {found['returned']:.2f} s after it")  # fmt: skip
    print(f"median: first request {statistics.median(firsts):.2f} s, "
          f"call back {statistics.median(returns):.2f} s")  # fmt: skip


if __name__ == "__main__":
    main()
