"""Bench m: an interrupt in the middle of `ep.score`, and the call after it, in one process.

A 300-row call against the embedded service, where half the answers come at once and half only
after 8 s; once the fast ones are in (every request in flight waits on a slow one), the process
sends itself a real SIGINT. Measured: seconds from the SIGINT to the KeyboardInterrupt, what
the service answered (billed) after the SIGINT, then the same call again: when its first
request leaves (the interrupted call ended its workers and the account's Budget, so this call
starts new ones) and what it pays (the answers paid before the interrupt come from the cache).
A finished call before them all warms Ray up (it is not the figure).

    .venv/bin/python bench/api_interrupt.py
"""

from __future__ import annotations

import os
import signal
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import polars as pl

from common import KEY, KEY_ENV, header, load
from evalpipe.service import EmbeddedService, ServiceSettings

ROWS = 300


def interrupt_when_settled(service: EmbeddedService, sent: list[tuple[float, int]]) -> None:
    """SIGINT to this process once the service's answers hold still with requests in flight;
    notes (time, answered) at that moment in `sent`."""
    last, since = -1, time.monotonic()
    while True:
        stats = service.stats()
        now = stats["requests_answered"]
        if now != last:
            last, since = now, time.monotonic()
        elif now > 0 and stats["inflight"] > 0 and time.monotonic() - since > 1.0:
            sent.append((time.monotonic(), now))
            os.kill(os.getpid(), signal.SIGINT)
            return
        time.sleep(0.05)


def watch_first(service: EmbeddedService, before: int, t0: float, seen: list[float]) -> None:
    while service.stats()["requests_accepted"] <= before:
        time.sleep(0.002)
    seen.append(time.monotonic() - t0)


def main() -> None:
    header("Bench m: ep.score interrupted by SIGINT, and the call after it")
    os.environ[KEY_ENV] = KEY
    os.environ["XDG_CACHE_HOME"] = tempfile.mkdtemp(prefix="evalpipe-bench-m-")
    import evalpipe as ep

    questions = {"helpful": ep.Noul("Is the review helpful?", true="specific", false="vague")}
    settings = ServiceSettings(
        api_key=KEY, rpm=1e9, tps=1e13, fault_slow=0.5, slow_seconds=8.0, fault_seed=3
    )
    with EmbeddedService(settings, mode="process") as service:
        svc = ep.Service(
            service.base_url, model="model-1.13.0", key_env=KEY_ENV,
            limits={"requests_per_minute": 60_000, "tokens_per_second": 1e9},
        )  # fmt: skip
        options = {"id": "id", "state": "text", "questions": questions, "service": svc}
        ep.score(pl.DataFrame({"id": [0], "text": ["warm-up"]}), **options, progress=False)
        warm = service.stats()["requests_answered"]
        df = pl.DataFrame({"id": range(ROWS), "text": [f"row {i}" for i in range(ROWS)]})
        sent: list[tuple[float, int]] = []
        threading.Thread(target=interrupt_when_settled, args=(service, sent), daemon=True).start()
        try:
            ep.score(df, **options, progress=False)
            raise SystemExit("the call finished before the interrupt")
        except KeyboardInterrupt:
            stopped = time.monotonic() - sent[0][0]
        time.sleep(1.0)
        after = service.stats()
        billed_after = after["requests_answered"] - sent[0][1]
        print(f"interrupt: KeyboardInterrupt {stopped:.2f} s after SIGINT; "
              f"{sent[0][1] - warm} rows answered before it, {billed_after} after; in flight "
              f"at the service now "
              f"{after['inflight']}; load {load()}", flush=True)  # fmt: skip
        before = after["requests_answered"]
        t0 = time.monotonic()
        seen: list[float] = []
        watch = threading.Thread(
            target=watch_first, args=(service, after["requests_accepted"], t0, seen)
        )
        watch.start()
        again = ep.score(df, **options, progress=False)
        wall = time.monotonic() - t0
        watch.join()
        paid = service.stats()["requests_answered"] - before
        print(f"next call: first request {seen[0]:.2f} s after the call, {again.height} rows "
              f"back in {wall:.2f} s (8 s of slow answers), {paid} requests paid "
              f"({ROWS - paid} from the cache); load {load()}", flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
