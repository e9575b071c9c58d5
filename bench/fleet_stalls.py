"""Bench u: two hosts, one object-store output, one Redis, and a stall (issue 56).

Each host is an `evalpipe run` with a home, a cache folder and a Ray of its own
(`--ray-address local`: freezing a host's process group freezes its Ray too, as a frozen VM),
on one corpus and one output in moto's S3 (Parquet, or a Delta table), sharing a redis-server
(Debian's, loopback, with a password) and the key, against the embedded service. The issue's
three stalls:

- `tier-frozen`: host a runs; the redis-server is frozen (SIGSTOP) `--stall` s mid-run; once it
  thaws host b starts.
- `host-frozen`: host a runs; its process group is frozen `--stall` s while host b (started
  once a's lease lapsed) runs; then a is thawed.
- `cut-off`: host a reaches Redis through a proxy that stops forwarding (nothing refused,
  nothing passes) `--cut` s; host b starts once a's lease lapsed.

Then a last resume (host a's command again). Printed per case: each run's exit code, the rows in
the output once, missing and duplicated (after the stalled runs, and after the last resume),
and the states paid twice (requests the service answered beyond one per row). Targets (issue
56): every id once after the last resume, every exit 0 or 9, states paid twice at most what the
stalled host had paid and had in flight.

    .venv/bin/python bench/fleet_stalls.py                     # both formats, every case
    .venv/bin/python bench/fleet_stalls.py --formats delta --cases host-frozen --lease 5
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(1, str(Path(__file__).resolve().parent.parent / "tests"))  # netdoubles

from common import BENCH_DIR, EVALPIPE, KEY, KEY_ENV, QUESTIONS, corpus, header, load, service
from netdoubles import CutProxy
from s3 import BUCKET, s3_server
from shared_tier import PASSWORD, PASSWORD_ENV, Redis

CASES = ("tier-frozen", "host-frozen", "cut-off")


def host(name: str, rows: Path, base_url: str, tier_url: str, output: str, args: Any) -> Path:
    home = BENCH_DIR / "fleet" / name
    (home / "cache").mkdir(parents=True, exist_ok=True)
    config = {
        "input": {"path": str(rows), "id_column": "id", "state": "text"},
        "output": {"path": output, "format": args.format},
        "service": {"base_url": base_url, "api_key_env": KEY_ENV},
        "model": "model-1.13.0",
        "limits": {"requests_per_minute": args.rpm, "tokens_per_second": 1e9},
        "concurrency": {"actors": 2},
        "shared": {"url": tier_url, "lease_seconds": args.lease},
        "questions": QUESTIONS,
    }
    (home / "job.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    return home


def start(home: Path) -> subprocess.Popen[str]:
    env = {**os.environ, KEY_ENV: KEY, "HOME": str(home), "XDG_CACHE_HOME": str(home / "cache")}
    env.pop("RAY_ADDRESS", None)
    command = [EVALPIPE, "run", str(home / "job.yaml"), "--ray-address", "local",
               "--progress-interval", "3600"]  # fmt: skip
    return subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            text=True, start_new_session=True)  # fmt: skip


def ended(process: subprocess.Popen[str]) -> int:
    _, err = process.communicate(timeout=3600)
    if process.returncode not in (0, 9):
        print(err[-2000:], file=sys.stderr)
    return process.returncode


def counted(output: str, rows: int) -> tuple[int, int, int]:
    """(ids once, ids missing, ids more than once) in the output."""
    from evalpipe.reading import open_output

    try:
        ids = Counter(open_output(output).rows["id"].to_list())
    except Exception:  # no output yet
        ids = Counter()
    return (sum(1 for n in ids.values() if n == 1), rows - len(ids),
            sum(1 for n in ids.values() if n > 1))  # fmt: skip


def wait_sent(embedded: Any, n: int, process: subprocess.Popen[str]) -> None:
    while embedded.stats()["requests_accepted"] < n and process.poll() is None:
        time.sleep(0.05)


@contextlib.contextmanager
def frozen(pid: int, group: bool = False) -> Iterator[None]:
    kill = os.killpg if group else os.kill
    kill(pid, signal.SIGSTOP)
    try:
        yield
    finally:
        kill(pid, signal.SIGCONT)


def case(name: str, args: Any, rows: Path) -> dict[str, Any]:
    tier = Redis().start()
    proxy = CutProxy(tier.port) if name == "cut-off" else None
    output = f"s3://{BUCKET}/fleet/{name}-{args.format}-{time.time_ns()}"
    found: dict[str, Any] = {}
    try:
        with service(rpm=args.rpm, tps=1e9, latency=0.05) as embedded:
            url_a = f"redis://127.0.0.1:{proxy.port}/0" if proxy else tier.url
            a = host(f"{name}-a", rows, embedded.base_url, url_a, output, args)
            b = host(f"{name}-b", rows, embedded.base_url, tier.url, output, args)
            first = start(a)
            wait_sent(embedded, args.rows // 4, first)
            found["a_paid_at_stall"] = embedded.stats()["requests_accepted"]
            if name == "tier-frozen":
                assert tier.process is not None
                with frozen(tier.process.pid):
                    time.sleep(args.stall)
                second = start(b)
            elif name == "host-frozen":
                with frozen(first.pid, group=True):
                    time.sleep(args.lease + 1)
                    second = start(b)
                    time.sleep(max(0.0, args.stall - args.lease - 1))
            else:
                assert proxy is not None
                proxy.cut()
                time.sleep(args.lease + 1)
                second = start(b)
                time.sleep(max(0.0, args.cut - args.lease - 1))
                proxy.mend()
            found["exit_a"], found["exit_b"] = ended(first), ended(second)
            found["after"] = counted(output, args.rows)
            found["exit_resume"] = ended(start(a))
            found["last"] = counted(output, args.rows)
            found["paid_twice"] = embedded.stats()["requests_accepted"] - args.rows
    finally:
        if proxy is not None:
            proxy.close()
        tier.stop()
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=900)
    parser.add_argument("--rpm", type=float, default=1200)
    parser.add_argument("--lease", type=float, default=20.0, help="shared.lease_seconds")
    parser.add_argument("--stall", type=float, default=30.0, help="a freeze's length (s)")
    parser.add_argument("--cut", type=float, default=25.0, help="the cut's length (s)")
    parser.add_argument("--formats", default="parquet,delta")
    parser.add_argument("--cases", default=",".join(CASES))
    args = parser.parse_args()
    header(f"fleet stalls: {args.rows} rows, {args.rpm:g} RPM, lease {args.lease:g} s; {load()}")
    os.environ[PASSWORD_ENV] = PASSWORD  # the hosts' (this bench's redis-server asks one)
    rows = corpus(args.rows, 20)
    with s3_server():
        print(
            "| case | format | exit a, b, resume | after: once / missing / twice "
            "| last resume: once / missing / twice | a paid at stall | paid twice |"
        )
        print("| --- | --- | --- | --- | --- | --- | --- |")
        for fmt in args.formats.split(","):
            for name in args.cases.split(","):
                args.format = fmt
                try:
                    f = case(name, args, rows)
                except Exception as exc:  # one case's failure: said, and the others run
                    print(f"| {name} | {fmt} | failed: {exc!r} |", flush=True)
                    continue
                print(f"| {name} | {fmt} | {f['exit_a']}, {f['exit_b']}, {f['exit_resume']} "
                      f"| {' / '.join(map(str, f['after']))} "
                      f"| {' / '.join(map(str, f['last']))} | {f['a_paid_at_stall']} "
                      f"| {f['paid_twice']} |", flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
