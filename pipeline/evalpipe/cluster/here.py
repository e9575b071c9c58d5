"""The Ray a job runs on: started quietly, joined, or found running, and watched until its end.

A job starts a local Ray, or joins a cluster (`--ray-address`, RAY_ADDRESS), or, in a process
that runs one already (a notebook where the user called `ray.init`, the Python API's second
call), uses that one. Ray started here says nothing a notebook cell should show: its own log
at ERROR only, the workers' output kept in Ray's session log folder
(`/tmp/ray/session_latest/logs/worker-*.err`: our workers' errors reach the driver as the
exceptions they raise, or as a row's error), and the raylet's warning that "N PYTHON worker
processes have been started" (it counts idle workers kept for the next call) dropped.

A Ray found running is the user's, started with their settings: `running_differences` says
where those differ from what the job needs (an address asked for but not used; an API key the
Ray's workers cannot see, for a Ray started in this process before the key was set), for the
caller to warn about.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import re
import socket
import sys
import threading
import time
import warnings
from collections.abc import Callable, Iterator
from types import ModuleType

import psutil

from evalpipe.cluster.owner import OwnerThread, Reaper, children
from evalpipe.config import api_key_in

SHUTDOWN_SECONDS = 5.0  # Ray's shutdown may take this long before the job leaves without it
LATE_SHUTDOWN_SECONDS = 30.0  # a shutdown past its bound: the next start waits this long more
GCS_SECONDS = 0.5  # a kept Ray's GCS that takes no connection this fast is not used
WATCH_SECONDS = 1.0  # how often a kept Ray's GCS and raylet are looked at
GCS_LOOK_SECONDS = 0.5  # how often the port of a Ray's GCS, started here, is tried at most
LOST = "the Ray this process kept is gone (its GCS or raylet died): a new one is started"
_LOST: list[str] = []  # a kept Ray let go since the last job: said at the next one
# Letting a dead Ray go and starting the next happen one at a time: the watch thread and a
# job's call may both find the kept Ray dead, and a `ray.shutdown` still running (past its
# bound) when the next `ray.init` starts would take the new Ray's state down with the old.
_CHANGING = threading.RLock()
_SHUTTING: list[threading.Thread] = []  # a bounded shutdown that outlived its bound
# Lines of the raylet's that Ray prints on the driver whatever `log_to_driver` says; they say
# nothing about the job (Ray's own switch: RAY_DEDUP_LOGS_SKIP_REGEX, read at Ray's import).
RAYLET_NOISE = r"worker processes have been started on node"
# At `ray.shutdown` Ray's core worker sends its last task events (for Ray's dashboard and state
# API) to the GCS and waits for the answer up to this long: 5 s by Ray's default (Ray 2.60), all
# of which a notebook waited through, after the GCS died, before its next call got a fresh Ray.
# A live GCS answers in milliseconds; and the Ray evalpipe starts ends right after anyway.
TASK_EVENTS_FLUSH = ("RAY_task_events_shutdown_flush_timeout_ms", "500")


def quiet_ray() -> ModuleType:
    """`import ray`, without what its import prints in a notebook where ipywidgets is missing
    (tqdm's `TqdmWarning: IProgress not found`, Ray's "Missing packages: ['ipywidgets']"): both
    are about Ray's own notebook displays, which evalpipe does not use."""
    if "ray" not in sys.modules:
        logging.getLogger("ray.widgets.util").setLevel(logging.WARNING)
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="IProgress not found")
            import ray  # noqa: F401
    return sys.modules["ray"]


@contextlib.contextmanager
def _our_signals() -> Iterator[None]:
    """Keep the job's signal handlers while Ray starts: `ray.init` would install a SIGTERM
    handler that exits 15 at once (`evalpipe.engine.stopping` keeps Ray's native one off)."""
    import ray._private.utils as ray_utils

    installer = ray_utils.set_sigterm_handler
    ray_utils.set_sigterm_handler = lambda handler: None
    try:
        yield
    finally:
        ray_utils.set_sigterm_handler = installer


def start_ray(address: str | None) -> LocalRay | JoinedRay:
    """Start a local Ray, or join `address` (else the cluster RAY_ADDRESS names), quietly, on
    the thread that owns it for the life of the process (`evalpipe.cluster.owner`). Without
    either, a new local Ray: never a cluster that happens to run on this machine (Ray would
    join one left by `ray start`). A local Ray gets a reaper: it never outlives the process."""
    os.environ.setdefault("RAY_DEDUP_LOGS_SKIP_REGEX", RAYLET_NOISE)  # for a Ray not imported
    os.environ.setdefault(*TASK_EVENTS_FLUSH)  # read by Ray's core worker at each ray.init
    ray = quiet_ray()
    _skip_raylet_noise()
    before = children()

    def init() -> None:
        with _our_signals():
            ray.init(
                address=address or os.environ.get("RAY_ADDRESS") or "local",
                include_dashboard=False,
                logging_level=logging.ERROR,  # Ray's own log (its notebook hints are INFO)
                log_to_driver=False,  # the workers' output stays in Ray's log folder
                configure_logging=True,
            )

    with _CHANGING:
        _shutdowns_ended()
        OwnerThread.run(init)
    started = sorted(children() - before)
    if not started:  # a cluster joined: its processes are not this process's to reap
        return LocalRay()
    here = LocalRay(Reaper.watch(started))
    _KEPT["ray"] = here
    threading.Thread(target=_watch, args=(here,), name="evalpipe-ray-watch", daemon=True).start()
    return here


def ray_here(address: str | None, warn: Callable[[str], None]) -> LocalRay | JoinedRay:
    """The Ray a job runs on: the one this process started and kept, if it still answers;
    a Ray the user started in this process (`ray.init`), as it is; else a new one
    (`start_ray`). A kept Ray whose GCS or raylet died is not trusted (a call to it would wait
    a minute, then Ray would end the process): it is let go, with a warning, and a fresh one
    started."""
    if quiet_ray().is_initialized():
        kept = _KEPT.get("ray")
        if not (kept is not None and kept.gone()) and _gcs_answers():
            return kept if kept is not None else JoinedRay()
        if _let_go(kept):
            warn(LOST)
    with _CHANGING:  # the watch may be letting it go right now: its warning, once
        if _LOST:
            warn(_LOST.pop())
    return start_ray(address)


def _watch(here: LocalRay) -> None:
    """While `here` is this process's Ray: once its GCS or raylet dies, let it go at once.
    Ray's core worker ends a driver that has not reached its GCS for a minute (a notebook's
    kernel, idle between two cells, was seen dying 60-65 s after its GCS was killed)."""
    while _KEPT.get("ray") is here:
        if here.gone() and not here.jobs:  # a running job sees it gone and ends on its own
            with _CHANGING:
                if _let_go(here):
                    _LOST[:] = [LOST]
            return
        time.sleep(WATCH_SECONDS)


def _gcs_address() -> str:
    """The address (host:port) of the GCS of the Ray this process runs on."""
    import ray

    return str(ray.get_runtime_context().gcs_address)


def _gcs_answers() -> bool:
    """The running Ray's GCS takes a connection (in well under a second, or not at all)."""
    return _connect(_gcs_address()) is None


def _refused(address: str) -> bool:
    """Nothing listens at `address` any more: the connection is refused. A connection that is
    slow to come (a GCS held still) is not taken for a closed port."""
    return isinstance(_connect(address), ConnectionRefusedError)


def _connect(address: str) -> Exception | None:
    """Why a connection to `address` (host:port) failed within `GCS_SECONDS`; None if made."""
    host, _, port = address.rpartition(":")
    try:
        socket.create_connection((host, int(port)), timeout=GCS_SECONDS).close()
    except (OSError, ValueError) as exc:
        return exc
    return None


def _let_go(kept: LocalRay | None) -> bool:
    """Disconnect from a Ray that died (bounded: its shutdown may wait for the dead), its
    reaper killing whatever of it is left meanwhile; once only, by whoever (the watch, a job)
    finds it dead first: True for that one. Its processes are killed before `ray.shutdown`,
    not stopped by it: Ray's stop gives each of them a second to end on SIGTERM, and after
    its GCS died they took ~2 s in all, which the next call waited through."""
    import ray

    with _CHANGING:
        if kept is not None and _KEPT.get("ray") is not kept:
            return False  # let go already
        if kept is not None:
            kept.reap()
        if ray.is_initialized():
            late = bounded(ray.shutdown, SHUTDOWN_SECONDS)
            if late is not None:
                _SHUTTING.append(late)
        if kept is not None:
            kept.released()
    return True


def _shutdowns_ended() -> None:
    """Before Ray starts again: a shutdown of the Ray before that outlived its bound is given
    `LATE_SHUTDOWN_SECONDS` more to end (Ray's core worker gives up on a dead GCS)."""
    while _SHUTTING:
        _SHUTTING.pop().join(LATE_SHUTDOWN_SECONDS)


def _skip_raylet_noise() -> None:
    """Drop the raylet's worker-count warning from what Ray prints here (Ray was imported
    before the variable could be set: its log deduplicators took their pattern already)."""
    from ray._private import worker

    for name in ("stdout_deduplicator", "stderr_deduplicator"):
        dedup = getattr(worker, name, None)
        if dedup is None or not hasattr(dedup, "skip_re"):
            continue  # another Ray version: its noise stays
        before = dedup.skip_re.pattern if dedup.skip_re is not None else None
        if before is None or RAYLET_NOISE not in before:
            dedup.skip_re = re.compile(
                RAYLET_NOISE if before is None else f"{before}|{RAYLET_NOISE}"
            )


def running_differences(address: str | None, key_env: str) -> list[str]:
    """Where a Ray that runs in this process already differs from what the job needs; empty
    when nothing does (or no Ray runs). Each is a sentence to warn with."""
    ray = quiet_ray()
    if not ray.is_initialized():
        return []
    out = []
    here = str(ray.get_runtime_context().gcs_address)
    asked = address or os.environ.get("RAY_ADDRESS")
    if asked and asked not in ("auto", "local") and asked != here:
        out.append(
            f"Ray already runs in this process (at {here}); the address {asked} is not used: "
            "call ray.shutdown() first to use it"
        )
    key = api_key_in(key_env)
    seen = _raylet_sees(key_env)
    if key and seen is not None and seen != key:
        out.append(
            f"the Ray running in this process was started before {key_env} was set (or with "
            f"another value): its workers cannot use this key; set {key_env} before ray.init, "
            "or call ray.shutdown() and let evalpipe start Ray"
        )
    return out


def _raylet_sees(key_env: str) -> str | None:
    """The value of `key_env` in the environment of this process's own raylet (its workers
    inherit it), "" when unset there; None when the raylet is not this process's child."""
    for process in psutil.Process().children(recursive=True):
        if _name(process).startswith("raylet"):
            with contextlib.suppress(psutil.Error):
                return process.environ().get(key_env, "")
    return None


def bounded(step: Callable[[], object], seconds: float) -> threading.Thread | None:
    """Run a shut-down step, but leave without it after `seconds`: after a stop to the whole
    process group Ray's own processes are gone, and a step that waits for them would hang.
    The step's thread if it still runs then, else None."""
    thread = threading.Thread(target=step, name="evalpipe-shutdown", daemon=True)
    thread.start()
    thread.join(seconds)
    return thread if thread.is_alive() else None


class LocalRay:
    """The Ray this process started, watched: after SIGTERM to the whole process group (what
    systemd and Airflow send) its raylet is gone at once, and a driver that waited for its
    workers' answers or for a clean shutdown would wait in vain."""

    def __init__(self, reaper: Reaper | None = None) -> None:
        children = psutil.Process().children(recursive=True)
        self._core = [p for p in children if _name(p).startswith(("raylet", "gcs_server"))]
        self._reaper = reaper
        self._gcs = _gcs_address() if self._core else ""  # Ray was started: it is up
        self._closed = False  # its port was found closed (for good: it is not opened again)
        self._next_look = 0.0  # time.monotonic() from which its port is tried again
        self.jobs = 0  # jobs running on it: its watch never pulls it from under one

    @contextlib.contextmanager
    def in_use(self) -> Iterator[None]:
        self.jobs += 1
        try:
            yield
        finally:
            self.jobs -= 1

    def gone(self) -> bool:
        """Its raylet or its GCS died, or its GCS closed its port: Ray cannot serve (a call to
        it would wait a minute). After a SIGTERM to the whole process group the GCS closes its
        port at once, while it and the raylet take ~10 s of their own shutdown to end (the
        workers, dying too, answer nothing more): a stopping run waits for neither."""
        if not self._core:
            return False
        return not all(_alive(p) for p in self._core) or self._gcs_closed()

    def _gcs_closed(self) -> bool:
        """The GCS's port refuses connections: tried every `GCS_LOOK_SECONDS` at most."""
        now = time.monotonic()
        if not self._closed and now >= self._next_look:
            self._next_look = now + GCS_LOOK_SECONDS
            self._closed = _refused(self._gcs)
        return self._closed

    def shutdown(self) -> None:
        import ray

        if not self.gone():
            late = bounded(ray.shutdown, SHUTDOWN_SECONDS)
            if late is not None:  # a next job in this process starts its Ray after it
                _SHUTTING.append(late)
        # Ray also shuts down at exit: after a stop its raylet may take its time to go, and
        # the job must not wait for it twice (the OS and the scheduler clean up what is left).
        atexit.unregister(ray.shutdown)
        self.released()

    def reap(self) -> None:
        """Its reaper kills every process of it now (`released` waits for that)."""
        if self._reaper is not None:
            self._reaper.end()

    def released(self) -> None:
        """No longer this process's Ray: its reaper ends what is left of it."""
        if _KEPT.get("ray") is self:
            del _KEPT["ray"]
        if self._reaper is not None:
            self._reaper.release()


_KEPT: dict[str, LocalRay] = {}  # the Ray this process started, while it is up


class JoinedRay:
    """A Ray cluster this job joined (or found running): not ours to watch or stop."""

    def gone(self) -> bool:
        return False

    def shutdown(self) -> None:
        return None

    @contextlib.contextmanager
    def in_use(self) -> Iterator[None]:
        yield


def _name(process: psutil.Process) -> str:
    try:
        return process.name()
    except psutil.Error:
        return ""


def _alive(process: psutil.Process) -> bool:
    try:
        return process.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False
