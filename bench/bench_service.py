"""Throughput of the embedded service: how many small evaluate requests per second it answers.

The service must never be the bottleneck of a benchmark of the pipeline, so it has to answer at
least 2,000 small requests/s on one core. This starts it as a separate process (process mode,
limits lifted out of the way), drives it from this process keeping `--concurrency` requests in
flight for `--seconds`, and prints requests/s, the server process's CPU share (1.0 = one core
busy) and its CPU per request. The client is aiohttp's, or with `--client raw` a lean HTTP/1.1
loop that leaves more of a small machine's CPU to the server.

    .venv/bin/python bench/bench_service.py --seconds 10 --concurrency 64 [--client raw]
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import functools
import time
from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import urlsplit

import aiohttp
import orjson
import psutil

from evalpipe.service import EmbeddedService, ServiceSettings

API_KEY = "bench-key"
REQUEST: dict[str, Any] = {
    "state": (
        "I ordered the blue jacket last week. It arrived quickly and fits well, but one of the "
        "buttons came loose after two days and the support team never answered my email."
    ),
    "model": "model-latest",
    "questions": {
        "helpful": {
            "type": "noul",
            "instructions": "Does the review help a shopper decide?",
            "criteria": {"true": "specific details about the product", "false": "vague"},
        },
        "sentiment": {
            "type": "choice",
            "instructions": "What is the overall sentiment of the review?",
            "criteria": {"positive": "praise", "mixed": None, "negative": "complaints"},
        },
        "quality": {
            "type": "score",
            "instructions": "How well written is the review?",
            "criteria": ["poor", "fair", "good", "excellent"],
        },
    },
}


Worker = Callable[[str, bytes, float, "collections.Counter[int]"], Awaitable[None]]


async def _aiohttp_worker(
    session: aiohttp.ClientSession, url: str, body: bytes, deadline: float, counts: Any
) -> None:
    headers = {"Authorization": f"Bearer {API_KEY}", "Content-Type": "application/json"}
    while time.perf_counter() < deadline:
        async with session.post(url, data=body, headers=headers) as response:
            await response.read()
            counts[response.status] += 1


async def _raw_worker(url: str, body: bytes, deadline: float, counts: Any) -> None:
    """One keep-alive connection speaking just enough HTTP/1.1: a client that costs a fraction
    of aiohttp's CPU, so on a small machine more of it is left to the server under test."""
    address = urlsplit(url)
    reader, writer = await asyncio.open_connection(address.hostname, address.port)
    request = (
        f"POST {address.path} HTTP/1.1\r\nHost: {address.netloc}\r\n"
        f"Authorization: Bearer {API_KEY}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    ).encode() + body
    try:
        while time.perf_counter() < deadline:
            writer.write(request)
            head = await reader.readuntil(b"\r\n\r\n")
            length = int(head.lower().split(b"content-length:")[1].split(b"\r\n")[0])
            await reader.readexactly(length)
            counts[int(head[9:12])] += 1
    finally:
        writer.close()


async def drive(
    base_url: str, seconds: float, concurrency: int, client: str = "aiohttp"
) -> tuple[Any, float]:
    """Keep `concurrency` requests in flight for `seconds`; status counts and elapsed time."""
    counts: collections.Counter[int] = collections.Counter()
    body = orjson.dumps(REQUEST)
    url = base_url + "/v1/evaluate"
    connector = aiohttp.TCPConnector(limit=concurrency)
    async with aiohttp.ClientSession(connector=connector) as session:
        worker: Worker = _raw_worker
        if client == "aiohttp":
            worker = functools.partial(_aiohttp_worker, session)
        start = time.perf_counter()
        deadline = start + seconds
        await asyncio.gather(*(worker(url, body, deadline, counts) for _ in range(concurrency)))
        return counts, time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument(
        "--client", choices=["aiohttp", "raw"], default="aiohttp", help="raw: a lean HTTP/1.1 loop"
    )
    args = parser.parse_args()
    settings = ServiceSettings(api_key=API_KEY, rpm=1e12, tps=1e15, max_inflight=1_000_000)
    with EmbeddedService(settings, mode="process") as service:
        server = psutil.Process(service.pid)
        client = psutil.Process()
        asyncio.run(drive(service.base_url, 1.0, args.concurrency, args.client))  # warm-up
        server_before, client_before = server.cpu_times(), client.cpu_times()
        run = drive(service.base_url, args.seconds, args.concurrency, args.client)
        counts, elapsed = asyncio.run(run)
        server_cpu = _busy(server.cpu_times()) - _busy(server_before)
        client_cpu = _busy(client.cpu_times()) - _busy(client_before)
    total = sum(counts.values())
    print(
        f"requests: {total} in {elapsed:.1f} s, {args.client} client, {args.concurrency} in flight"
    )
    print(f"statuses: {dict(sorted(counts.items()))}")
    print(f"requests/s: {total / elapsed:,.0f}")
    print(f"server CPU share: {server_cpu / elapsed:.2f} of one core")
    print(f"server CPU per request: {server_cpu / total * 1e6:.0f} us")
    print(f"server capacity on one busy core: {total / server_cpu:,.0f} requests/s")
    print(f"client CPU share: {client_cpu / elapsed:.2f} of one core")


def _busy(times: Any) -> float:
    return times.user + times.system


if __name__ == "__main__":
    main()
