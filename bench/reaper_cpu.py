"""Bench r: what the reaper beside each run costs while the run waits on the limits (issue 48).

The reaper (`evalpipe/cluster/reaper.py`) looks up the Ray processes it knows once a second. It
is started here as a run starts it, on a tree of `--processes` sleeping processes standing for a
Ray (a GCS, a raylet, its agents and workers: ~20), and left to look for `--seconds`; its CPU
time is read from /proc (psutil) and shown as a share of one core, with the number of processes
on the machine (what every walk of the process table reads). Then its pipe is closed and it
must kill the whole tree. Run for the reaper of this tree and the one of `--before` (a git ref).

    .venv/bin/python bench/reaper_cpu.py                      # this tree against main
    .venv/bin/python bench/reaper_cpu.py --seconds 60 --processes 20
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import ROOT, header, load, table

REAPER = ROOT / "pipeline" / "evalpipe" / "cluster" / "reaper.py"


def tree(n: int) -> subprocess.Popen[bytes]:
    """A shell with `n - 1` sleeping children: `n` processes, as a Ray's are, under one."""
    script = " ".join(["sleep 3600 &"] * (n - 1)) + " wait"
    return subprocess.Popen(["sh", "-c", script], start_new_session=True)


def one(script: Path, args: argparse.Namespace) -> dict[str, float]:
    root = tree(args.processes)
    time.sleep(0.5)  # its children started
    pids = [root.pid, *(p.pid for p in psutil.Process(root.pid).children(recursive=True))]
    reaper = subprocess.Popen([sys.executable, "-I", str(script), str(root.pid)],
                              stdin=subprocess.PIPE)  # fmt: skip
    watched = psutil.Process(reaper.pid)
    time.sleep(2.0)  # its start-up (imports) is not what is measured
    before = sum(watched.cpu_times()[:2])
    started = time.monotonic()
    time.sleep(args.seconds)
    used = sum(watched.cpu_times()[:2]) - before
    elapsed = time.monotonic() - started
    assert reaper.stdin is not None
    reaper.stdin.close()  # the run is gone: the reaper kills the tree
    reaper.wait(timeout=30)
    time.sleep(0.2)
    alive = sum(psutil.pid_exists(pid) and psutil.Process(pid).status() != "zombie" for pid in pids)
    root.wait(timeout=5)
    return {"share": used / elapsed, "left": alive, "table": len(psutil.pids())}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--processes", type=int, default=20)
    parser.add_argument("--before", default="main", help="git ref of the reaper to compare")
    args = parser.parse_args()
    header(f"Bench r: the reaper's CPU, {args.processes} processes known, {args.seconds:g} s")
    old = subprocess.run(
        ["git", "show", f"{args.before}:pipeline/evalpipe/cluster/reaper.py"],
        cwd=ROOT, capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    rows = []
    with tempfile.TemporaryDirectory() as folder:
        before = Path(folder) / "reaper.py"
        before.write_text(old)
        for name, script in ((args.before, before), ("this tree", REAPER)):
            r = one(script, args)
            rows.append((name, f"{r['share']:.2%}", f"{r['table']}", f"{r['left']}", load()))
    table(rows, ("reaper", "CPU (share of a core)", "processes on the machine", "left", "load"))


if __name__ == "__main__":
    main()
