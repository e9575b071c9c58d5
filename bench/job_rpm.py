"""Bench a: an RPM-bound job sits on the floor without 429s.

Short states (about 20 tokens), a 1,200 RPM limit (20 requests/s) and about 1 s of service
latency. The whole job runs (`evalpipe run`, Ray actors, Parquet out) against the embedded
service in its own process; the service's counters, sampled every 0.25 s, give the steady
rate: accepted requests/s from `--warmup` s after its first accepted request to `--tail` s
before its last. Then, in the same run and against the same service, the plain script of
bench/reference_limiter.py (asyncio + httpx/aiohttp + `AsyncLimiter(20, 1)`) on the same
corpus, for comparison.

    .venv/bin/python bench/job_rpm.py                      # ~90 s of sending, then the script
    .venv/bin/python bench/job_rpm.py --seconds 30 --reference-seconds 20    # quick
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import (
    KEY,
    KEY_ENV,
    ROOT,
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


def reference(url: str, corpus_path: Path, rate: float, rows: int) -> dict[str, Any]:
    command = [sys.executable, str(ROOT / "bench" / "reference_limiter.py"), "--url", url]
    command += ["--corpus", str(corpus_path), "--rate", str(rate), "--rows", str(rows)]
    env = {**os.environ, KEY_ENV: KEY}
    done = subprocess.run(command, env=env, capture_output=True, text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rpm", type=float, default=1200)
    parser.add_argument("--latency", type=float, default=1.0, help="service median seconds")
    parser.add_argument("--seconds", type=float, default=90, help="sending time at the limit")
    parser.add_argument("--actors", type=int, default=2)
    parser.add_argument("--words", type=int, default=20, help="tokens per state, about")
    parser.add_argument("--warmup", type=float, default=5.0)
    parser.add_argument("--tail", type=float, default=2.0)
    parser.add_argument("--headroom", type=float, default=None, help="limits.headroom")
    parser.add_argument(
        "--reference-seconds", type=float, default=60, help="0 = skip the plain script"
    )
    args = parser.parse_args()
    per_second = args.rpm / 60
    rows = math.ceil(per_second * args.seconds)
    path = corpus(rows, args.words)
    header(f"Bench a: RPM-bound, {args.rpm:g} RPM, latency {args.latency:g} s, {rows} rows")
    with service(rpm=args.rpm, tps=1e9, latency=args.latency) as embedded:
        config, out = write_config(
            "rpm",
            path,
            embedded.base_url,
            rpm=args.rpm,
            tps=1e9,
            actors=args.actors,
            headroom=args.headroom,
        )
        with ServiceWatch(embedded) as watch:
            job = run_job(config, out)
            ours = steady(watch, job.started, args.warmup, args.tail)
            ref_rows = math.ceil(per_second * args.reference_seconds)
            ref: dict[str, Any] | None = None
            if ref_rows:
                mark = watch.sample().t
                ref = reference(embedded.base_url, path, per_second, ref_rows)
                ref |= steady(watch, mark, min(args.warmup, 2.0), args.tail)
    s = job.summary
    floor = s["requests"] / per_second
    print(
        f"job: {s['rows_answered']} of {s['rows_total']} rows answered, "
        f"{output_rows(out)} output rows, {s['attempts']} attempts, {s['rate_limited_429']} "
        f"answered 429; wall {s['wall_seconds']:.1f} s (start-up {s['startup_seconds']:.1f} s); "
        f"floor {floor:.1f} s; steady window {ours['steady_seconds']:.0f} s"
    )
    print(
        f"service side: first request {ours['first'] - job.started:.1f} s after the command, "
        f"sending {ours['last'] - ours['first']:.1f} s, the command ended "
        f"{job.ended - ours['last']:.1f} s after the last request"
    )
    rows_out = [
        (
            f"evalpipe ({args.actors} actors)",
            f"{ours['steady_rps']:.2f}",
            f"{ours['steady_rps'] / per_second:.1%}",
            f"{ours['rate_limited']} / {ours['share_429']:.2%}",
            f"{s['wall_seconds'] / floor:.3f}",
            f"{(s['wall_seconds'] - s['startup_seconds']) / floor:.3f}",
            str(s["rows_total"] - s["rows_answered"]),
            ours["load"],
        )
    ]
    if ref is not None:
        ref_floor = ref["rows"] / per_second
        rows_out.append(
            (
                f"plain AsyncLimiter({per_second:g}, 1)",
                f"{ref['steady_rps']:.2f}",
                f"{ref['steady_rps'] / per_second:.1%}",
                f"{ref['rate_limited']} / {ref['share_429']:.2%}",
                "-",
                f"{ref['seconds'] / ref_floor:.3f}",
                str(ref["rows"] - ref["ok"]),
                ref["load"],
            )
        )
    table(
        rows_out,
        (
            "client",
            "steady req/s",
            f"÷ {per_second:g}",
            "429s / share",
            "wall ÷ floor",
            "sending ÷ floor",
            "rows lost",
            "load",
        ),
    )


if __name__ == "__main__":
    main()
