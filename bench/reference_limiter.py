"""The plain script a user might write instead of evalpipe, for comparison in the RPM bench.

asyncio + httpx over the aiohttp transport + `aiolimiter.AsyncLimiter(rate, 1)` (the pacing
DESIGN.md calls equivalent to the service's one-second bucket), a semaphore on requests in
flight, and on a 429 a sleep of the service's retry-after before trying again (the retry passes
the limiter again). It reads the same corpus and sends the same questions as the job; it prints
one JSON line of figures. The key comes from EVAL_API_KEY.

    .venv/bin/python bench/reference_limiter.py --url http://127.0.0.1:PORT \
        --corpus /tmp/evalpipe-bench/corpus-2000x20.parquet --rate 20
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from pathlib import Path

import httpx
import pyarrow.parquet as pq
from aiolimiter import AsyncLimiter
from httpx_aiohttp import HttpxAiohttpClient

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import QUESTIONS


async def main(url: str, corpus: Path, rate: float, in_flight: int, rows: int | None) -> dict:
    texts = pq.read_table(corpus, columns=["text"]).column(0).to_pylist()[:rows]
    limiter = AsyncLimiter(rate, 1)
    slots = asyncio.Semaphore(in_flight)
    counts = {"ok": 0, "429": 0, "other": 0, "attempts": 0}
    headers = {"authorization": f"Bearer {os.environ['EVAL_API_KEY']}"}
    limits = httpx.Limits(max_connections=in_flight, max_keepalive_connections=in_flight)
    async with HttpxAiohttpClient(base_url=url, headers=headers, limits=limits) as client:

        async def one(text: str) -> None:
            body = {"state": text, "model": "model-1.13.0", "questions": QUESTIONS}
            async with slots:
                for _ in range(20):
                    async with limiter:
                        counts["attempts"] += 1
                        response = await client.post("/v1/evaluate", json=body, timeout=60)
                    if response.status_code == 200:
                        counts["ok"] += 1
                        return
                    if response.status_code != 429:
                        counts["other"] += 1
                        return
                    counts["429"] += 1
                    wait = float(response.headers.get("retry-after-ms", 1000)) / 1000
                    await asyncio.sleep(wait)
                counts["other"] += 1

        start = time.monotonic()
        await asyncio.gather(*(one(t) for t in texts))
        elapsed = time.monotonic() - start
    return {**counts, "rows": len(texts), "seconds": elapsed}


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", required=True)
    parser.add_argument("--corpus", type=Path, required=True)
    parser.add_argument("--rate", type=float, default=20.0, help="requests per second")
    parser.add_argument("--in-flight", type=int, default=64)
    parser.add_argument("--rows", type=int, default=None, help="the first N rows only")
    args = parser.parse_args()
    result = asyncio.run(main(args.url, args.corpus, args.rate, args.in_flight, args.rows))
    print(json.dumps(result))
