"""The Ray evalpipe starts lives as long as the process, not as long as the call that started it.

On Linux, Ray ties its GCS and raylet to their parent with PR_SET_PDEATHSIG, and the kernel
takes "parent" to mean the *thread* that forked them. The Python API runs a notebook's job on
a thread of its own (the kernel's event loop holds the main one), so the Ray it started there
died with that thread: right after the first call its GCS and raylet were zombies, and the next
call waited a minute for them before Ray's core worker ended the kernel. Ray offers no option
to change whose life its processes share, so it is started here on a thread that lives as long
as the process (`OwnerThread`): every later call, on whatever thread (a notebook's, a worker's,
`asyncio.run`'s, after an interrupt), finds it up.

What is left when the process dies anyway (`kill -9`, a kernel restart) is ended by a reaper
(`evalpipe.cluster.reaper`), a tiny process of its own session that holds a pipe from this process
and kills Ray's processes once the pipe breaks.
"""

from __future__ import annotations

import contextlib
import queue
import subprocess
import sys
import threading
from collections.abc import Callable
from concurrent.futures import Future
from pathlib import Path
from typing import IO, Any, TypeVar

import psutil

T = TypeVar("T")
REAPER = Path(__file__).with_name("reaper.py")


class OwnerThread:
    """A daemon thread that runs what is handed to it, one call at a time, for the life of
    the process: processes it starts (Ray's) are tied to it, not to the caller's thread."""

    _lock = threading.Lock()
    _thread: threading.Thread | None = None
    _work: queue.SimpleQueue[tuple[Callable[[], Any], Future[Any]]] = queue.SimpleQueue()

    @classmethod
    def run(cls, step: Callable[[], T]) -> T:
        """Run `step` on the owner thread and return what it returns (or raise what it
        raises), here."""
        if threading.current_thread() is cls._thread:
            return step()
        cls._started()
        done: Future[T] = Future()
        cls._work.put((step, done))
        return done.result()

    @classmethod
    def _started(cls) -> None:
        with cls._lock:
            if cls._thread is None or not cls._thread.is_alive():
                cls._thread = threading.Thread(target=cls._serve, name="evalpipe-ray", daemon=True)
                cls._thread.start()

    @classmethod
    def _serve(cls) -> None:
        while True:
            step, done = cls._work.get()
            if not done.set_running_or_notify_cancel():
                continue
            try:
                done.set_result(step())
            except BaseException as exc:  # the caller's to raise
                done.set_exception(exc)


class Reaper:
    """The reaper of one Ray started here (`evalpipe.cluster.reaper`): `watch(started)` once Ray
    is up, `release()` when it was shut down (the reaper then ends what is left of it)."""

    def __init__(self, pipe: IO[bytes], process: subprocess.Popen[bytes]) -> None:
        self._pipe, self._process = pipe, process

    @classmethod
    def watch(cls, pids: list[int]) -> Reaper | None:
        """A reaper for the processes `pids` (and what they start); None when none can be
        started (the Ray still works: only a killed process would leave it behind)."""
        try:
            process = subprocess.Popen(
                [sys.executable, "-I", str(REAPER), *map(str, pids)],
                stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                start_new_session=True,  # a kernel's SIGINT to its process group never reaches it
            )  # fmt: skip
        except OSError:
            return None
        assert process.stdin is not None
        return cls(process.stdin, process)

    def end(self) -> None:
        """The reaper kills whatever of this Ray still runs, from now on, and leaves."""
        with contextlib.suppress(OSError):
            self._pipe.close()

    def release(self) -> None:
        """This Ray was shut down: the reaper ends whatever of it still runs, and leaves."""
        self.end()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self._process.wait(timeout=2.0)


def children() -> set[int]:
    """The pids of this process's direct children."""
    return {p.pid for p in psutil.Process().children()}
