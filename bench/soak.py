"""Soak: one long job at the limit while our own parts fail at random; every row once at the end.

A run of many minutes at the account's limit against the embedded service (in its own process,
enforcing that limit, with its faults on at low rates: 529s, 500s, dropped connections, 200s cut
short, hangs that end in a dropped connection), while this script breaks the job's own parts at
random moments (on average every `--fault-every` seconds, one at a time):

- `budget`: `ray.kill` of the account's shared Budget actor (the job must replace it);
- `cache-lock`: another connection holds the answer cache under a write lock for 5-30 s;
- `cache-scribble`: random bytes over the middle of the cache file (at most once);
- `s3`: the S3 server (moto, on loopback, holding the output) stopped for 5-20 s;
- `disk-full`: the output's local staging folder (a small tmpfs, when this machine lets us mount
  one) filled up: the run ends with exit 5, the ballast goes, and the same command resumes
  (once, in the last quarter of the soak, so the first run is long enough for the slopes).

The job joins a Ray this script starts (so it can find and kill the Budget), `--ray-address`.
Every 5 s the job's driver and its Worker actors' processes (`ray::Worker...`: not the Budget,
whose process is new after each kill, nor Ray's own) are sampled: RSS and open file descriptors.
At the end: the output read back from S3 (every id exactly once, rows in error by type), the
service's 429 share, the resumes, the faults done, and the slope of RSS and of open fds per
minute (least squares over the longest run, less its first minute and last 15 s: its start-up
and shut-down), which should be flat.

    .venv/bin/python bench/soak.py                  # 30 minutes
    .venv/bin/python bench/soak.py --minutes 4      # a quick one
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import logging
import os
import random
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psutil
import pyarrow.fs as pafs
import pyarrow.parquet as pq
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import BENCH_DIR, EVALPIPE, KEY, KEY_ENV, QUESTIONS, corpus, header, load, table
from evalpipe.limits.account import NAMESPACE, account_name
from evalpipe.service import EmbeddedService, ServiceSettings
from s3 import point_aws_at

SERVICE_FAULTS: dict[str, Any] = {
    "fault_529": 0.01,
    "fault_500": 0.005,
    "fault_drop": 0.003,
    "fault_truncate": 0.003,
    "fault_hang": 0.002,
    "slow_seconds": 3.0,
}
WEIGHTS = {"budget": 3, "cache-lock": 3, "s3": 3, "cache-scribble": 1, "disk-full": 1}
SAMPLE_SECONDS = 5.0
WARM_UP = 60.0  # seconds of each run left out of the slopes ...
WIND_DOWN = 15.0  # ... and at its end


class S3:
    """moto's S3 server on loopback, stopped and started again on the same port."""

    def __init__(self) -> None:
        import logging

        import boto3

        logging.getLogger("werkzeug").setLevel(logging.WARNING)
        self._server = self._new(0)
        self.host, self.port = self._server.get_host_and_port()
        point_aws_at(self.host, self.port, "soak")
        boto3.client("s3").create_bucket(Bucket="soak")

    @staticmethod
    def _new(port: int) -> Any:
        from moto.server import ThreadedMotoServer

        server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
        server.start()
        return server

    def outage(self, seconds: float) -> None:
        self._server.stop()
        time.sleep(seconds)
        self._server = self._new(self.port)

    def close(self) -> None:
        self._server.stop()


@contextlib.contextmanager
def small_disk(path: Path, size: str) -> Iterator[bool]:
    """A tmpfs of `size` at `path` if this machine lets us mount one (True), else a folder."""
    path.mkdir(parents=True, exist_ok=True)
    libc = ctypes.CDLL(None, use_errno=True)
    mounted = libc.mount(b"tmpfs", str(path).encode(), b"tmpfs", 0, f"size={size}".encode()) == 0
    try:
        yield mounted
    finally:
        if mounted:
            libc.umount2(str(path).encode(), 2)


class Faults:
    """Our own parts, broken at random moments in a thread; `done` counts each kind."""

    def __init__(
        self, s3: S3, cache: Path, disk: Path | None, budget: str, every: float, seed: int,
        disk_after: float,
    ) -> None:  # fmt: skip
        self._s3, self._cache, self._disk, self._budget = s3, cache, disk, budget
        self._every, self._disk_after = every, disk_after
        self.done: dict[str, int] = dict.fromkeys(WEIGHTS, 0)
        self.ballast: Path | None = None
        self._stop = threading.Event()
        self._rng = random.Random(seed)
        self._thread = threading.Thread(target=self._run, name="faults", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        faults: dict[str, Callable[[], None]] = {
            "budget": self._kill_budget,
            "cache-lock": self._lock_cache,
            "cache-scribble": self._scribble_cache,
            "s3": self._stop_s3,
            "disk-full": self._fill_disk,
        }
        while not self._stop.wait(self._rng.expovariate(1 / self._every)):
            kinds = [k for k in WEIGHTS if self._possible(k)]
            kind = self._rng.choices(kinds, [WEIGHTS[k] for k in kinds])[0]
            try:
                faults[kind]()
            except Exception as exc:  # a fault that could not be made is noted, not fatal
                _say(f"{kind}: not made ({type(exc).__name__}: {exc})")
                continue
            self.done[kind] += 1

    def _possible(self, kind: str) -> bool:
        if kind == "disk-full":
            late = time.monotonic() >= self._disk_after
            return self._disk is not None and late and self.done[kind] == 0
        if kind == "cache-scribble":
            return self._cache.exists() and self.done[kind] == 0
        return kind != "cache-lock" or self._cache.exists()

    def _kill_budget(self) -> None:
        import ray

        ray.kill(ray.get_actor(self._budget, namespace=NAMESPACE))
        _say("killed the account's Budget actor")

    def _lock_cache(self) -> None:
        seconds = self._rng.uniform(5, 30)
        other = sqlite3.connect(self._cache, isolation_level=None, timeout=30)
        try:
            other.execute("BEGIN EXCLUSIVE")
            other.execute("DELETE FROM meta WHERE name = 'nothing'")
            _say(f"holding the answer cache under a write lock for {seconds:.0f}s")
            time.sleep(seconds)
            other.execute("ROLLBACK")
        finally:
            other.close()

    def _scribble_cache(self) -> None:
        size = self._cache.stat().st_size
        with self._cache.open("r+b") as f:
            f.seek(size // 2)
            f.write(os.urandom(min(64 * 1024, size // 4)))
        _say("scribbled over the middle of the answer cache")

    def _stop_s3(self) -> None:
        seconds = self._rng.uniform(5, 20)
        _say(f"S3 server stopped for {seconds:.0f}s")
        self._s3.outage(seconds)

    def _fill_disk(self) -> None:
        assert self._disk is not None
        ballast = self._disk / "ballast"
        with ballast.open("wb") as f, contextlib.suppress(OSError):
            f.write(b"\0" * (64 << 20))
        self.ballast = ballast
        _say("filled the output's staging disk")

    def free(self) -> None:
        if self.ballast is not None:
            self.ballast.unlink(missing_ok=True)
            self.ballast = None

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(60)


def _say(what: str) -> None:
    print(f"  {time.strftime('%H:%M:%S')} {what}", flush=True)


# --------------------------------------------------------------------------- watching


class Usage:
    """RSS and open fds of the job's driver and of its Worker actors' processes."""

    def __init__(self) -> None:
        self.samples: list[tuple[int, float, int, int, int, int]] = []  # run, t, 4 figures

    def sample(self, run: int, driver: psutil.Process) -> None:
        actors = [p for p in psutil.Process().children(recursive=True) if _is_job_worker(p)]
        d_rss, d_fds = _usage([driver, *_children(driver)])
        a_rss, a_fds = _usage(actors)
        self.samples.append((run, time.monotonic(), d_rss, d_fds, a_rss, a_fds))

    def slopes(self) -> dict[str, float]:
        """Per minute, over the longest run after its first minute: driver and actors' RSS
        (MiB), their open fds."""
        runs: dict[int, list[tuple[int, float, int, int, int, int]]] = {}
        for sample in self.samples:
            runs.setdefault(sample[0], []).append(sample)
        longest = max(runs.values(), key=lambda s: s[-1][1] - s[0][1])
        start = longest[0][1]
        end = longest[-1][1]
        kept = [s for s in longest if WARM_UP <= s[1] - start <= end - start - WIND_DOWN]
        kept = kept or longest
        t = [(s[1] - start) / 60 for s in kept]
        names = ("driver_rss_mib", "driver_fds", "actors_rss_mib", "actors_fds")
        scale = (1 / 2**20, 1, 1 / 2**20, 1)
        return {
            name: _slope(t, [s[2 + i] * scale[i] for s in kept]) for i, name in enumerate(names)
        } | {"minutes": t[-1] - t[0] if t else 0.0}

    def last(self) -> tuple[int, int, int, int]:
        """The last sample before the last run's wind-down."""
        if not self.samples:
            return (0, 0, 0, 0)
        end = self.samples[-1][1] - WIND_DOWN
        kept = [s for s in self.samples if s[1] <= end] or self.samples
        return kept[-1][2:]


def _is_job_worker(process: psutil.Process) -> bool:
    """A Worker actor's process (Ray titles it `ray::Worker`, `ray::Worker.process`, ...)."""
    with contextlib.suppress(psutil.Error):
        return any(part.startswith("ray::Worker") for part in process.cmdline()[:1])
    return False


def _children(process: psutil.Process) -> list[psutil.Process]:
    with contextlib.suppress(psutil.Error):
        return process.children(recursive=True)
    return []


def _usage(processes: list[psutil.Process]) -> tuple[int, int]:
    rss = fds = 0
    for process in processes:
        with contextlib.suppress(psutil.Error):
            rss += process.memory_info().rss
            fds += process.num_fds()
    return rss, fds


def _slope(t: list[float], y: list[float]) -> float:
    if len(t) < 2:
        return 0.0
    mt, my = sum(t) / len(t), sum(y) / len(y)
    var = sum((a - mt) ** 2 for a in t)
    return sum((a - mt) * (b - my) for a, b in zip(t, y, strict=True)) / var if var else 0.0


# --------------------------------------------------------------------------- the soak


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=30.0, help="how long the job runs")
    parser.add_argument("--rpm", type=float, default=3000.0, help="the account's limit")
    parser.add_argument("--fault-every", type=float, default=30.0, help="mean seconds apart")
    parser.add_argument("--seed", type=int, default=0, help="of the faults' times and kinds")
    args = parser.parse_args()
    title = f"{args.minutes:g} minutes at {args.rpm:g} RPM with faults at random (seed {args.seed})"
    header(f"Soak: {title}")
    rows = int(args.rpm / 60 * args.minutes * 60)
    source = corpus(rows, 20, first=10_000_000)  # states no other bench's cache has seen
    root = BENCH_DIR / f"soak-{time.strftime('%Y%m%d-%H%M%S')}"
    os.environ[KEY_ENV] = KEY
    import ray

    ray.init(address="local", num_cpus=2, include_dashboard=False, logging_level=logging.ERROR)
    s3 = S3()
    settings = ServiceSettings(api_key=KEY, rpm=args.rpm, tps=1e9, **SERVICE_FAULTS)
    try:
        with (
            EmbeddedService(settings, mode="process") as service,
            small_disk(root / "staging", "8m") as mounted,
        ):
            config = _config(root, source, service.base_url, args.rpm)
            cache = root / "cache" / "answers.sqlite3"
            budget = account_name(service.base_url, KEY)
            started = time.monotonic()
            disk = root / "staging" if mounted else None
            late = started + 0.75 * args.minutes * 60
            faults = Faults(s3, cache, disk, budget, args.fault_every, args.seed, late)
            usage = Usage()
            exits = _run_until_done(config, root, ray.get_runtime_context().gcs_address,
                                    faults, usage)  # fmt: skip
            elapsed = time.monotonic() - started
            faults.stop()
            stats = service.stats()
        _report(rows, s3, exits, faults.done, usage, stats, elapsed, mounted)
    finally:
        s3.close()
        ray.shutdown()


def _config(root: Path, source: Path, base_url: str, rpm: float) -> Path:
    config = {
        "input": {"path": str(source), "id_column": "id", "state": "text"},
        "output": {"path": "s3://soak/out", "staging": str(root / "staging"), "part_rows": 2000},
        "service": {"base_url": base_url, "api_key_env": KEY_ENV},
        "model": "model-1.13.0",
        "limits": {"requests_per_minute": rpm, "tokens_per_second": 1e9},
        "cache": {"path": str(root / "cache" / "answers.sqlite3")},
        "questions": QUESTIONS,
    }
    root.mkdir(parents=True, exist_ok=True)
    path = root / "job.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


def _run_until_done(
    config: Path, root: Path, address: str, faults: Faults, usage: Usage
) -> list[int]:
    """`evalpipe run` until it exits 0 (a full disk freed, any other end resumed: at most 10)."""
    exits: list[int] = []
    command = [EVALPIPE, "run", str(config), "--ray-address", address, "--progress-interval", "60"]
    while len(exits) < 10:
        log = (root / f"run-{len(exits)}.log").open("w")
        job = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
        driver = psutil.Process(job.pid)
        while job.poll() is None:
            usage.sample(len(exits), driver)
            with contextlib.suppress(subprocess.TimeoutExpired):
                job.wait(SAMPLE_SECONDS)
        log.close()
        exits.append(job.returncode)
        last = (root / f"run-{len(exits) - 1}.log").read_text().strip().splitlines()[-1:]
        _say(f"run {len(exits)} exited {job.returncode}: {last[0] if last else ''}")
        if job.returncode == 0:
            break
        faults.free()
    return exits


def _report(
    rows: int,
    s3: S3,
    exits: list[int],
    done: dict[str, int],
    usage: Usage,
    stats: dict[str, Any],
    elapsed: float,
    mounted: bool,
) -> None:
    fs = pafs.FileSystem.from_uri("s3://soak")[0]
    out = pq.read_table("soak/out", filesystem=fs, columns=["id", "_error_type"])
    ids = out["id"]
    once = len(ids) == rows and len(ids.unique()) == rows
    errors: dict[str, int] = {}
    for kind in out["_error_type"].to_pylist():
        if kind is not None:
            errors[kind] = errors.get(kind, 0) + 1
    accepted = stats["requests_accepted"]
    limited = stats["responses"].get("429", 0)
    slopes = usage.slopes()
    d_rss, d_fds, a_rss, a_fds = usage.last()
    verdict = "every row exactly once" if once else "NOT every row once"
    print(f"\nrows {rows:,}; in the output {len(ids):,}, distinct {len(ids.unique()):,}: ", end="")
    print(f"{verdict}; in error {errors}")
    share = limited / max(1, accepted + limited)
    print(f"runs {len(exits)} (exits {exits}); {elapsed / 60:.1f} min; requests accepted ", end="")
    print(
        f"{accepted:,} ({accepted - rows:+,} beyond one per row: retries of the service's ", end=""
    )
    print(f"faults and re-paid requests); 429s {limited:,} ", end="")
    print(f"({share:.2%}); service faults {stats['faults']}")
    print(f"our faults {done} (disk-full {'on a tmpfs' if mounted else 'off: no tmpfs'})")
    table(
        [
            ("driver RSS", f"{d_rss / 2**20:.0f} MiB", f"{slopes['driver_rss_mib']:+.2f} MiB/min"),
            ("driver fds", str(d_fds), f"{slopes['driver_fds']:+.2f} /min"),
            ("workers RSS", f"{a_rss / 2**20:.0f} MiB", f"{slopes['actors_rss_mib']:+.2f} MiB/min"),
            ("workers fds", str(a_fds), f"{slopes['actors_fds']:+.2f} /min"),
        ],
        ("process", "at the end", f"slope over {slopes['minutes']:.1f} min (longest run)"),
    )
    print(f"load {load()}")


if __name__ == "__main__":
    main()
