"""Bench t, the pace alone: hosts that share only a Redis pace on its schedule, without Ray.

Where a loaded machine cannot start three Rays within Ray's own 30 s limit (bench t's `pace`,
bench/shared_tier.py), this measures the same schedule on its own: each host is a process of
its own that sends its corpus through evalpipe's client (`EvalClient`, its retries) paced by
the account's pacing primitive reserved on the tier (`LocalPacer` on `TierPace`: the path the
Budget's grants take, without its AIMD), 64 requests in flight, against the embedded service
with strict limits (1,200 RPM as a bucket of one second, 0.5 s median latency). Figures are the
service's: together in the steady middle (all hosts sending), and the 429 share over the run.

    .venv/bin/python bench/tier_pace_lite.py                  # three hosts, 700 rows each
    .venv/bin/python bench/tier_pace_lite.py --no-tier        # the same, each paced alone
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import KEY, KEY_ENV, QUESTIONS, ServiceWatch, corpus, header, load, service
from shared_tier import PASSWORD, PASSWORD_ENV, Redis


async def host(url: str, tier: str | None, rows: Path) -> dict[str, Any]:
    """One host: its corpus through the client, paced on the tier's schedule (or alone)."""
    from evalpipe.config import origin
    from evalpipe.contract import validate_questions
    from evalpipe.limits import LocalPacer
    from evalpipe.send import EvalClient
    from evalpipe.tier import TierAddress, TierPace, account_prefix

    texts = pq.read_table(rows, columns=["text"]).column(0).to_pylist()
    schedule = None
    if tier is not None:
        schedule = TierPace(TierAddress(tier, PASSWORD_ENV, account_prefix(origin(url), KEY)))
    slots, counts = asyncio.Semaphore(64), {"ok": 0, "failed": 0, "rate_limited": 0}
    parsed = validate_questions(QUESTIONS)
    async with (
        LocalPacer(1200, 1e9, 0.995, schedule) as pacer,
        EvalClient(url, KEY, pacer=pacer) as client,
    ):

        async def one(text: str) -> None:
            body = {"state": text, "model": "model-1.13.0", "questions": QUESTIONS}
            async with slots:
                result = await client.evaluate(body, parsed, 60)
            counts["ok" if result.error is None else "failed"] += 1
            counts["rate_limited"] += result.rate_limited

        await asyncio.gather(*(one(t) for t in texts))
    return counts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hosts", type=int, default=3)
    parser.add_argument("--rows", type=int, default=700)
    parser.add_argument("--no-tier", action="store_true")
    parser.add_argument("--warmup", type=float, default=3.0)
    parser.add_argument("--host", nargs=3, metavar=("URL", "TIER", "ROWS"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.host:  # one host's process
        url, tier, rows = args.host
        counts = asyncio.run(host(url, None if tier == "-" else tier, Path(rows)))
        print(json.dumps({**counts, "ended": time.monotonic()}), flush=True)
        return
    tiered = "one Redis" if not args.no_tier else "no tier"
    header(f"Bench t, the pace alone: {args.hosts} hosts x {args.rows} rows, {tiered}")
    redis = None if args.no_tier else Redis().start()
    env = {**os.environ, KEY_ENV: KEY, PASSWORD_ENV: PASSWORD}
    try:
        with service(rpm=1200, tps=1e9, latency=0.5) as embedded, ServiceWatch(embedded) as watch:
            started = time.monotonic()
            tier = redis.url if redis else "-"
            firsts = [(21 + i) * 10**6 for i in range(args.hosts)]  # corpora of their own
            corpora = [str(corpus(args.rows, 20, first=first)) for first in firsts]
            command = [sys.executable, __file__, "--host", embedded.base_url, tier]
            procs = [
                subprocess.Popen([*command, rows], env=env, stdout=subprocess.PIPE, text=True)
                for rows in corpora
            ]
            results = [json.loads(p.communicate()[0].strip().splitlines()[-1]) for p in procs]
            first_end = min(r["ended"] for r in results)
            begun = watch.first_accepted(started) or started
            together = watch.rate(begun + args.warmup, first_end - 1.0)[0] / 20
            _, _, accepted, refused = watch.rate(started, time.monotonic())
    finally:
        if redis is not None:
            redis.stop()
    print(f"load {load()}: together {together:.1%} of 1,200 RPM (steady middle), 429s "
          f"{refused / max(1, accepted + refused):.2%} ({refused} of {accepted + refused}); "
          f"hosts {results}")  # fmt: skip


if __name__ == "__main__":
    main()
