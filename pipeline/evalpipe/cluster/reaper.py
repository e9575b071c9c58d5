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


def walk() -> dict[int, tuple[int, float]]:
    """Every process on the machine: pid -> (its parent, when it started), in one walk of the
    process table. On Linux that is one read of each /proc/PID/stat (what psutil reads too,
    without making an object of each process: a third of the cost), elsewhere psutil's."""
    if not os.path.isdir("/proc/self"):
        found = psutil.process_iter(["ppid", "create_time"])
        return {p.pid: (p.info["ppid"], p.info["create_time"]) for p in found
                if p.info["ppid"] is not None and p.info["create_time"] is not None}  # fmt: skip
    table: dict[int, tuple[int, float]] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as stat:
                line = stat.read()
        except OSError:  # ended meanwhile
            continue
        # After the command in parentheses (which may hold either): state, ppid, ... and the
        # 22nd field, the start time in clock ticks since boot.
        fields = line[line.rfind(b")") + 2 :].split()
        table[int(name)] = (int(fields[1]), float(fields[19]))
    return table


def remember(known: dict[int, float]) -> None:
    """Add the descendants of every known process; forget the processes that ended. One walk
    of the process table for all of them: a walk per known process (what
    `psutil.Process.children` does) cost ~10% of a core, every second, beside each run."""
    table = walk()
    below: dict[int, list[int]] = {}  # pid -> its children
    for pid, (parent, _) in table.items():
        below.setdefault(parent, []).append(pid)
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
    remember(known)  # only processes this walk saw running as themselves stay known
    for pid in known:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)


def main(pids: list[int]) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a stray interrupt never ends the watch
    table = walk()
    known = {pid: table[pid][1] for pid in pids if pid in table}
    stdin = sys.stdin.fileno()
    while True:
        remember(known)
        ready, _, _ = select.select([stdin], [], [], LOOK_SECONDS)
        if ready and not os.read(stdin, 4096):
            break  # the parent is gone (or let go of its Ray)
    kill_known(known)
    for _ in range(2):  # twice more: a process may have started another meanwhile
        time.sleep(0.2)
        kill_known(known)


if __name__ == "__main__":
    main([int(arg) for arg in sys.argv[1:]])
