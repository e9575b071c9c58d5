"""What the bounds of issue 49 cost where they run for every row and every answer.

- The row's byte bound (`Planner.oversized`, asked by the classifier for every row before it
  counts tokens): CPU per row on the demo corpus's states, against the whole classification.
- The answer's size bound (the client reads a body chunk by chunk, counting, instead of in one
  `aread`): CPU per answer of the demo's size, both ways, through httpx's MockTransport.
- What a 50 MB answer and a 100 MB row cost now: the bytes read before the answer is refused,
  and the time to refuse the row (it is hashed for `_state_hash`, never counted).

    .venv/bin/python bench/bounds_cost.py
"""

from __future__ import annotations

import asyncio
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import orjson
import pyarrow.parquet as pq

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from conftest import QUESTIONS  # noqa: E402
from evalpipe.input import Row  # noqa: E402
from evalpipe.planning import Planner, RowClassifier  # noqa: E402
from evalpipe.send import EvalClient  # noqa: E402

MB = 1_000_000


def _cpu(run: Any, repeat: int = 5) -> float:
    """The least CPU seconds of `repeat` calls of `run` (the machine is shared)."""
    best = float("inf")
    for _ in range(repeat):
        start = time.process_time()
        run()
        best = min(best, time.process_time() - start)
    return best


def row_bound() -> None:
    texts = pq.read_table(ROOT / "data" / "demo" / "reviews.parquet")["text"].to_pylist()
    rows = [Row(i, text, None) for i, text in enumerate(texts)]
    planner = Planner(QUESTIONS)
    check = _cpu(lambda: [planner.oversized(text) for text in texts])
    whole = _cpu(lambda: RowClassifier(Planner(QUESTIONS), set()).classify_batch(rows))
    n = len(rows)
    print(f"row bound: {check / n * 1e6:.2f} us/row of {whole / n * 1e6:.2f} us/row classified "
          f"({check / whole:.1%}), {n} demo rows")  # fmt: skip
    big = Row("big", "x" * (100 * MB), None)
    classifier = RowClassifier(Planner(QUESTIONS), set())
    start = time.perf_counter()
    decision = classifier.classify(big)
    print(f"a 100 MB row: {decision.fate.value} in {time.perf_counter() - start:.2f} s")


def answer_bound() -> None:
    body = orjson.dumps({"model": "model-1.13.0", "answers": {}, "usage": {"input_tokens": 1}})
    body += b" " * (1500 - len(body))  # the size of a demo answer of three questions

    async def reads(n: int, bounded: bool) -> None:
        client = EvalClient("http://svc", "key", transport=httpx.MockTransport(lambda r: r))
        for _ in range(n):
            response = httpx.Response(200, content=body)
            if bounded:
                await client._read(response, "POST /v1/evaluate")
            else:
                await response.aread()

    n = 10_000
    best = {False: float("inf"), True: float("inf")}
    for _ in range(5):  # alternated, the least of each: the machine is shared
        for bounded in (False, True):
            cpu = _cpu(lambda: asyncio.run(reads(n, bounded)), repeat=1)  # noqa: B023
            best[bounded] = min(best[bounded], cpu / n)
    print(f"an answer's read and its Response: {best[False] * 1e6:.2f} us with aread, "
          f"{best[True] * 1e6:.2f} us bounded")  # fmt: skip
    sent = [0]

    async def huge() -> Any:
        async def chunks() -> Any:
            for _ in range(50):
                sent[0] += MB
                yield b" " * MB

        transport = httpx.MockTransport(lambda r: httpx.Response(200, content=chunks()))
        async with EvalClient("http://svc", "key", transport=transport) as client:
            return await client.evaluate({"state": "s"}, {}, 1)

    start = time.perf_counter()
    result = asyncio.run(huge())
    print(f"a 50 MB answer: {result.error.error_type} after {sent[0] / MB:.0f} MB read, "
          f"{result.attempts} attempt, {time.perf_counter() - start:.2f} s")  # fmt: skip


if __name__ == "__main__":
    row_bound()
    answer_bound()
