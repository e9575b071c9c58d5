"""Bench b: a TPS-bound job sits on the token limit without 429s.

States of about 2,000 tokens and a tokens-per-second limit that binds before the request limit
(default 20,000 tokens/s with 1,200 RPM: about 10 requests/s, half the request limit). The whole
job runs against the embedded service in its own process; the service's counters give the
steady tokens/s, from `--warmup` s after its first accepted request to `--tail` s before its
last, and the 429s.

    .venv/bin/python bench/job_tps.py                   # ~90 s of sending
    .venv/bin/python bench/job_tps.py --seconds 30      # quick
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import (
    QUESTION_TOKENS,
    ServiceWatch,
    corpus,
    header,
    output_rows,
    run_job,
    service,
    steady,
    table,
    write_config,
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rpm", type=float, default=1200)
    parser.add_argument("--tps", type=float, default=20_000)
    parser.add_argument("--words", type=int, default=2_000, help="tokens per state, about")
    parser.add_argument("--latency", type=float, default=1.0, help="service median seconds")
    parser.add_argument("--seconds", type=float, default=90, help="sending time at the limit")
    parser.add_argument("--actors", type=int, default=2)
    parser.add_argument("--warmup", type=float, default=5.0)
    parser.add_argument("--tail", type=float, default=2.0)
    args = parser.parse_args()
    per_request = args.words + QUESTION_TOKENS  # the state's tokens plus the questions'
    per_second = min(args.rpm / 60, args.tps / per_request)
    rows = math.ceil(per_second * args.seconds)
    path = corpus(rows, args.words)
    header(
        f"Bench b: TPS-bound, {args.tps:g} tokens/s and {args.rpm:g} RPM, ~{per_request} tokens "
        f"a request (~{per_second:.1f} requests/s), latency {args.latency:g} s, {rows} rows"
    )
    with service(rpm=args.rpm, tps=args.tps, latency=args.latency) as embedded:
        config, out = write_config(
            "tps", path, embedded.base_url, rpm=args.rpm, tps=args.tps, actors=args.actors
        )
        with ServiceWatch(embedded) as watch:
            job = run_job(config, out)
            ours = steady(watch, job.started, args.warmup, args.tail)
    s = job.summary
    floor = max(s["requests"] / (args.rpm / 60), s["input_tokens"] / args.tps)
    print(
        f"job: {s['rows_answered']} of {s['rows_total']} rows answered, {output_rows(out)} "
        f"output rows, {s['attempts']} attempts, {s['rate_limited_429']} answered 429, "
        f"{s['input_tokens']:,} tokens; wall {s['wall_seconds']:.1f} s (start-up "
        f"{s['startup_seconds']:.1f} s); floor {floor:.1f} s; steady window "
        f"{ours['steady_seconds']:.0f} s"
    )
    table(
        [
            (
                f"evalpipe ({args.actors} actors)",
                f"{ours['steady_tps']:,.0f}",
                f"{ours['steady_tps'] / args.tps:.1%}",
                f"{ours['steady_rps']:.2f}",
                f"{ours['rate_limited']} / {ours['share_429']:.2%}",
                f"{(s['wall_seconds'] - s['startup_seconds']) / floor:.3f}",
                ours["load"],
            )
        ],
        (
            "client",
            "steady tokens/s",
            f"÷ {args.tps:g}",
            "req/s",
            "429s / share",
            "sending ÷ floor",
            "load",
        ),
    )


if __name__ == "__main__":
    main()
