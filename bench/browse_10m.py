"""`evalpipe browse` over a 10M-row output, in Chromium (issue 54).

The targets: the first rows visible within 1.5 s of navigating; a filter, a sort and a jump to
row 5,000,000 each within 2 s; the server's memory at most 1.5 GB. The output is synthetic with
the table's own schema (`evalpipe.output.output_schema`: three questions, every lineage column,
3% error rows), written with pyarrow in parts of 1M rows (row groups of 64k) under BENCH_DIR,
once, and reused (`--rewrite` makes it again).

    .venv/bin/python bench/browse_10m.py [--rows 10000000] [--repeat 3] [--rewrite]

`evalpipe browse OUTPUT` runs as a subprocess; its resident memory is sampled every 20 ms
(psutil) and the peak reported. Each step is timed in Chromium (Debian's, driven by Playwright)
from the action (navigation, a filter added, a header clicked, a row number entered) until
every visible row of the new view is drawn (`tbody[data-complete="1"]` of the new view).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import numpy as np
import psutil
import pyarrow as pa
import pyarrow.parquet as pq

from evalpipe.output import output_schema

BENCH_DIR = Path(os.environ.get("EVALPIPE_BENCH_DIR", "/tmp/evalpipe-bench"))
EVALPIPE = str(Path(sys.executable).with_name("evalpipe"))
CHROMIUM = "/usr/bin/chromium"
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--no-first-run"]
PART_ROWS = 1_000_000
OPTIONS = ["positive", "negative", "mixed"]
LEVELS = ["poor", "fair", "good", "great"]
QUESTIONS: dict[str, dict[str, Any]] = {  # as a job config's `questions`
    "helpful": {"type": "noul", "instructions": "Does it help?"},
    "sentiment": {"type": "choice", "instructions": "Sentiment?",
                  "criteria": dict.fromkeys(OPTIONS)},
    "quality": {"type": "score", "instructions": "How good?", "criteria": LEVELS},
}  # fmt: skip
SCHEMA = output_schema("doc_id", pa.int64(), QUESTIONS, "https://evals.example.com:443")
ERRORS = np.array(["rate_limited", "context_limit", "server_error"])


def _part(start: int, n: int, rng: np.random.Generator) -> pa.Table:
    error = rng.random(n) < 0.03
    ids = np.arange(start, start + n, dtype=np.int64)

    def answered(values: np.ndarray) -> pa.Array:
        return pa.array(values, mask=error)

    s, q = rng.dirichlet([1.0] * 3, n), rng.dirichlet([1.0] * 4, n)
    columns: dict[str, pa.Array] = {
        "doc_id": pa.array(ids),
        "helpful__p_true": answered(rng.random(n)),
        "sentiment__choice": pa.array(np.array(OPTIONS)[s.argmax(1)], mask=error),
        "sentiment__confidence": answered((3 * s.max(1) - 1) / 2),
        "quality__score": answered(q @ np.arange(4.0)),
        "quality__confidence": answered((4 * q.max(1) - 1) / 3),
        "_row": pa.array(ids),
        "_model": pa.array(np.where(error, None, "model-1.13.0")),
        "_service": pa.array(np.full(n, "https://evals.example.com:443")),
        "_input_tokens": pa.array(rng.integers(50, 900, n)),
        "_error_type": pa.array(np.where(error, ERRORS[rng.integers(0, 3, n)], None)),
        "_error": pa.array(np.where(error, "the service answered 529", None)),
        "_run_id": pa.array(np.where(ids % 2 == 0, "run-a", "run-b")),
        "_scored_at": pa.array(1_795_000_000_000 + ids, pa.timestamp("ms", tz="UTC")),
        "_state_hash": pa.array(np.char.mod("%032x", ids)),
        "_cached": pa.array(rng.random(n) < 0.1),
        "_reused": pa.array(np.zeros(n, dtype=bool)),
        "_pack": pa.nulls(n, pa.int32()),
    }
    columns |= {f"sentiment__p__{o}": answered(s[:, i]) for i, o in enumerate(OPTIONS)}
    columns |= {f"quality__p__{lv}": answered(q[:, i]) for i, lv in enumerate(LEVELS)}
    arrays = [columns[f.name].cast(f.type) for f in SCHEMA]
    return pa.Table.from_arrays(arrays, schema=SCHEMA)


def write_output(out: Path, rows: int) -> None:
    """`rows` rows in parts of PART_ROWS (row groups of 64k rows)."""
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    rng = np.random.default_rng(54)
    for n, start in enumerate(range(0, rows, PART_ROWS)):
        table = _part(start, min(PART_ROWS, rows - start), rng)
        pq.write_table(table, out / f"part-{n:05d}-{uuid.uuid4().hex}.parquet",
                       row_group_size=65_536)  # fmt: skip


class PeakRss:
    """The peak resident memory of a process, sampled every 20 ms."""

    def __init__(self, pid: int) -> None:
        self.process, self.peak, self._stop = psutil.Process(pid), 0, threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()

    def _sample(self) -> None:
        while not self._stop.is_set():
            try:
                self.peak = max(self.peak, self.process.memory_info().rss)
            except psutil.Error:
                return
            time.sleep(0.02)

    def stop(self) -> int:
        self._stop.set()
        self._thread.join()
        return self.peak


DRAWN = """(old) => {
  const body = document.querySelector('#grid tbody');
  const view = document.querySelector('#grid').dataset.view;
  return body && body.dataset.complete === '1' && view !== old
    && body.querySelector('tr[data-pos]') !== null;
}"""


def _timed(page: Any, action: Any) -> float:
    old = page.evaluate("() => document.querySelector('#grid')?.dataset.view || ''")
    started = time.perf_counter()
    action()
    page.wait_for_function(DRAWN, arg=old, timeout=60_000, polling="raf")
    return time.perf_counter() - started


def _jumped(page: Any, row: int) -> float:
    started = time.perf_counter()
    page.fill("#jump", str(row))
    page.press("#jump", "Enter")
    page.wait_for_selector(f'#grid tbody tr[data-row="{row}"]', timeout=60_000)
    page.wait_for_function(DRAWN, arg="", timeout=60_000, polling="raf")
    return time.perf_counter() - started


def measure(out: Path) -> dict[str, float]:
    """One server, one browser: each step's seconds, and the server's peak RSS in MB."""
    from playwright.sync_api import sync_playwright

    server = subprocess.Popen([EVALPIPE, "browse", str(out)], stdout=subprocess.PIPE, text=True)
    try:
        assert server.stdout is not None
        url = server.stdout.readline().strip()
        rss = PeakRss(server.pid)
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=CHROMIUM, args=ARGS)
            page = browser.new_page(viewport={"width": 1400, "height": 900})
            figures = {"first rows": _timed(page, lambda: page.goto(url))}
            time.sleep(3)  # a person reads the first page; the shown columns are read meanwhile

            def filtered() -> None:
                page.select_option("#f-col", "sentiment__choice")
                page.select_option("#f-op", "eq")
                page.fill("#f-val", "mixed")
                page.click("#f-add")

            figures["filter"] = _timed(page, filtered)
            header = '#grid th[data-column="helpful__p_true"]'
            figures["sort"] = _timed(page, lambda: page.click(header))
            page.click(".chip button")  # the filter off: the sorted view of all 10M rows
            page.wait_for_function(DRAWN, arg="", timeout=60_000)
            figures["jump to 5,000,000 (sorted)"] = _jumped(page, 5_000_000)
            figures["plain view"] = _timed(page, lambda: page.select_option("#sort", ""))
            figures["jump to 5,000,000"] = _jumped(page, 5_000_000)
            browser.close()
        figures["server peak RSS (MB)"] = rss.stop() / 2**20
        return figures
    finally:
        server.terminate()
        server.wait(timeout=10)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--rewrite", action="store_true")
    args = parser.parse_args()
    out = BENCH_DIR / f"browse-{args.rows}"
    if args.rewrite or not out.exists():
        started = time.perf_counter()
        write_output(out, args.rows)
        print(f"wrote {args.rows:,} rows to {out} in {time.perf_counter() - started:.1f} s")
    runs = [measure(out) for _ in range(args.repeat)]
    for name in runs[0]:
        values = [r[name] for r in runs]
        shown = ", ".join(f"{v:.2f}" for v in values)
        print(f"{name:32s} median {statistics.median(values):8.2f}   runs: {shown}")


if __name__ == "__main__":
    main()
