"""Bench o: a SQL query through `evalpipe.duckdb` holds the account's rate.

A Parquet corpus of `--rows` distinct short states (default 600), scored by one DuckDB query,
`SELECT id, evalpipe_noul(text, ...) FROM read_parquet(...)`, at 1,200 RPM (20 requests/s)
against the embedded service in a process of its own that enforces that limit, with about
`--latency` s of service latency. The service's counters, sampled every 0.25 s, give the steady
rate: accepted requests/s from `--warmup` s after its first accepted request to `--tail` s
before its last. `--row-group` writes the corpus in row groups of that many rows, so DuckDB hands
the function several batches (from its threads at once): the engine must keep requests flowing
across them. The query then runs again: it must send nothing (the answer cache, kept outputs).

    .venv/bin/python bench/sql_rpm.py                        # 600 rows: ~30 s of sending
    .venv/bin/python bench/sql_rpm.py --rows 1200 --row-group 200    # six batches
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import KEY, KEY_ENV, ServiceWatch, corpus, header, service, steady, table


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=600)
    parser.add_argument("--rpm", type=float, default=1200)
    parser.add_argument("--latency", type=float, default=1.0, help="service median seconds")
    parser.add_argument("--words", type=int, default=20, help="tokens per state, about")
    parser.add_argument("--row-group", type=int, default=0, help="rows per row group (0: one)")
    parser.add_argument("--warmup", type=float, default=5.0)
    parser.add_argument("--tail", type=float, default=2.0)
    args = parser.parse_args()
    os.environ[KEY_ENV] = KEY  # before Ray starts: its workers read the key from it
    os.environ["XDG_CACHE_HOME"] = tempfile.mkdtemp(prefix="evalpipe-bench-sql-")  # a cold cache
    import duckdb

    import evalpipe as ep
    import evalpipe.duckdb

    path = corpus(args.rows, args.words)
    if args.row_group:
        grouped = path.with_name(f"{path.stem}-rg{args.row_group}.parquet")
        pq.write_table(pq.read_table(path), grouped, row_group_size=args.row_group)
        path = grouped
    per_second = args.rpm / 60
    header(
        f"Bench o: SQL (DuckDB) at {args.rpm:g} RPM, latency {args.latency:g} s, {args.rows} "
        f"rows" + (f" in row groups of {args.row_group}" if args.row_group else "")
    )
    query = (
        "SELECT id, evalpipe_noul(text, 'Does the review help a shopper decide?') AS helpful "
        f"FROM read_parquet('{path}')"
    )
    with service(rpm=args.rpm, tps=1e9, latency=args.latency) as embedded:
        limits = {"requests_per_minute": args.rpm, "tokens_per_second": 1e9}
        svc = ep.Service(embedded.base_url, "model-1.13.0", key_env=KEY_ENV, limits=limits)
        con = duckdb.connect()
        evalpipe.duckdb.register(con, service=svc, progress=False)
        with ServiceWatch(embedded) as watch:
            started = time.monotonic()
            rows = con.sql(query).fetchall()
            ended = time.monotonic()
            ours = steady(watch, started, args.warmup, args.tail)
        before = embedded.stats()["requests_accepted"]
        again = time.monotonic()
        rerun = con.sql(query).fetchall()
        again = time.monotonic() - again
        sent_again = embedded.stats()["requests_accepted"] - before
    answered = sum(1 for _, p in rows if p is not None)
    floor = args.rows / per_second
    print(
        f"query: {answered} of {len(rows)} rows answered, wall {ended - started:.1f} s (floor "
        f"{floor:.1f} s); first request {ours['first'] - started:.1f} s after the query; "
        f"steady window {ours['steady_seconds']:.0f} s; the same query again: {again:.2f} s, "
        f"{sent_again} requests, {sum(1 for r in rerun if r in rows)} equal rows"
    )
    table(
        [
            (
                "evalpipe_noul over read_parquet",
                f"{ours['steady_rps']:.2f}",
                f"{ours['steady_rps'] / per_second:.1%}",
                f"{ours['rate_limited']} / {ours['share_429']:.2%}",
                f"{(ended - started) / floor:.3f}",
                ours["load"],
            )
        ],
        ("query", "steady req/s", f"÷ {per_second:g}", "429s / share", "wall ÷ floor", "load"),
    )


if __name__ == "__main__":
    main()
