"""Bench d: the job's own ceiling, beside bare HTTP loops against the same service process.

Limits lifted, zero service latency: how many rows per second the whole job (`evalpipe run`,
Parquet in, Ray actors, Parquet out) gets through with 1 and with 2 actors, and, against the
very same service process in the same run, a bare aiohttp loop, a bare httpx loop (its own
pool) and a bare httpx loop over the aiohttp transport (the job's transport), each with
`--in-flight` requests in flight sending the job's payload. Also the CPU each part used per
row (psutil over the job's process tree and the service), which says where a 2-core machine
spends its time.

    .venv/bin/python bench/job_ceiling.py                     # 20,000 rows per job run
    .venv/bin/python bench/job_ceiling.py --rows 5000 --seconds 5      # quick
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp
import httpx
import orjson
import psutil
from httpx_aiohttp import HttpxAiohttpClient

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import (
    KEY,
    QUESTIONS,
    ServiceWatch,
    corpus,
    first_state,
    header,
    load,
    output_rows,
    run_job,
    service,
    steady,
    table,
    write_config,
)

LIFTED_RPM, LIFTED_TPS = 1e9, 1e13


async def _loop(seconds: float, in_flight: int, one: Callable[[], Awaitable[None]]) -> float:
    """Requests/s of `in_flight` loops calling `one` for `seconds`, after a 1 s warm-up."""
    done = 0
    stop = time.perf_counter() + 1.0

    async def worker() -> None:
        nonlocal done
        while time.perf_counter() < stop:
            await one()
            done += 1

    await asyncio.gather(*(worker() for _ in range(in_flight)))
    done = 0
    start = time.perf_counter()
    stop = start + seconds
    await asyncio.gather(*(worker() for _ in range(in_flight)))
    return done / (time.perf_counter() - start)


async def bare_aiohttp(url: str, body: bytes, in_flight: int, seconds: float) -> float:
    headers = {"authorization": f"Bearer {KEY}", "content-type": "application/json"}
    connector = aiohttp.TCPConnector(limit=in_flight)
    async with aiohttp.ClientSession(url, connector=connector, headers=headers) as session:

        async def one() -> None:
            async with session.post("/v1/evaluate", data=body) as response:
                assert response.status == 200, response.status
                orjson.loads(await response.read())

        return await _loop(seconds, in_flight, one)


async def bare_httpx(
    url: str, body: bytes, in_flight: int, seconds: float, transport: str
) -> float:
    headers = {"authorization": f"Bearer {KEY}", "content-type": "application/json"}
    limits = httpx.Limits(max_connections=in_flight, max_keepalive_connections=in_flight)
    kind = HttpxAiohttpClient if transport == "aiohttp" else httpx.AsyncClient
    async with kind(base_url=url, headers=headers, limits=limits) as client:

        async def one() -> None:
            response = await client.post("/v1/evaluate", content=body)
            assert response.status_code == 200, response.status_code
            orjson.loads(response.content)

        return await _loop(seconds, in_flight, one)


def cpu_seconds(pid: int) -> float:
    times = psutil.Process(pid).cpu_times()
    return times.user + times.system


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=20_000, help="rows per job run")
    parser.add_argument("--actors", default="1,2", help="actor counts to run the job with")
    parser.add_argument("--seconds", type=float, default=10.0, help="per bare loop")
    parser.add_argument("--in-flight", type=int, default=64, help="per bare loop")
    parser.add_argument("--max-in-flight", type=int, default=None, help="the job's, per actor")
    args = parser.parse_args()
    path = corpus(args.rows, 20)
    body = orjson.dumps(
        {"state": first_state(path), "model": "model-1.13.0", "questions": QUESTIONS}
    )
    header(f"Bench d: ceiling, limits lifted, zero latency, {args.rows} rows per job run")
    results: list[tuple[str, ...]] = []
    with service() as embedded:
        url = embedded.base_url
        for actors in (int(n) for n in args.actors.split(",")):
            config, out = write_config(
                f"ceiling-{actors}",
                path,
                url,
                rpm=LIFTED_RPM,
                tps=LIFTED_TPS,
                actors=actors,
                max_in_flight=args.max_in_flight,
            )
            served_before = cpu_seconds(embedded.pid)
            with ServiceWatch(embedded, interval=0.5) as watch:
                job = run_job(config, out, memory=True)
            served = cpu_seconds(embedded.pid) - served_before
            figures = steady(watch, job.started, 2.0, 1.0)
            s = job.summary
            sending = s["wall_seconds"] - s["startup_seconds"]
            assert job.memory is not None
            cpu = job.memory.cpu()
            rows = s["rows_answered"]
            per_row = {role: cpu.get(role, 0.0) / rows * 1e6 for role in ("driver", "actor")}
            print(
                f"{actors} actor(s): {rows} rows answered, {output_rows(out)} output rows, "
                f"{s['rate_limited_429']} 429s; CPU per row: driver {per_row['driver']:.0f} µs, "
                f"actors {per_row['actor']:.0f} µs, service {served / rows * 1e6:.0f} µs; "
                f"Ray infrastructure {cpu.get('ray infrastructure', 0.0):.1f} s in all",
                flush=True,
            )
            results.append(
                (
                    f"evalpipe, {actors} actor{'s' if actors > 1 else ''}",
                    f"{rows / sending:,.0f}",
                    f"{figures['steady_rps']:,.0f}",
                    figures["load"],
                )
            )
        loops: dict[str, Callable[[], Awaitable[float]]] = {
            "bare aiohttp": lambda: bare_aiohttp(url, body, args.in_flight, args.seconds),
            "bare httpx": lambda: bare_httpx(url, body, args.in_flight, args.seconds, "httpx"),
            "bare httpx + aiohttp transport": lambda: bare_httpx(
                url, body, args.in_flight, args.seconds, "aiohttp"
            ),
        }
        bare: dict[str, Any] = {}
        for name, run in loops.items():
            bare[name] = asyncio.run(run())
            results.append(
                (f"{name} ({args.in_flight} in flight)", f"{bare[name]:,.0f}", "-", load())
            )
    table(results, ("client", "rows/s (sending time)", "service-side steady req/s", "load"))
    base = bare["bare aiohttp"]
    for row in results[: len(results) - len(loops)]:
        print(f"{row[0]}: {float(row[1].replace(',', '')) / base:.2f}x the bare aiohttp loop")


if __name__ == "__main__":
    main()
