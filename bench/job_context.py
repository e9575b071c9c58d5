"""Bench j: what refusals for length cost when the service counts more tokens than evalpipe.

A corpus of long states and long questions made of 13-letter words, against the embedded
service counting as a subword tokenizer does (`serve --token-rule subword`: 4 tokens for each
13-letter word, where evalpipe counts 1). By evalpipe's count every row fits one request; by
the service's, a 3,000-word state with its five 3,000-word questions is 72k tokens (over the
64k limit: it fits as two requests), and a 6,000-word state is over 32k with any question
(`context_limit`). What is measured, at the account's limits (1,200 RPM, 250k tokens/s):

- `evalpipe plan`, then `evalpipe plan --calibrate 3`: what each predicts;
- `evalpipe run`: rows answered and refused, requests, requests refused for length (sent,
  refused, split and sent again: they spend the rate budget, not the bill), billed tokens and
  the wall time. The run calibrates itself from `usage`: after the first answers, rows are
  split before they are sent, so refusals come only from the rows planned before that (the
  driver plans rows as far ahead as it keeps the workers busy: about 180 at these limits).

    .venv/bin/python bench/job_context.py                  # 200 + 4 rows, about a minute
    .venv/bin/python bench/job_context.py --rows 20 --long 4   # every row planned at once
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import BENCH_DIR, EVALPIPE, KEY, KEY_ENV, ROOT, header, load, run_job, table
from evalpipe.service import EmbeddedService, ServiceSettings

WORDS = ["international", "consideration", "environmental", "comprehensive", "relationships"]


def text(words: int, seed: int) -> str:
    """`words` 13-letter words, and the seed: no two seeds give the same state."""
    return " ".join(WORDS[(i * 7 + seed) % len(WORDS)] for i in range(words)) + f" {seed}"


def write_job(url: str, rows: int, long: int) -> tuple[Path, Path]:
    corpus = BENCH_DIR / f"context-{rows}x{long}.parquet"
    texts = [text(3_000, i) for i in range(rows)] + [text(6_000, 100 + i) for i in range(long)]
    BENCH_DIR.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table({"id": list(range(len(texts))), "text": texts}), corpus)
    questions = {
        f"q{i}": {"type": "noul", "instructions": f"Question {i}? " + text(3_000, 50 + i)}
        for i in range(5)
    }
    out = BENCH_DIR / "out" / "context"
    config: dict[str, Any] = {
        "input": {"path": str(corpus), "id_column": "id", "state": "text"},
        "output": {"path": str(out)},
        "service": {"base_url": url, "api_key_env": KEY_ENV},
        "model": "model-1.13.0",
        "limits": {"requests_per_minute": 1200, "tokens_per_second": 250_000},
        "cache": {"enabled": False},
        "questions": questions,
    }
    path = BENCH_DIR / "context.yaml"
    path.write_text(json.dumps(config))  # JSON is YAML
    return path, out


def plan(config: Path, *extra: str) -> dict[str, Any]:
    env = {**os.environ, KEY_ENV: KEY}
    command = [EVALPIPE, "plan", str(config), "--json", *extra]
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, check=True)
    figures: dict[str, Any] = json.loads(done.stdout)
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=200, help="rows that fit as two requests")
    parser.add_argument("--long", type=int, default=4, help="rows over 32k with any question")
    args = parser.parse_args()
    header(f"j. refusals for length, the service counting 4x for long words ({load()})")
    settings = ServiceSettings(api_key=KEY, token_rule="subword", latency=0.2)
    with EmbeddedService(settings, mode="process") as service:
        config, out = write_job(service.base_url, args.rows, args.long)
        ours, calibrated = plan(config), plan(config, "--calibrate", "3")
        before = service.stats()
        job = run_job(config, out)
        after = service.stats()
    s = job.summary
    rows = [
        ("plan", str(ours["context_limit_rows"]), str(ours["requests"]), "-",
         f"{ours['estimated_input_tokens']:,}", "-"),
        ("plan --calibrate 3", str(calibrated["context_limit_rows"]),
         str(calibrated["requests"]), "-", f"{calibrated['estimated_input_tokens']:,}", "-"),
        ("run", str(s["rows_in_error"].get("context_limit", 0)), str(s["requests"]),
         str(s["requests_refused_for_length"]), f"{s['input_tokens']:,}",
         f"{job.ended - job.started:.1f} s"),
    ]  # fmt: skip
    table(rows, ("", "context_limit rows", "requests", "refused for length", "tokens", "wall"))
    refused_422 = after["responses"].get("422", 0) - before["responses"].get("422", 0)
    print(
        f"rows answered {s['rows_answered']} of {args.rows + args.long}; the service answered "
        f"422 {refused_422} times; calibration measured "
        f"{calibrated['service_token_ratio']:.2f} service tokens per evalpipe token "
        f"({calibrated['calibration_requests']} requests, ${calibrated['calibration_cost_usd']})"
    )


if __name__ == "__main__":
    main()
