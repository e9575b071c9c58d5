"""What the run's telemetry costs the driver: a sample of the counters, a scrape, a push.

    .venv/bin/python bench/observe_overhead.py [--calls 100000] [--pushes 50]

The driver takes a sample every 0.25 s at most (`evalpipe.engine.progress.WATCH_SECONDS`); a scrape
or a push builds the exposition on a thread of its own. This prints the CPU time of each, and
the wall time of a push to Debian's Pushgateway on loopback (started here on a free port, with
a persistence file of its own, when /usr/bin/prometheus-pushgateway exists).
"""

from __future__ import annotations

import argparse
import socket
import subprocess
import tempfile
import threading
import time
from pathlib import Path

import httpx
from prometheus_client import generate_latest

from evalpipe.config import MetricsConfig
from evalpipe.engine.observed import sample
from evalpipe.engine.progress import Counters
from evalpipe.observe import RunFacts, Telemetry
from evalpipe.observe.metrics import Reading
from evalpipe.observe.prom import Pusher, registry_of

PUSHGATEWAY = Path("/usr/bin/prometheus-pushgateway")


def _counters() -> Counters:
    c = Counters(rows_total=100_000, rows_skipped=1_000)
    c.rows_done, c.answered, c.requests, c.attempts, c.input_tokens = (
        50_000,
        49_000,
        49_500,
        50_100,
        23_000_000,
    )
    c.errors.update({"rate_limited": 500, "invalid_state": 500})
    return c


def per_call(calls: int) -> None:
    c = _counters()
    run = RunFacts("bench", "bench", "out/bench", "model-1.13.0", "embedded", 1200, 250_000)
    watch = Telemetry(run, MetricsConfig())
    started = time.process_time()
    for _ in range(calls):
        watch.update(sample(c))
    each = (time.process_time() - started) / calls
    watch.close("finished")
    print(
        f"sample + update, nothing exported:  {each * 1e6:7.2f} us CPU per call ({calls:,} calls)"
    )
    reading = Reading(run)
    reading.add(sample(c))
    registry = registry_of(reading, threading.Lock())
    started = time.process_time()
    for _ in range(1000):
        text = generate_latest(registry)
    each = (time.process_time() - started) / 1000
    print(f"one exposition (a scrape or a push): {each * 1e6:7.1f} us CPU, {len(text):,} bytes")


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def pushes(n: int) -> None:
    if not PUSHGATEWAY.exists():
        print("push: no /usr/bin/prometheus-pushgateway (make prometheus), skipped")
        return
    port = _free_port()
    with tempfile.TemporaryDirectory() as home:
        process = subprocess.Popen(
            [str(PUSHGATEWAY), f"--web.listen-address=127.0.0.1:{port}",
             f"--persistence.file={home}/metrics.data"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        try:
            url = f"http://127.0.0.1:{port}"
            while True:
                try:
                    if httpx.get(f"{url}/-/ready", timeout=1).status_code == 200:
                        break
                except httpx.HTTPError:
                    time.sleep(0.1)
            run = RunFacts("bench", "bench", "out/bench", "model-1.13.0", "embedded", 1200, 1)
            reading = Reading(run)
            reading.add(sample(_counters()))
            pusher = Pusher(registry_of(reading, threading.Lock()), url, "bench", "out/bench",
                            3600, print)  # fmt: skip
            walls = []
            for _ in range(n):
                started = time.perf_counter()
                assert pusher.push()
                walls.append(time.perf_counter() - started)
            pusher.close()
            walls.sort()
            print(f"push to the Pushgateway on loopback: median {walls[n // 2] * 1e3:.2f} ms, "
                  f"max {walls[-1] * 1e3:.2f} ms ({n} pushes)")  # fmt: skip
        finally:
            process.terminate()
            process.wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=100_000)
    parser.add_argument("--pushes", type=int, default=50)
    args = parser.parse_args()
    per_call(args.calls)
    pushes(args.pushes)


if __name__ == "__main__":
    main()
