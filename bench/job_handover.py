"""Bench h: the hand-over from `packing.rows: auto`'s measurement to the run's Budget.

The measurement asks a sample of the corpus alone and packed before the run's workers send;
then the run's Budget paces the rest. Two figures at the moment one hands over to the other:
the 429s the service answered there, and the time from the measurement's last answer to the
run's first request.

The service is `evalpipe serve` (strict limits: the real service's one-second buckets) in a
process of its own, logging every request (`--log-requests`); this script stamps each line as
it arrives and takes the request's arrival as that stamp less the request's own time (`%Tf`).
The job is `evalpipe run` in a process of its own, the CLI's own entry point, with a shim that
records when the measurement's last answer came back (`evalpipe.preflight.measure._measure`
returned). Every run has a fresh cache folder: it measures, and no schedule is left over.

`--variant beside`: another job on the same key and machine (rows alone, at the limit) is
sending when the measured job starts, and stops (SIGTERM) when its measurement ends: the 429s
while the measurement and that job's Budget send together.

    .venv/bin/python bench/job_handover.py                      # demo corpus, 1,200 RPM
    .venv/bin/python bench/job_handover.py --corpus short --rpm 600 --tps 20000 --repeat 3
    .venv/bin/python bench/job_handover.py --variant no-handover   # before: without its sleep
    .venv/bin/python bench/job_handover.py --corpus short --rpm 600 --tps 20000 --variant beside
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import BENCH_DIR, EVALPIPE, KEY, KEY_ENV, ROOT, header, load, table

_LINE = re.compile(r'"POST /v1/evaluate [^"]*" (\d{3}) \S+ ([0-9.]+)s')
WINDOW = 3.0  # seconds of the run, from its first request, that count as the hand-over


class Served:
    """`evalpipe serve` with --log-requests: (arrival, status) of every evaluate request."""

    def __init__(self, args: argparse.Namespace) -> None:
        command = [
            EVALPIPE, "serve", "--port", "0", "--rpm", f"{args.rpm:g}", "--tps", f"{args.tps:g}",
            "--latency", f"{args.latency:g}", "--max-inflight", "100000", "--log-requests",
        ]  # fmt: skip
        env = {**os.environ, KEY_ENV: KEY}
        self.proc = subprocess.Popen(
            command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        assert self.proc.stdout is not None
        self.url = self.proc.stdout.readline().strip()
        self.requests: list[tuple[float, int]] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            stamp = time.monotonic()
            match = _LINE.search(line)
            if match:
                self.requests.append((stamp - float(match.group(2)), int(match.group(1))))

    def close(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=30)
        self._reader.join(timeout=5)


def child(config: str, marks: str, variant: str, sets: list[str]) -> None:
    """The job, as `evalpipe run` runs it, with the measurement's start and end (its last
    answer) recorded in `marks`."""
    try:  # the module's home since the house of issue 44; before it, evalpipe.job's
        import evalpipe.preflight.measure as packmeasure
    except ImportError:
        import evalpipe.job.packmeasure as packmeasure  # type: ignore[no-redef]

    from evalpipe.cli import main

    measure = packmeasure._measure

    async def timed(*args: Any) -> Any:
        started = time.monotonic()
        measured = await measure(*args)
        with open(marks, "a") as out:
            out.write(json.dumps({"started": started, "measured": time.monotonic()}) + "\n")
        return measured

    packmeasure._measure = timed  # type: ignore[assignment]
    if variant == "no-handover":
        if not hasattr(packmeasure, "HANDOVER_SECONDS"):
            raise SystemExit("no-handover: this version has no hand-over sleep")
        packmeasure.HANDOVER_SECONDS = 0.0  # type: ignore[attr-defined]
    main(["run", config, "--restart", "--progress-interval", "3600", "--log-format", "json", *sets])


def _job(
    args: argparse.Namespace,
    served: Served,
    out: Path,
    cache: Path,
    packing: str,
    command: list[str],
) -> subprocess.Popen[str]:
    """`command` (a job on configs/demo.yaml) against `served`, writing to `out`."""
    overrides = {
        "service.base_url": served.url,
        "service.api_key_env": KEY_ENV,
        "output.path": str(out),
        "limits.requests_per_minute": f"{args.rpm:g}",
        "limits.tokens_per_second": f"{args.tps:g}",
        "cache.enabled": "false",
        "packing.rows": packing,
        **_corpus(args),
    }
    sets = [f"--set={key}={value}" for key, value in overrides.items()]
    env = {**os.environ, KEY_ENV: KEY, "XDG_CACHE_HOME": str(cache)}
    env.pop("RAY_ADDRESS", None)
    return subprocess.Popen(
        [*command, *sets], cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True,
    )  # fmt: skip


def _beside(
    args: argparse.Namespace, served: Served, name: str, cache: Path
) -> subprocess.Popen[str]:
    """Another job on the key (rows alone, at the limit), sending before the measured one."""
    config = str(ROOT / "configs" / "demo.yaml")
    command = [EVALPIPE, "run", config, "--restart", "--progress-interval", "3600"]
    other = _job(args, served, BENCH_DIR / "out" / f"{name}-beside", cache, "1", command)
    while len(served.requests) < args.rpm / 60 * 3:  # 3 s of it at the limit
        if other.poll() is not None:
            raise SystemExit(f"the job beside ended: {other.communicate()[1][-2000:]}")
        time.sleep(0.1)
    return other


def one_run(args: argparse.Namespace, variant: str, i: int) -> dict[str, Any]:
    name = f"handover-{args.corpus}-{variant}-{i}"
    cache = BENCH_DIR / f"xdg-{name}"
    shutil.rmtree(cache, ignore_errors=True)
    marks = BENCH_DIR / f"{name}.marks"
    marks.unlink(missing_ok=True)
    out = BENCH_DIR / "out" / name
    served = Served(args)
    other: subprocess.Popen[str] | None = None
    job: subprocess.Popen[str] | None = None
    try:
        if variant == "beside":
            other = _beside(args, served, name, cache)
        config = str(ROOT / "configs" / "demo.yaml")
        shim = [sys.executable, __file__, "--child", config, str(marks), variant]
        job = _job(args, served, out, cache, "auto", shim)
        while other is not None and job.poll() is None and not marks.exists():
            time.sleep(0.05)
        if other is not None:  # the measurement is over: the other job stops (SIGTERM)
            other.terminate()
            other.communicate()
        _, err = job.communicate()
        time.sleep(0.5)  # the last log lines
    finally:
        for proc in (other, job):
            if proc is not None and proc.poll() is None:
                proc.kill()
        served.close()
    assert job is not None
    if job.returncode != 0:
        print(err[-3000:], file=sys.stderr)
        raise SystemExit(f"{name}: exit {job.returncode}")
    mark = json.loads(marks.read_text().splitlines()[0])
    started, measured = mark["started"], mark["measured"]
    summary = json.loads((out / "_manifest.json").read_text())["summary"]
    measuring = [s for t, s in served.requests if started <= t <= measured]
    after = sorted((t, s) for t, s in served.requests if t > measured)
    first = after[0][0]
    at_handover = [s for t, s in after if t <= first + WINDOW]
    return {
        "variant": variant,
        "gap": first - measured,
        "handover_429": at_handover.count(429),
        "handover_requests": len(at_handover),
        "measuring_seconds": measured - started,
        "measurement_429": measuring.count(429),
        "measuring_requests": len(measuring),
        "run_429": [s for _, s in after].count(429),
        "run_seconds": after[-1][0] - first,
        "rows": summary.get("packing", {}).get("rows"),
        "wall": summary["wall_seconds"],
        "load": load(),
    }


def _corpus(args: argparse.Namespace) -> dict[str, str]:
    if args.corpus == "demo":
        return {}
    from job_packing import short_corpus

    path = short_corpus(args.rows)
    return {"input.path": str(path), "input.id_column": "id", "input.state": "text"}


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        config, marks, variant, *sets = sys.argv[2:]
        return child(config, marks, variant, sets)
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", choices=("demo", "short"), default="demo")
    parser.add_argument("--rows", type=int, default=3000, help="short corpus: rows")
    parser.add_argument("--rpm", type=float, default=1200)
    parser.add_argument("--tps", type=float, default=250_000)
    parser.add_argument("--latency", type=float, default=0.2, help="service median seconds")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--variant", choices=("as-is", "no-handover", "beside"), action="append")
    args = parser.parse_args()
    variants = args.variant or ["as-is"]
    header(
        f"Bench h: the measurement's hand-over to the run ({args.corpus} corpus, "
        f"{args.rpm:g} RPM, {args.tps:g} tokens/s, latency {args.latency:g} s)"
    )
    rows = []
    for variant in variants:
        for i in range(args.repeat):
            r = one_run(args, variant, i)
            rows.append(
                (
                    r["variant"], f"{r['gap']:.2f}", f"{r['handover_429']}",
                    f"{r['handover_requests']}", f"{r['measuring_seconds']:.1f}",
                    f"{r['measurement_429']} / {r['measuring_requests']}", f"{r['run_429']}",
                    f"{r['rows']}", f"{r['run_seconds']:.1f}", f"{r['wall']:.1f}", r["load"],
                )
            )  # fmt: skip
            print(json.dumps(r), flush=True)
    table(
        rows,
        ("variant", "measured → first run request, s", f"429s in the run's first {WINDOW:g} s",
         "requests then", "measuring s", "429s / requests measuring", "429s after", "rows/request",
         "run's first → last request, s", "wall s", "load"),
    )  # fmt: skip
    return None


if __name__ == "__main__":
    main()
