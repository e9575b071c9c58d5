"""Bench t: many hosts, one account, one Redis (`shared.url`, evalpipe.tier).

Each host is an `evalpipe run` with a home, a cache folder and a Ray of its own
(`--ray-address local`): they share nothing but a redis-server (Debian's, started here on
loopback with a password) and the key, against the embedded service with strict limits (1,200
RPM as a bucket of one second, 0.5 s median latency). Cases, as issue 45 judges them:

- `pace`: three hosts on three corpora at once. Targets: together >= 95% of the limit in the
  steady middle (all three sending), <= 0.5% of requests answered 429 (service side).
- `fresh`: then a fourth, fresh host over host a's corpus. Target: it sends nothing.
- `together`: two hosts started at once on one corpus. Target: each distinct state paid once
  (in flight aside).
- `killed`: one host; Redis killed `--kill-after` s into its sending. Targets: exit 0, a
  warning, every row exactly once.
- `password`: a wrong password. Targets: exit 2 within 2 s of the command, nothing sent.
- `lease`: a host on an S3 output (moto's server), a second started while it runs; the first
  killed (-9, its process group), the second retried every 2 s. Targets: the second exits 2
  at once while the first runs, and runs once the first's lease lapsed.

    .venv/bin/python bench/shared_tier.py                       # every case, ~6 minutes
    .venv/bin/python bench/shared_tier.py --cases pace,fresh --no-tier   # the same, alone
"""

from __future__ import annotations

import argparse
import os
import secrets
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import redis

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import (
    BENCH_DIR,
    EVALPIPE,
    KEY,
    KEY_ENV,
    ServiceWatch,
    corpus,
    header,
    load,
    run_job,
    service,
    write_config,
)

CASES = ("pace", "fresh", "together", "killed", "password", "lease")
PASSWORD = "bench-" + secrets.token_hex(6)
PASSWORD_ENV = "EVALPIPE_SHARED_PASSWORD"


class Redis:
    """Debian's redis-server on a free loopback port, with a password, saving nothing."""

    def __init__(self) -> None:
        import socket

        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            self.port = probe.getsockname()[1]
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> Redis:
        home = BENCH_DIR / f"redis-{self.port}"
        home.mkdir(parents=True, exist_ok=True)
        self.process = subprocess.Popen(
            ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
             "--appendonly", "no", "--dir", str(home), "--requirepass", PASSWORD],
            stdout=subprocess.DEVNULL,
        )  # fmt: skip
        client = redis.Redis(port=self.port, password=PASSWORD)
        for _ in range(200):
            try:
                client.ping()
                return self
            except redis.ConnectionError:
                time.sleep(0.05)
        raise RuntimeError("redis-server did not start")

    def stop(self) -> None:
        if self.process is not None:
            self.process.kill()
            self.process.wait()
            self.process = None


def host_env(name: str, tier: bool = True) -> dict[str, str]:
    """A host of its own: home and cache folder (fresh), the tier's password."""
    home = BENCH_DIR / "hosts" / f"{name}-{secrets.token_hex(3)}"
    (home / "cache").mkdir(parents=True)
    env = {"HOME": str(home), "XDG_CACHE_HOME": str(home / "cache")}
    return {**env, PASSWORD_ENV: PASSWORD} if tier else env


def config(name: str, rows: Path, url: str, tier: Redis | None, **extra: Any) -> tuple[Path, Path]:
    shared = {"shared": {"url": tier.url}} if tier is not None else {}
    # The answer cache on: it is what the hosts share (the corpora of `pace` share no state).
    return write_config(name, rows, url, rpm=1200, tps=1e9, actors=2,
                        extra={"cache": {"enabled": True}, **shared, **extra})  # fmt: skip


_RAY_HOLDER = """
import signal, sys, time, ray
for attempt in range(10):
    try:
        ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
        break
    except Exception as exc:  # Ray's 30 s start-up limit, missed on a loaded machine
        print(f"ray.init failed ({exc}); again", file=sys.stderr, flush=True)
        time.sleep(2)
print(ray.get_runtime_context().gcs_address, flush=True)
signal.signal(signal.SIGTERM, lambda *a: sys.exit(0))
sys.stdin.read()
ray.shutdown()
"""


def own_rays(n: int) -> list[tuple[subprocess.Popen[str], str]]:
    """`n` Ray clusters of their own, one after another, each held by a process of this
    bench (retried until Ray starts): each host joins one, so no two hosts share a Ray."""
    held = []
    for _ in range(n):
        holder = subprocess.Popen([sys.executable, "-c", _RAY_HOLDER], stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, text=True)  # fmt: skip
        assert holder.stdout is not None
        held.append((holder, holder.stdout.readline().strip()))
    return held


def hosts_at_once(
    jobs: list[tuple[Path, Path]], tier: bool, gap: float = 0.0, rays: list[str] | None = None
) -> list[Any]:
    """The hosts' runs, started `gap` s apart, each on a Ray of its own: started by its run
    (`local`), or one of `rays` (started first: on a loaded machine, Rays that start with the
    runs miss Ray's own 30 s start-up limit)."""
    token = {"RAY_AUTH_TOKEN_PATH": str(Path.home() / ".ray" / "auth_token")} if rays else {}
    with ThreadPoolExecutor(len(jobs)) as pool:
        runs = []
        for i, (path, out) in enumerate(jobs):
            ray = rays[i] if rays else "local"
            runs.append(pool.submit(run_job, path, out, args=["--ray-address", ray],
                                    env={**host_env(path.stem, tier), **token}))  # fmt: skip
            time.sleep(gap)
        return [r.result() for r in runs]


def scored(out: Path, offset: float) -> list[float]:
    times = pq.read_table(out, columns=["_scored_at"]).column(0).to_pylist()
    return sorted(t.timestamp() - offset for t in times if t is not None)


def pace(args: argparse.Namespace, tier: Redis | None) -> dict[str, Any]:
    offset = time.time() - time.monotonic()
    with service(rpm=1200, tps=1e9, latency=0.5) as embedded, ServiceWatch(embedded) as watch:
        jobs = [config(f"tier-pace-{n}", corpus(args.rows, 20, first=(i + 1) * 1_000_000),
                       embedded.base_url, tier) for i, n in enumerate("abc")]  # fmt: skip
        held = own_rays(3) if args.own_rays else []
        try:
            runs = hosts_at_once(jobs, tier is not None, args.gap, [a for _, a in held])
        finally:
            for holder, _ in held:
                holder.terminate()
                holder.wait()
        answers = (
            [scored(out, offset) for _, out in jobs] if all(r.returncode == 0 for r in runs) else []
        )
        result: dict[str, Any] = {"exit": [r.returncode for r in runs]}
        if answers:
            start = max(a[0] for a in answers) + args.warmup
            end = min(a[-1] for a in answers) - args.tail
            result["together"] = watch.rate(start, end)[0] / 20
            result["window"] = end - start
        _, _, accepted, refused = watch.rate(runs[0].started, max(r.ended for r in runs))
        result["429"] = refused / max(1, accepted + refused)
        if "fresh" in args.cases:
            before = embedded.stats()["requests_accepted"]
            path, out = config("tier-fresh-d", corpus(args.rows, 20, first=1_000_000),
                               embedded.base_url, tier)  # fmt: skip
            fresh = run_job(path, out, args=["--ray-address", "local"],
                            env=host_env("d", tier is not None))  # fmt: skip
            result["fresh_exit"] = fresh.returncode
            result["fresh_sent"] = embedded.stats()["requests_accepted"] - before
    return result


def together(args: argparse.Namespace, tier: Redis | None) -> dict[str, Any]:
    rows = corpus(args.rows, 20, first=5_000_000)
    with service(rpm=1200, tps=1e9, latency=0.5) as embedded:
        jobs = [config(f"tier-together-{n}", rows, embedded.base_url, tier) for n in "ab"]
        runs = hosts_at_once(jobs, tier is not None)
        paid = embedded.stats()["requests_accepted"]
    return {"exit": [r.returncode for r in runs], "paid": paid, "states": args.rows,
            "each": [r.summary.get("rows_by_request") for r in runs]}  # fmt: skip


def killed(args: argparse.Namespace, tier: Redis) -> dict[str, Any]:
    rows = corpus(args.rows, 20, first=6_000_000)
    with service(rpm=1200, tps=1e9, latency=0.5) as embedded, ServiceWatch(embedded) as watch:
        path, out = config("tier-killed", rows, embedded.base_url, tier)
        with ThreadPoolExecutor(1) as pool:
            run = pool.submit(run_job, path, out, args=["--ray-address", "local",
                              "--log-format", "json"], env=host_env("k"))  # fmt: skip
            while watch.first_accepted() is None:
                time.sleep(0.1)
            time.sleep(args.kill_after)
            tier.stop()
            job = run.result()
        _, _, accepted, refused = watch.rate(job.started, job.ended)
    ids = pq.read_table(out, columns=["id"]).column(0).to_pylist()
    warned = [line for line in job.stderr.splitlines() if '"warning"' in line and "lost" in line]
    return {"exit": job.returncode, "rows": len(ids), "distinct": len(set(ids)),
            "expected": args.rows, "warning": warned[0][-200:] if warned else None,
            "429": refused / max(1, accepted + refused)}  # fmt: skip


def password(args: argparse.Namespace, tier: Redis) -> dict[str, Any]:
    rows = corpus(50, 20, first=7_000_000)
    with service(rpm=1200, tps=1e9, latency=0.5) as embedded:
        path, _ = config("tier-password", rows, embedded.base_url, tier)
        env = {**os.environ, **host_env("p"), KEY_ENV: KEY, PASSWORD_ENV: "not-the-password"}
        started = time.monotonic()
        done = subprocess.run([EVALPIPE, "run", str(path)], env=env, capture_output=True,
                              text=True)  # fmt: skip
        elapsed = time.monotonic() - started
        sent = embedded.stats()["requests_accepted"]
    return {"exit": done.returncode, "seconds": elapsed, "sent": sent,
            "message": done.stderr.strip().splitlines()[-1][:300]}  # fmt: skip


def lease(args: argparse.Namespace, tier: Redis) -> dict[str, Any]:
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    s3 = {"AWS_ENDPOINT_URL": f"http://{host}:{port}", "AWS_ACCESS_KEY_ID": "k",
          "AWS_SECRET_ACCESS_KEY": "s", "AWS_DEFAULT_REGION": "us-east-1",
          "AWS_EC2_METADATA_DISABLED": "true"}  # fmt: skip
    import boto3

    boto3.client(
        "s3",
        endpoint_url=s3["AWS_ENDPOINT_URL"],
        aws_access_key_id="k",
        aws_secret_access_key="s",
        region_name="us-east-1",
    ).create_bucket(Bucket="out")
    output = {"output": {"path": "s3://out/nightly"}}
    rows = corpus(args.rows, 20, first=8_000_000)
    try:
        with service(rpm=1200, tps=1e9, latency=0.5) as embedded:
            path, _ = config("tier-lease", rows, embedded.base_url, tier, **output)
            env = {**os.environ, KEY_ENV: KEY, **s3}
            command = [EVALPIPE, "run", str(path), "--ray-address", "local"]
            first = subprocess.Popen(command, env={**env, **host_env("l1")}, start_new_session=True,
                                     stderr=subprocess.DEVNULL)  # fmt: skip
            while embedded.stats()["requests_accepted"] < 20:
                time.sleep(0.1)
            second_env = {**env, **host_env("l2")}
            started = time.monotonic()
            refused = subprocess.run(command, env=second_env, capture_output=True, text=True)
            refused_after = time.monotonic() - started
            os.killpg(first.pid, signal.SIGKILL)
            first.wait()
            killed_at, tries = time.monotonic(), []
            while True:
                done = subprocess.run(command, env=second_env, capture_output=True, text=True)
                tries.append(done.returncode)
                if done.returncode != 2:
                    break
                time.sleep(2)
            ran_after = time.monotonic() - killed_at
    finally:
        server.stop()
    return {"second_exit": refused.returncode, "second_seconds": refused_after,
            "second_message": (refused.stderr.strip() or refused.stdout.strip())[-300:],
            "retries": tries, "ran_after_kill": ran_after}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", default=",".join(CASES))
    parser.add_argument("--rows", type=int, default=700, help="rows of each host's corpus")
    parser.add_argument("--warmup", type=float, default=5.0)
    parser.add_argument("--tail", type=float, default=2.0)
    parser.add_argument("--kill-after", type=float, default=10.0)
    parser.add_argument("--gap", type=float, default=3.0, help="seconds between `pace` starts")
    parser.add_argument(
        "--own-rays", action="store_true", help="`pace`: start the hosts' Rays first, in turn"
    )
    parser.add_argument("--no-tier", action="store_true", help="pace, fresh, together alone")
    args = parser.parse_args()
    args.cases = args.cases.split(",")
    header(f"Bench t: {'no tier' if args.no_tier else 'one Redis'}, {args.rows} rows a host")
    for case in args.cases:
        tier = None if args.no_tier else Redis().start()
        try:
            if case == "pace":
                result = pace(args, tier)
            elif case == "fresh":
                continue  # measured after `pace`, on its service
            elif case == "together":
                result = together(args, tier)
            elif tier is None:
                continue
            else:
                result = {"killed": killed, "password": password, "lease": lease}[case](args, tier)
        finally:
            if tier is not None:
                tier.stop()
        print(f"{case} (load {load()}): {result}", flush=True)


if __name__ == "__main__":
    main()
