"""Bench p: many short rows in one request (`packing.rows`), past the requests-per-minute wall.

Part `short`: a corpus of short rows (about 60-150 tokens each with its 3 questions) on an
embedded service limited to 600 RPM and 20,000 tokens/s (its own process), run twice with
`evalpipe run` in a subprocess: alone (`packing.rows: 1`) and packed (`packing.rows: auto`, which
first measures agreement and cost on 200 rows). From the service's counters over the steady
middle of each run: rows per second (steady tokens/s ÷ billed tokens per row), against the
token bound (20,000 ÷ billed tokens per row) and against the alone rate; billed tokens per row
packed ÷ alone; 429s.

Part `demo`: the demo corpus (`configs/demo.yaml`, 3,000 reviews) at the seed's limits (1,200
RPM, 250,000 tokens/s) on the embedded service the job starts: wall time alone and packed, and
the share of the token limit used while sending.

    .venv/bin/python bench/job_packing.py                 # both parts
    .venv/bin/python bench/job_packing.py --part short --seconds 40
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import (
    BENCH_DIR,
    EVALPIPE,
    KEY,
    KEY_ENV,
    QUESTION_TOKENS,
    ROOT,
    ServiceWatch,
    header,
    load,
    output_rows,
    run_job,
    service,
    steady,
    table,
    write_config,
)

_TEXT = (
    "the kettle boiled fast but the lid stuck and the handle got hot after a week of daily use "
    "so we returned it and bought the cheaper model which works fine for tea and soup every "
    "morning without any fuss at all from anyone in our small flat near the station"
)
WORDS = _TEXT.split()


def short_corpus(rows: int) -> Path:
    """Distinct states of 35-125 words (with the questions: about 60-150 tokens a row)."""
    path = BENCH_DIR / f"short-{rows}.parquet"
    if path.exists():
        return path
    BENCH_DIR.mkdir(parents=True, exist_ok=True)
    texts = []
    for i in range(rows):
        n = 35 + (i * 37) % 91
        texts.append(" ".join(WORDS[(i + 3 * j) % len(WORDS)] for j in range(n)) + f" row {i}")
    pq.write_table(pa.table({"id": list(range(rows)), "text": texts}), path)
    return path


def _short_run(name: str, path: Path, args: argparse.Namespace, packing: Any) -> dict[str, Any]:
    with service(rpm=args.rpm, tps=args.tps, latency=args.latency) as embedded:
        config, out = write_config(
            name, path, embedded.base_url, rpm=args.rpm, tps=args.tps,
            extra={"packing": {"rows": packing}},
        )  # fmt: skip
        with ServiceWatch(embedded) as watch:
            job = run_job(config, out, env={"XDG_CACHE_HOME": str(BENCH_DIR / f"xdg-{name}")})
            after = job.started if packing == 1 else _packs_flowing(watch, job.started)
            figures = steady(watch, after, args.warmup, args.tail)
    s = job.summary
    per_row = s["input_tokens"] / max(1, s["rows_answered"])
    return {"summary": s, "steady": figures, "per_row": per_row, "rows": output_rows(out)}


def _packs_flowing(watch: ServiceWatch, after: float) -> float:
    """When packs began to flow (after `auto`'s measurement, whose first part asks rows
    alone): the first second in which requests carried over 4 times a short row's tokens."""
    for s in watch.since(after):
        requests, tokens, accepted, _ = watch.rate(s.t - 1.0, s.t)
        if accepted and tokens / max(requests, 1e-9) > 4 * 130:
            return s.t - 1.0
    return after


def short(args: argparse.Namespace) -> None:
    packed_rows = int(args.tps / 110 * args.seconds)  # ~110 billed tokens a row packed
    alone_rows = int(args.rpm / 60 * args.alone_seconds)
    header(
        f"Bench p (short rows): {args.rpm:g} RPM, {args.tps:g} tokens/s, ~{QUESTION_TOKENS} "
        f"question tokens + 35-125 words a row; {alone_rows} rows alone, {packed_rows} packed"
    )
    alone = _short_run("pack-alone", short_corpus(alone_rows), args, 1)
    packed = _short_run("pack-auto", short_corpus(packed_rows), args, "auto")
    a_rate = alone["steady"]["steady_rps"]  # one row per request
    p_rate = packed["steady"]["steady_tps"] / packed["per_row"]
    bound = args.tps / packed["per_row"]
    p = packed["summary"].get("packing", {})
    print(f"packed run: {p.get('rows')} rows per request at most ({p.get('reason')})")
    print(
        f"            {p.get('rows_per_request')} rows per request on average, "
        f"{packed['summary']['requests']} requests, cost ratio measured {p.get('cost_ratio')}"
    )
    rows = []
    for name, run, rate in (("alone", alone, a_rate), ("packed (auto)", packed, p_rate)):
        st, s = run["steady"], run["summary"]
        rows.append(
            (
                name,
                f"{run['rows']}",
                f"{rate:.1f}",
                f"{args.tps / run['per_row']:.1f}",
                f"{rate / (args.tps / run['per_row']):.1%}",
                f"{rate / a_rate:.1f}x",
                f"{run['per_row']:.1f}",
                f"{run['per_row'] / alone['per_row']:.3f}",
                f"{st['steady_rps'] * 60:.0f}",
                f"{st['steady_tps']:,.0f}",
                f"{s['rate_limited_429']} / {st['rate_limited']}",
                f"{s['wall_seconds']:.1f}",
                st["load"],
            )
        )
    table(
        rows,
        ("run", "rows", "rows/s steady", "token bound", "÷ bound", "÷ alone", "billed/row",
         "÷ alone", "RPM", "tokens/s", "429 job/service", "wall s", "load"),
    )  # fmt: skip
    print(f"token bound packed: {bound:.1f} rows/s")


def _demo_run(name: str, packing: Any, args: argparse.Namespace) -> dict[str, Any]:
    out = BENCH_DIR / "out" / name
    command = [
        EVALPIPE, "run", str(ROOT / "configs" / "demo.yaml"), "--restart",
        "--progress-interval", "3600", "--log-format", "json",
        "--set", f"output.path={out}",
        "--set", f"limits.requests_per_minute={args.demo_rpm:g}",
        "--set", f"limits.tokens_per_second={args.demo_tps:g}",
        "--set", "cache.enabled=false",
        "--set", f"packing.rows={packing}",
    ]  # fmt: skip
    env = {"XDG_CACHE_HOME": str(BENCH_DIR / f"xdg-{name}"), KEY_ENV: KEY}
    started = time.monotonic()
    done = subprocess.run(command, cwd=ROOT, env={**_env(), **env}, capture_output=True, text=True)
    wall = time.monotonic() - started
    if done.returncode != 0:
        print(done.stderr[-2000:], file=sys.stderr)
    summary = json.loads((out / "_manifest.json").read_text())["summary"]
    return {"summary": summary, "wall": wall}


def _env() -> dict[str, str]:
    import os

    env = dict(os.environ)
    env.pop("RAY_ADDRESS", None)
    return env


def demo(args: argparse.Namespace) -> None:
    header(
        f"Bench p (demo corpus): configs/demo.yaml at {args.demo_rpm:g} RPM and "
        f"{args.demo_tps:g} tokens/s on the embedded service, alone and packed (auto)"
    )
    rows = []
    runs = [("demo-alone", 1), ("demo-auto", "auto"), ("demo-auto", "auto")]
    for i, (name, packing) in enumerate(runs):
        if i == 1:  # the first packed run measures; the second uses what the first kept
            shutil.rmtree(BENCH_DIR / f"xdg-{name}", ignore_errors=True)
        run = _demo_run(name, packing, args)
        s = run["summary"]
        sending = s["wall_seconds"] - s["startup_seconds"]
        p = s.get("packing", {})
        rows.append(
            (
                f"{name} (rows {p.get('rows')}, {'kept' if i == 2 else 'measured'})"
                if packing != 1
                else name,
                f"{s['rows_answered']}",
                f"{s['requests']}",
                f"{s['input_tokens']:,}",
                f"{s['wall_seconds']:.1f}",
                f"{sending:.1f}",
                f"{s['achieved_rpm']:.0f}",
                f"{s['achieved_tps']:,.0f}",
                f"{s['achieved_tps'] / args.demo_tps:.1%}",
                f"{s['rate_limited_429']}",
                load(),
            )
        )
        if p.get("reason"):
            print(f"{name}: {p['reason']}")
    table(
        rows,
        ("run", "rows", "requests", "tokens", "wall s", "sending s", "RPM", "tokens/s",
         "÷ TPS limit", "429s", "load"),
    )  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--part", choices=("short", "demo", "both"), default="both")
    parser.add_argument("--rpm", type=float, default=600)
    parser.add_argument("--tps", type=float, default=20_000)
    parser.add_argument("--latency", type=float, default=0.2, help="service median seconds")
    parser.add_argument("--seconds", type=float, default=60, help="packed: sending time, about")
    parser.add_argument("--alone-seconds", type=float, default=30)
    parser.add_argument("--warmup", type=float, default=5.0)
    parser.add_argument("--tail", type=float, default=3.0)
    parser.add_argument("--demo-rpm", type=float, default=1200)
    parser.add_argument("--demo-tps", type=float, default=250_000)
    args = parser.parse_args()
    if args.part in ("short", "both"):
        short(args)
    if args.part in ("demo", "both"):
        demo(args)


if __name__ == "__main__":
    main()
