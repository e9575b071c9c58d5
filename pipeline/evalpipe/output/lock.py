"""One run per output: an exclusive OS lock held for the whole life of a run.

Schedulers overlap runs when one is slow; two runs on one output would both send the same rows
and both write them. A run therefore holds `fcntl.flock(LOCK_EX)` on a lock file for as long as
it lives. The OS drops the lock when the process dies, however it dies (`kill -9` included), so
a lock is never stale and never needs cleaning up. A second run fails at once with
`OutputLocked`, before it sends a request or writes a file, and says who holds the output: the
holder writes its pid, host and start time into the lock file.

The lock file of a local output is in the output directory. An object store has no locks, so the
lock file of an object-store output is in its local staging folder, which is named by a digest of
the URI (`evalpipe.stores.location.staging_dir`): two runs on one machine with one output URI meet
at one lock file.

The output folder may be a team's: the lock file is opened never through a symbolic link and only
when it is a regular file of this user's (`evalpipe.stores.open_private`), so a link planted at
`.evalpipe.lock` is refused, its target untouched, before the file is truncated.

flock locks are per machine (and not reliable on NFS): two machines writing one output on a
shared or object store are not kept apart by this lock (README, "Object stores"); with a shared
tier (`shared.url`) they are, by the output's lease in it (`evalpipe.output.lease`).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import socket
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path

from evalpipe.errors import ConfigError, OutputLocked
from evalpipe.stores import Location, local_dir, open_private

LOCK_NAME = ".evalpipe.lock"  # a dot name: metadata to every reader of the output, never rows


def _holder(fd: int) -> str:
    try:
        text = os.pread(fd, 4096, 0).decode("utf-8", "replace").strip()
    except OSError:
        text = ""
    return text or "another run"


def _open(path: Path, shown: str) -> int:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        return open_private(path, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as exc:
        reason = exc.strerror or str(exc)
        if exc.errno in (errno.ELOOP, errno.EPERM):  # open_private's refusals
            reason += " (evalpipe writes through no link, into no other user's file): remove it"
        raise ConfigError(f"output.path '{shown}' cannot hold its lock file: {reason}") from None


@contextmanager
def hold(path: Path, shown: str) -> Iterator[None]:
    """Hold the lock file at `path` for the duration; `shown` names the output in messages.

    Raises OutputLocked at once if another process holds it."""
    fd = _open(path, shown)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise OutputLocked(
                f"{shown} is in use by {_holder(fd)}; wait for that run to end (or stop it), "
                "or choose another output.path"
            ) from None
        since = datetime.now(UTC).isoformat(timespec="seconds")
        note = f"pid {os.getpid()} on {socket.gethostname()} since {since}".encode()
        os.ftruncate(fd, 0)
        os.pwrite(fd, note, 0)
        yield
    finally:
        os.close(fd)  # closing the descriptor releases the lock


def output_lock(output: Location, staging: Path | None = None) -> Path:
    """The lock file of an output: inside a local output directory; in the staging folder
    (under `staging`, else the cache folder) of an object-store output."""
    return local_dir(output, staging) / LOCK_NAME


@contextlib.contextmanager
def unused_removed(path: Path) -> Iterator[None]:
    """A run that fails before it wrote anything leaves nothing behind: when the lock file's
    folder did not exist before and holds nothing but the lock after a failure, both go."""
    folder = path.parent
    fresh = not folder.exists()
    try:
        yield
    except BaseException:
        if fresh:
            with contextlib.suppress(OSError):
                if [p.name for p in folder.iterdir()] == [path.name]:
                    path.unlink()
                    folder.rmdir()
        raise
