"""Bench e: peak memory of the driver and of the actors, for a small and a 10x larger corpus.

Each corpus (distinct short states; generated once under BENCH_DIR, outside the repository)
is scored by the whole job (`evalpipe run`) against the embedded service in its own process,
limits lifted and zero latency, so the job runs as fast as this machine lets it. The job's
process tree is sampled every 0.5 s with psutil; the peak RSS is reported per role: the driver
(the `evalpipe run` process), each actor (the largest one), the Budget actor, and Ray's own
processes. A job whose memory is bounded shows the same peaks for both sizes.

With `--s3` the corpus and the output are on an S3-compatible server (moto's, on loopback, in
this process: `bench/s3.py`), named by AWS_ENDPOINT_URL: the corpus streams in ranged reads,
the parts are uploaded whole, the journal stays in the local staging folder.

    .venv/bin/python bench/job_memory.py                          # 100,000 and 1,000,000 rows
    .venv/bin/python bench/job_memory.py --rows 10000,100000      # quick
    .venv/bin/python bench/job_memory.py --s3                     # corpus and output on S3
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from pathlib import Path
from typing import Any

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
from s3 import output_rows as s3_output_rows, s3_server, summary, upload

ROLES = ("driver", "actor", "budget", "ray idle worker", "ray infrastructure")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", default="100000,1000000", help="corpus sizes, comma-separated")
    parser.add_argument("--actors", type=int, default=2)
    parser.add_argument("--s3", action="store_true", help="corpus and output on S3 (moto)")
    args = parser.parse_args()
    sizes = [int(n) for n in args.rows.split(",")]
    where = " on S3 (moto)" if args.s3 else ""
    header(f"Bench e: peak RSS by corpus size ({', '.join(f'{n:,}' for n in sizes)} rows){where}")
    peaks: dict[int, dict[str, int]] = {}
    rows_out = []
    with s3_server() if args.s3 else contextlib.nullcontext() as fs:
        for n in sizes:
            peaks[n] = one_size(n, args.actors, fs)
            rows_out.append((f"{n:,}", *(mib(peaks[n].get(role, 0)) for role in ROLES), load()))
    table(rows_out, ("rows", "driver", "largest actor", "budget", "idle worker", "Ray's", "load"))
    small, large = sizes[0], sizes[-1]
    for role in ("driver", "actor"):
        ratio = peaks[large].get(role, 0) / max(1, peaks[small].get(role, 0))
        print(f"{role}: {large:,}-row peak / {small:,}-row peak = {ratio:.2f}")


def one_size(n: int, actors: int, fs: Any) -> dict[str, int]:
    """One job on an `n`-row corpus (on S3 when `fs` is the store); its peaks by role."""
    path: Path | str = corpus(n, 20)
    output: dict[str, Any] = {}
    if fs is not None:
        path = upload(fs, Path(path))
        output = {"output": {"path": f"s3://bench/out/memory-{n}"}}
    with service() as embedded:
        config, out = write_config(
            f"memory-{n}", path, embedded.base_url, rpm=1e9, tps=1e13, actors=actors,
            extra=output,
        )  # fmt: skip
        job = run_job(config, out, memory=True)
    assert job.memory is not None
    if fs is None:
        s, written, distinct = job.summary, output_rows(out), None
    else:
        uri = output["output"]["path"]
        s, (written, distinct) = summary(fs, uri), s3_output_rows(fs, uri)
    sending = s["wall_seconds"] - s["startup_seconds"]
    once = "" if distinct is None else f" ({distinct:,} distinct ids)"
    print(
        f"{n:,} rows: {s['rows_answered']:,} answered, {written:,} output rows{once}, "
        f"wall {s['wall_seconds']:.0f} s ({n / sending:,.0f} rows/s while sending); "
        f"whole tree peak {mib(sum(job.memory.peak_total.values()))}",
        flush=True,
    )
    return job.memory.peak


if __name__ == "__main__":
    main()
