"""Bench i: one account, many senders. Jobs on one key share its limits, and use them.

Against the embedded service with strict limits (1,200 RPM, 0.5 s median latency), three cases:

- `cluster`: two jobs joined to one Ray cluster (`--ray-address`, the key in the cluster's
  environment), started `--gap` s apart: they share the account's Budget. Targets: together
  >= 99% of the limit in the steady middle, <= 0.1% 429s.
- `separate`: the same two jobs, each on a Ray of its own (`--ray-address local`), on this
  machine: their Budgets share the account's schedule file (evalpipe.limits.hostpace). Targets:
  together >= 90%, <= 2% 429s, each >= 35% of the limit while both run.
- `machines`: as `separate`, but each job with a cache folder of its own (`XDG_CACHE_HOME`),
  so they do not find each other's schedule file, as jobs on two machines would not: only the
  service's 429s tell each of the other. Same targets.
- `third`: one job beside a third program that sends at a fixed `--third-rate` requests/s on
  the key (bench/reference_limiter.py, which honours retry-after). Target: the job takes
  >= 90% of what the third program leaves.

The combined rate and the 429s are the service's own counters; each job's share over time comes
from its output (`_scored_at`, when each answer reached the job's driver, so about one latency
after the service accepted it). "Steady middle": from `--warmup` s after the last sender started
to `--tail` s before the first one finished.

    .venv/bin/python bench/job_shared.py                          # all four cases, ~5 minutes
    .venv/bin/python bench/job_shared.py --cases separate --repeat 2
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import (
    KEY,
    KEY_ENV,
    ROOT,
    JobRun,
    ServiceWatch,
    corpus,
    header,
    load,
    run_job,
    service,
    table,
    write_config,
)

CASES = ("cluster", "separate", "machines", "third")


def start_jobs(
    configs: list[tuple[Path, Path]], gap: float, args: list[str], apart: bool
) -> list[Future[JobRun]]:
    """The jobs as `evalpipe run` subprocesses, each started `gap` s after the one before;
    `apart`: each with a cache folder of its own (beside its output), as on machines apart."""
    pool = ThreadPoolExecutor(len(configs))
    futures = []
    for i, (config, out) in enumerate(configs):
        if i:
            time.sleep(gap)
        env = {"XDG_CACHE_HOME": str(out.parent / f"{out.name}-cache")} if apart else None
        futures.append(pool.submit(run_job, config, out, args=args, env=env))
    pool.shutdown(wait=False)
    return futures


def scored(out: Path, offset: float) -> list[float]:
    """When each of a job's answers arrived, on this process's monotonic clock."""
    times = pq.read_table(out, columns=["_scored_at"]).column(0).to_pylist()
    return sorted(t.timestamp() - offset for t in times if t is not None)


def per_second(times: list[float], start: float, end: float) -> float:
    return sum(start <= t < end for t in times) / max(1e-9, end - start)


def shares(jobs: dict[str, list[float]], start: float, end: float, step: float) -> str:
    """Each job's requests/s in consecutive `step`-second windows: 't: a/b ...'."""
    cells = []
    t = start
    while t < end:
        rates = "/".join(f"{per_second(ts, t, t + step):.1f}" for ts in jobs.values())
        cells.append(f"+{t - start:.0f}:{rates}")
        t += step
    return " ".join(cells)


def refusals(watch: ServiceWatch, start: float, end: float, step: float) -> str:
    """The service's 429s in consecutive `step`-second windows (from a sample to a sample)."""
    cells = []
    t = start
    while t < end:
        cells.append(f"+{t - start:.0f}:{watch.rate(t, t + step)[3]}")
        t += step
    return " ".join(cells)


def third_sender(url: str, rate: float, rows: int) -> subprocess.Popen[str]:
    """bench/reference_limiter.py sending `rows` requests at `rate` requests/s on the key."""
    path = corpus(rows, 20, first=10_000_000)
    command = [sys.executable, str(ROOT / "bench" / "reference_limiter.py"), "--url", url]
    command += ["--corpus", str(path), "--rate", str(rate), "--in-flight", "64"]
    env = {**os.environ, KEY_ENV: KEY}
    return subprocess.Popen(command, env=env, stdout=subprocess.PIPE, text=True)


def run_case(case: str, args: argparse.Namespace, ray_address: str | None) -> dict[str, Any]:
    limit = args.rpm / 60
    names = ["a", "b"] if case != "third" else ["a"]
    configs = [
        (corpus(args.rows, 20, first=i * 1_000_000), f"shared-{case}-{name}")
        for i, name in enumerate(names)
    ]
    offset = time.time() - time.monotonic()
    with service(rpm=args.rpm, tps=1e9, latency=args.latency) as embedded:
        paths = [
            write_config(name, path, embedded.base_url, rpm=args.rpm, tps=1e9, actors=2)
            for path, name in configs
        ]
        with ServiceWatch(embedded) as watch:
            third = None
            if case == "third":
                third = third_sender(embedded.base_url, args.third_rate, args.rows)
                time.sleep(args.gap)
            # "local": a Ray of its own even when another runs on this machine (a job without
            # --ray-address joins any Ray it finds, and dies with it when that job ends).
            extra = ["--ray-address", ray_address or "local"]
            jobs = start_jobs(paths, args.gap, extra, apart=case == "machines")
            runs = [f.result() for f in jobs]
            if third is not None:
                third.terminate()
                third.communicate()
    if any(r.returncode for r in runs):
        return {"case": case, "failed": [r.returncode for r in runs]}
    answers = {name: scored(out, offset) for name, (_, out) in zip(names, paths, strict=True)}
    first = min(min(ts) for ts in answers.values())
    start = max(min(ts) for ts in answers.values()) + args.warmup
    end = min(max(ts) for ts in answers.values()) - args.tail
    combined = watch.rate(start, end)[0]
    _, _, all_accepted, all_refused = watch.rate(runs[0].started, max(r.ended for r in runs))
    jobs_429 = sum(r.summary.get("rate_limited_429", 0) for r in runs)
    jobs_attempts = sum(r.summary.get("attempts", 0) for r in runs)
    return {
        "case": case,
        "combined": combined / limit,
        "each": {n: per_second(ts, start, end) / limit for n, ts in answers.items()},
        "service_429": all_refused / max(1, all_accepted + all_refused),
        "jobs_429": jobs_429 / max(1, jobs_attempts),
        "window": end - start,
        "trace": shares(answers, first, end, args.step),
        "refusals": refusals(watch, first, end + args.tail, args.step),
        "load": load(),
    }


def report(result: dict[str, Any], args: argparse.Namespace) -> None:
    if "failed" in result:
        print(f"{result['case']}: a job failed (exit codes {result['failed']})")
        return
    each = " / ".join(f"{v:.1%}" for v in result["each"].values())
    rest = (args.rpm / 60 - args.third_rate) / (args.rpm / 60)
    mine = next(iter(result["each"].values()))
    table(
        [
            (
                result["case"],
                f"{result['combined']:.1%}",
                each if result["case"] != "third" else f"{each} ({mine / rest:.1%} of the rest)",
                f"{result['service_429']:.2%}",
                f"{result['jobs_429']:.2%}",
                f"{result['window']:.0f} s",
                result["load"],
            )
        ],
        (
            "case",
            "together ÷ limit",
            "each job ÷ limit",
            "429s (service)",
            "429s (jobs' attempts)",
            "steady window",
            "load",
        ),
    )
    print(f"each job's requests/s by {args.step:g} s: {result['trace']}")
    print(f"the service's 429s by {args.step:g} s: {result['refusals']}")
    print("json: " + json.dumps(result))


def with_cluster(args: argparse.Namespace) -> dict[str, Any]:
    """The `cluster` case, on a Ray cluster started here with the key in its environment."""
    import ray

    os.environ[KEY_ENV] = KEY
    context = ray.init(
        address="local", include_dashboard=False, logging_level="ERROR", log_to_driver=False
    )
    try:
        return run_case("cluster", args, str(context.address_info["gcs_address"]))
    finally:
        ray.shutdown()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", default=",".join(CASES))
    parser.add_argument("--rpm", type=float, default=1200)
    parser.add_argument("--latency", type=float, default=0.5, help="service median seconds")
    parser.add_argument("--rows", type=int, default=700, help="rows of each job")
    parser.add_argument("--gap", type=float, default=5.0, help="seconds between the starts")
    parser.add_argument("--third-rate", type=float, default=5.0)
    parser.add_argument("--warmup", type=float, default=5.0)
    parser.add_argument("--tail", type=float, default=2.0)
    parser.add_argument("--step", type=float, default=5.0, help="share trace resolution")
    parser.add_argument("--repeat", type=int, default=1)
    args = parser.parse_args()
    for case in args.cases.split(","):
        if case not in CASES:
            sys.exit(f"--cases: {case!r} is not one of {', '.join(CASES)}")
        for _ in range(args.repeat):
            header(
                f"Bench i ({case}): {args.rows} rows a job, {args.rpm:g} RPM, latency "
                f"{args.latency:g} s, starts {args.gap:g} s apart"
            )
            result = with_cluster(args) if case == "cluster" else run_case(case, args, None)
            report(result, args)


if __name__ == "__main__":
    main()
