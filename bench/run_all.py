"""`make bench`: the job benches one after another (never two at once), quick or full.

    .venv/bin/python bench/run_all.py              # quick: about 20 minutes in all
    .venv/bin/python bench/run_all.py --full       # the sizes of bench/RESULTS.md: about an hour
    .venv/bin/python bench/run_all.py --only rpm,drop

Each bench is its own script (run one alone for its flags); this passes each the sizes of the
chosen mode and prints their tables as they come. A bench that fails is reported and the
others still run; the exit code says whether all passed.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent

# name -> (script, quick flags, full flags)
BENCHES: dict[str, tuple[str, list[str], list[str]]] = {
    "rpm": ("job_rpm.py", ["--seconds", "40", "--reference-seconds", "30"], []),
    "tps": ("job_tps.py", ["--seconds", "40"], []),
    "drop": ("job_drop.py", ["--before", "20", "--after", "40"], []),
    "ceiling": ("job_ceiling.py", ["--rows", "10000", "--seconds", "5"], []),
    "memory": ("job_memory.py", ["--rows", "10000,100000"], []),
    "startup": ("job_startup.py", ["--repeat", "1"], []),
    "kill": ("job_kill.py", ["--repeat", "1"], []),
    "cache": ("job_cache.py", ["--rows", "100000"], []),
    "shared": ("job_shared.py", [], ["--repeat", "3"]),
    "context": ("job_context.py", [], []),
    "cluster": ("job_cluster.py", ["--seconds", "30"], []),
    "guards": ("job_guards.py", ["--rows", "1500", "--duration", "8"], []),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--full", action="store_true", help="the full sizes (about an hour)")
    parser.add_argument("--only", default=",".join(BENCHES), help="comma-separated bench names")
    args = parser.parse_args()
    failed = []
    for name in args.only.split(","):
        script, quick, full = BENCHES[name]
        command = [sys.executable, str(HERE / script), *(full if args.full else quick)]
        started = time.monotonic()
        done = subprocess.run(command, check=False)
        print(f"({name}: {time.monotonic() - started:.0f} s)", flush=True)
        if done.returncode != 0:
            failed.append(name)
    if failed:
        sys.exit(f"failed: {', '.join(failed)}")


if __name__ == "__main__":
    main()
