"""Bench e: peak memory of the driver and of the actors, for a small and a 10x larger corpus.

Each corpus (distinct short states; generated once under BENCH_DIR, outside the repository)
is scored by the whole job (`evalpipe run`) against the embedded service in its own process,
limits lifted and zero latency, so the job runs as fast as this machine lets it. The job's
process tree is sampled every 0.5 s with psutil; the peak RSS is reported per role: the driver
(the `evalpipe run` process), each actor (the largest one), the Budget actor, and Ray's own
processes. A job whose memory is bounded shows the same peaks for both sizes.

    .venv/bin/python bench/job_memory.py                          # 100,000 and 1,000,000 rows
    .venv/bin/python bench/job_memory.py --rows 10000,100000      # quick
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import (
    corpus,
    header,
    load,
    mib,
    output_rows,
    run_job,
    service,
    table,
    write_config,
)

ROLES = ("driver", "actor", "budget", "ray idle worker", "ray infrastructure")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", default="100000,1000000", help="corpus sizes, comma-separated")
    parser.add_argument("--actors", type=int, default=2)
    args = parser.parse_args()
    sizes = [int(n) for n in args.rows.split(",")]
    header(f"Bench e: peak RSS by corpus size ({', '.join(f'{n:,}' for n in sizes)} rows)")
    peaks: dict[int, dict[str, int]] = {}
    rows_out = []
    for n in sizes:
        path = corpus(n, 20)
        with service() as embedded:
            config, out = write_config(
                f"memory-{n}", path, embedded.base_url, rpm=1e9, tps=1e13, actors=args.actors
            )
            job = run_job(config, out, memory=True)
        assert job.memory is not None
        s = job.summary
        peaks[n] = job.memory.peak
        sending = s["wall_seconds"] - s["startup_seconds"]
        print(
            f"{n:,} rows: {s['rows_answered']:,} answered, {output_rows(out):,} output rows, "
            f"wall {s['wall_seconds']:.0f} s ({n / sending:,.0f} rows/s while sending); "
            f"whole tree peak {mib(sum(job.memory.peak_total.values()))}",
            flush=True,
        )
        rows_out.append((f"{n:,}", *(mib(job.memory.peak.get(role, 0)) for role in ROLES), load()))
    table(rows_out, ("rows", "driver", "largest actor", "budget", "idle worker", "Ray's", "load"))
    small, large = sizes[0], sizes[-1]
    for role in ("driver", "actor"):
        ratio = peaks[large].get(role, 0) / max(1, peaks[small].get(role, 0))
        print(f"{role}: {large:,}-row peak / {small:,}-row peak = {ratio:.2f}")


if __name__ == "__main__":
    main()
