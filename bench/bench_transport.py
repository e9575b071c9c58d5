"""Requests per second through EvalClient with each transport, beside a bare aiohttp loop.

Why: the client's transport sets the ceiling of one worker. DESIGN.md measured httpx's own pool
degrading with concurrency while httpx over aiohttp (httpx-aiohttp) held up; this bench checks
that on the real client (auth header, orjson, retries loop, contract check of every answer) so
the default transport is chosen by figures.

The server runs in a subprocess so it does not share the client's event loop:
  - `service`: the embedded reference service (`python -m evalpipe.service --port 0 --rpm
    100000000 --tps 1000000000000`, key in EVAL_API_KEY), limits lifted;
  - `canned`: a tiny aiohttp server answering every evaluate with one fixed valid body.

    .venv/bin/python bench/bench_transport.py                 # both targets, 1/16/64/256
    .venv/bin/python bench/bench_transport.py --repeat 3      # best of 3 on a busy machine
    .venv/bin/python bench/bench_transport.py --target canned --seconds 2 --levels 1,64
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp
import orjson

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from evalpipe.config import RetryPolicy, TransportKind  # noqa: E402
from evalpipe.contract.resources import validate_questions  # noqa: E402
from evalpipe.send.client import EvalClient  # noqa: E402
from evalpipe.send.transport import new_transport  # noqa: E402

KEY = "bench-key-0123456789"
LEVELS = (1, 16, 64, 256)
QUESTIONS = {
    "helpful": {"type": "noul", "instructions": "Is the review helpful?"},
    "sentiment": {
        "type": "choice",
        "instructions": "What is the sentiment?",
        "criteria": {"positive": None, "negative": None, "neutral": None},
    },
    "quality": {
        "type": "score",
        "instructions": "Rate the writing.",
        "criteria": ["poor", "fair", "good"],
    },
}
PAYLOAD = {
    "state": "The kettle boils fast, but the lid broke after a week. Support replaced it.",
    "model": "model-1.13.0",
    "questions": QUESTIONS,
}
CANNED = orjson.dumps(
    {
        "model": "model-1.13.0",
        "answers": {
            "helpful": {"type": "noul", "noul": 0.81},
            "sentiment": {
                "type": "choice",
                "choice": "neutral",
                "probabilities": {"positive": 0.3, "negative": 0.2, "neutral": 0.5},
                "confidence": 0.25,
            },
            "quality": {
                "type": "score",
                "score": 1.2,
                "legend": {"0": "poor", "1": "fair", "2": "good"},
                "probabilities": {"0": 0.2, "1": 0.4, "2": 0.4},
                "confidence": 0.1,
            },
        },
        "usage": {"input_tokens": 42, "output_tokens": 0},
    }
)


# --------------------------------------------------------------------------- servers


def serve_canned() -> None:
    """The canned target: prints its port, then answers until killed."""
    from aiohttp import web

    async def evaluate(request: web.Request) -> web.Response:
        await request.read()
        return web.Response(body=CANNED, content_type="application/json")

    async def main() -> None:
        app = web.Application()
        app.router.add_post("/v1/evaluate", evaluate)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0, backlog=1024)
        await site.start()
        print(f"PORT {runner.addresses[0][1]}", flush=True)
        await asyncio.Event().wait()

    asyncio.run(main())


def start_server(target: str) -> tuple[subprocess.Popen[str], str]:
    """Start a target in a subprocess; (process, base_url) once it listens."""
    if target == "canned":
        cmd = [sys.executable, __file__, "--serve-canned"]
    else:
        # Limits lifted so the service measures its HTTP path, not its rate limiter.
        cmd = [
            sys.executable, "-m", "evalpipe.service", "--port", "0",
            "--rpm", "100000000", "--tps", "1000000000000",
        ]  # fmt: skip
    env = {**os.environ, "EVAL_API_KEY": KEY}  # the key travels in the environment, never argv
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 30
    assert proc.stdout is not None
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        found = re.search(r"(?:PORT |https?://[\w.\-]+:)(\d+)", line)
        if found:
            return proc, f"http://127.0.0.1:{found.group(1)}"
    proc.kill()
    raise SystemExit(f"{target} server did not report its port: {' '.join(cmd)}")


# --------------------------------------------------------------------------- clients


async def run_for(seconds: float, in_flight: int, one: Callable[[], Awaitable[Any]]) -> float:
    """Requests/s with `in_flight` loops calling `one` for `seconds` (after a short warm-up)."""
    stop = 0.0
    done = 0

    async def loop() -> None:
        nonlocal done
        while time.perf_counter() < stop:
            await one()
            done += 1

    stop = time.perf_counter() + min(0.5, seconds / 4)  # warm-up: open the connections
    await asyncio.gather(*(loop() for _ in range(in_flight)))
    done = 0
    start = time.perf_counter()
    stop = start + seconds
    await asyncio.gather(*(loop() for _ in range(in_flight)))
    return done / (time.perf_counter() - start)


async def bare_aiohttp(base_url: str, in_flight: int, seconds: float) -> float:
    connector = aiohttp.TCPConnector(limit=max(in_flight, 1))
    headers = {"authorization": f"Bearer {KEY}", "content-type": "application/json"}
    async with aiohttp.ClientSession(base_url, connector=connector, headers=headers) as session:

        async def one() -> None:
            async with session.post("/v1/evaluate", data=orjson.dumps(PAYLOAD)) as response:
                assert response.status == 200, response.status
                orjson.loads(await response.read())

        return await run_for(seconds, in_flight, one)


async def through_client(
    base_url: str, in_flight: int, seconds: float, transport: TransportKind
) -> float:
    questions = validate_questions(QUESTIONS)
    policy = RetryPolicy(max_attempts=1)  # a failure must show, not hide behind a retry
    pool = new_transport(base_url, transport, max_connections=max(in_flight, 1))
    async with EvalClient(base_url, KEY, policy=policy, transport=pool) as client:

        async def one() -> None:
            result = await client.evaluate(PAYLOAD, questions, 42)
            assert result.error is None, result.error

        return await run_for(seconds, in_flight, one)


MODES: dict[str, Callable[[str, int, float], Awaitable[float]]] = {
    "bare aiohttp": bare_aiohttp,
    "EvalClient aiohttp": lambda url, n, s: through_client(url, n, s, "aiohttp"),
    "EvalClient httpx": lambda url, n, s: through_client(url, n, s, "httpx"),
}


# --------------------------------------------------------------------------- main


async def measure(
    base_url: str, levels: tuple[int, ...], seconds: float, repeat: int
) -> dict[str, list[float]]:
    """Best of `repeat` rounds per cell. Rounds interleave the clients, so a noisy neighbour on
    the machine hurts them alike, and the best round is the one it disturbed least."""
    table = {mode: [0.0] * len(levels) for mode in MODES}
    for _ in range(repeat):
        for mode, run in MODES.items():
            for i, n in enumerate(levels):
                table[mode][i] = max(table[mode][i], await run(base_url, n, seconds))
    return table


def print_table(target: str, levels: tuple[int, ...], table: dict[str, list[float]]) -> None:
    print(f"\n{target}: requests/s by requests in flight")
    print(f"| {'client':<20} | " + " | ".join(f"{n:>6}" for n in levels) + " |")
    print(f"|{'-' * 22}|" + "|".join("-" * 8 for _ in levels) + "|")
    for mode, row in table.items():
        print(f"| {mode:<20} | " + " | ".join(f"{v:>6,.0f}" for v in row) + " |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--target", choices=["all", "service", "canned"], default="all")
    parser.add_argument("--levels", default=",".join(map(str, LEVELS)))
    parser.add_argument("--seconds", type=float, default=3.0, help="measured time per cell")
    parser.add_argument("--repeat", type=int, default=1, help="rounds; the best is shown")
    parser.add_argument("--serve-canned", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve_canned:
        return serve_canned()
    targets = ["service", "canned"] if args.target == "all" else [args.target]
    levels = tuple(int(n) for n in args.levels.split(","))
    print(
        f"{os.cpu_count()} cores, load {os.getloadavg()[0]:.2f}, best of {args.repeat} x "
        f"{args.seconds:g} s per cell, python {sys.version.split()[0]}"
    )
    for target in targets:
        proc, base_url = start_server(target)
        try:
            table = asyncio.run(measure(base_url, levels, args.seconds, args.repeat))
            print_table(target, levels, table)
        finally:
            proc.kill()
            proc.wait()


if __name__ == "__main__":
    main()
