"""Ends the Ray a process started once that process is gone, however it went (even `kill -9`).

Ray's own processes die with their parent only in part: the GCS and the raylet are killed by
the kernel (PR_SET_PDEATHSIG), but the agents the raylet starts (DashboardAgent,
RuntimeEnvAgent: ~200 MB) were seen alive a minute after the driver's `kill -9`, ignoring
SIGTERM; a notebook's every kernel restart leaked them. Ray's own reaper (started when the
kernel's fate-sharing is not used) moves the driver into a process group of its own, which a
Jupyter kernel must not have done to it.

This script runs as a process of its own (`python reaper.py PID...`, started by
`evalpipe.cluster.owner` in a session of its own, so a kernel's SIGINT to its process group never
reaches it), with a pipe from its parent as stdin: the end of the pipe (EOF) means the parent
died. Meanwhile it remembers the Ray processes (the pids it was given, the processes Ray
started, and their descendants), with their start times, so a pid the system reused is never
killed: once a second, in one walk of the process table. At EOF it kills each of them with
SIGKILL (they ignore SIGTERM) and leaves. It imports nothing of evalpipe: it starts in a few
tens of milliseconds and holds a few MB.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import sys
import time

import psutil

LOOK_SECONDS = 1.0  # how often the Ray processes are looked up again while the parent lives


def remember(known: dict[int, float]) -> None:
    """Add the descendants of every known process; forget the processes that ended. One walk
    of the process table for all of them: walking it once per known process (what
    `psutil.Process.children` does) cost ~4% of a core, every second, beside each run."""
    table: dict[int, tuple[int, float]] = {}  # pid -> (parent, start time)
    below: dict[int, list[int]] = {}  # pid -> its children
    for process in psutil.process_iter(["ppid", "create_time"]):
        parent, started = process.info["ppid"], process.info["create_time"]
        if parent is not None and started is not None:
            table[process.pid] = (parent, started)
            below.setdefault(parent, []).append(process.pid)
    for pid, started in list(known.items()):
        if pid not in table or table[pid][1] != started:
            del known[pid]  # ended (or its pid taken by another process)
    stack = list(known)
    while stack:
        for child in below.get(stack.pop(), ()):
            if child not in known:
                known[child] = table[child][1]
                stack.append(child)


def kill_known(known: dict[int, float]) -> None:
    """SIGKILL every known process still running as itself, and whatever it started since."""
    remember(known)
    for pid, started in known.items():
        with contextlib.suppress(psutil.Error, OSError):
            if psutil.Process(pid).create_time() == started:
                os.kill(pid, signal.SIGKILL)


def main(pids: list[int]) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a stray interrupt never ends the watch
    known: dict[int, float] = {}
    for pid in pids:
        with contextlib.suppress(psutil.Error):
            known[pid] = psutil.Process(pid).create_time()
    stdin = sys.stdin.fileno()
    while True:
        remember(known)
        ready, _, _ = select.select([stdin], [], [], LOOK_SECONDS)
        if ready and not os.read(stdin, 4096):
            break  # the parent is gone (or let go of its Ray)
    for _ in range(3):  # twice more: a process may have started another meanwhile
        kill_known(known)
        time.sleep(0.2)


if __name__ == "__main__":
    main([int(arg) for arg in sys.argv[1:]])
