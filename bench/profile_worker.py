"""Where one Worker spends its CPU: the actor's code without Ray, under cProfile.

Bench d compares the job's actors (CPU per row) with a bare aiohttp loop (CPU per request).
This runs a `Worker` (the class, not the actor) in this process against the embedded service in
its own process, limits lifted and zero latency, with the Budget called in-process instead of
through Ray, and prints the Worker's CPU per row for a few rounds, then (with `--profile`) the
top of a cProfile by cumulative time: how much is httpx, aiohttp, the contract check, pacing.

    .venv/bin/python bench/profile_worker.py                  # CPU per row, 5 rounds
    .venv/bin/python bench/profile_worker.py --profile        # and where it goes
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import os
import pstats
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import KEY, KEY_ENV, QUESTIONS, corpus, first_state, header
from evalpipe.config import RetryPolicy
from evalpipe.contract.resources import question_dicts, validate_questions
from evalpipe.limits.budget import Budget
from evalpipe.planning import Planner
from evalpipe.send.actors import StateJob, Worker, WorkerSettings
from evalpipe.service import EmbeddedService, ServiceSettings

CHUNK = 64


class _Method:
    """`budget.method.remote(...)` as an awaitable, the way a Ray actor handle answers."""

    def __init__(self, method: Any) -> None:
        self._method = method

    def remote(self, *args: Any) -> Any:
        result = self._method(*args)
        if asyncio.iscoroutine(result):
            return result

        async def done() -> Any:
            return result

        return done()


class LocalBudget:
    """A Budget in this process behind the actor-handle interface the LeasePacer expects."""

    def __init__(self) -> None:
        self._budget = Budget(1e9, 1e13)

    def __getattr__(self, name: str) -> _Method:
        return _Method(getattr(self._budget, name))


async def one_round(settings: WorkerSettings, jobs: list[StateJob]) -> tuple[float, float]:
    """(CPU µs per row, rows/s) of a fresh Worker sending `jobs` in chunks."""
    worker = Worker(settings, LocalBudget())
    cpu, wall = time.process_time(), time.monotonic()
    for i in range(0, len(jobs), CHUNK):
        await worker.process(jobs[i : i + CHUNK])
    cpu, wall = time.process_time() - cpu, time.monotonic() - wall
    await worker.close()
    return cpu / len(jobs) * 1e6, len(jobs) / wall


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=3000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--profile", action="store_true", help="print a cProfile of a round")
    parser.add_argument("--top", type=int, default=30)
    args = parser.parse_args()
    header(f"One Worker without Ray: {args.rounds} rounds of {args.rows} rows")
    os.environ[KEY_ENV] = KEY
    questions = question_dicts(validate_questions(QUESTIONS))
    state = first_state(corpus(200, 20))
    planner = Planner(questions)
    plan = planner.plan(state)
    jobs = [StateJob(i, f"{state} {i}", plan.requests) for i in range(args.rows)]
    service = ServiceSettings(api_key=KEY, rpm=1e9, tps=1e13)
    with EmbeddedService(service, port=0, mode="process") as embedded:
        settings = WorkerSettings(
            embedded.base_url,
            KEY_ENV,
            "model-1.13.0",
            questions,
            planner.question_tokens,
            RetryPolicy(),
            CHUNK,
        )
        asyncio.run(one_round(settings, jobs[:500]))  # warm-up: connections, caches
        for _ in range(args.rounds):
            cpu, rate = asyncio.run(one_round(settings, jobs))
            print(f"{cpu:,.0f} µs of CPU a row, {rate:,.0f} rows/s", flush=True)
        if args.profile:
            profile = cProfile.Profile()
            profile.enable()
            asyncio.run(one_round(settings, jobs))
            profile.disable()
            pstats.Stats(profile).sort_stats("cumulative").print_stats(args.top)


if __name__ == "__main__":
    main()
