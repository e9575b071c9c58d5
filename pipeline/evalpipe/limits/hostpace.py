"""Jobs on one machine share the account's pace through a file, whatever Ray each runs on.

Jobs on one Ray cluster share one Budget (evalpipe.limits.account). Jobs that each start a Ray of
their own cannot find each other's actors, and two senders that only see their own 429s waste
the key's limits finding a split: the second job's arrival costs a burst of 429s, and who
yields first keeps the smaller share. Nightly schedules start their jobs on one
machine, though, and one machine has a place every job can reach: a file.

So each Budget also reserves its grants on a schedule kept in a small file per account and
machine: the generic cell rate algorithm (GCRA), for requests and for tokens. A reservation
takes the next free slot at the job's configured limits, allowing half a second of burst (as
our own buckets do, evalpipe.limits.pacing), and says how long to wait for it. Every reservation
is one read and one write under an exclusive `flock`, so the jobs' grants together keep to the
limits, in the order they were asked (a job's share follows its demand). The lock is released
when a process dies, even by kill -9, and the file holds only two times, so nothing is left
half-done.

Times are `time.monotonic()`, which every process of one boot of one machine shares (Linux's
CLOCK_MONOTONIC), so the file's name carries the host and its boot: a home directory shared
over the network never mixes two machines' clocks. The name is the account Budget's (a digest
of base URL and key, never the key). Jobs on other machines still meet only through the
service's 429s, which each Budget measures and adapts to (evalpipe.limits.budget).

    pace = HostPace.open(host_file(account_name(url, key)))  # None: it could not be opened
    pace.set_limits(rps=19.9, tps=248_750)           # the Budget's configured limits
    delay = pace.reserve(requests=3, tokens=1_200)   # seconds until these may go
"""

from __future__ import annotations

import fcntl
import math
import os
import socket
import struct
import time
from collections.abc import Callable
from pathlib import Path

from evalpipe.stores import cache_home, open_private, remove_folder

BURST = 0.5  # seconds the schedule may run ahead of now: pacing.py's buckets hold as much
FOLDER = "accounts"  # under the cache folder: one folder per machine and boot
_RECORD = struct.Struct("<8sdd")  # magic, when the request and token schedules are next free
_MAGIC = b"evhpace1"
_EPSILON = 1e-6  # float slack: a slot this close to now is now
# No schedule runs more than a few seconds ahead (one lease per actor waits on it); one
# further ahead is not ours (a corrupt file, another boot's clock): it is reset.
_FORGET_SECONDS = 30.0


def host_file(name: str, root: Path | None = None) -> Path:
    """Account `name`'s schedule file on this machine, for this boot: under the cache folder
    (`root`, else the default one)."""
    return (root if root is not None else cache_home()) / FOLDER / _host_tag() / name


def _host_tag() -> str:
    try:
        boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()[:8]
    except OSError:  # not Linux: when the monotonic clock started, to the minute
        boot = f"{int((time.time() - time.monotonic()) // 60):x}"
    host = "".join(c if c.isalnum() or c in "-_." else "_" for c in socket.gethostname())
    return f"{host or 'host'}-{boot}"


class HostPace:
    """The schedule of one account's requests and tokens on this machine, in a file."""

    def __init__(self, fd: int, clock: Callable[[], float] = time.monotonic) -> None:
        self._fd = fd
        self._clock = clock
        self._request_gap = self._token_gap = 0.0  # unpaced until `set_limits`

    @classmethod
    def open(cls, path: Path, clock: Callable[[], float] = time.monotonic) -> HostPace | None:
        """The schedule in `path` (made if none exists); None when it cannot be opened (a
        read-only cache folder): the job then paces alone."""
        try:
            if not path.parent.is_dir():  # the first job of this boot: earlier boots' go
                path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
                _forget_earlier_boots(path.parent)
            fd = open_private(path, os.O_RDWR | os.O_CREAT, 0o600)  # no link, no other's file
        except OSError:
            return None
        return cls(fd, clock)

    def close(self) -> None:
        """Close the file (a Budget's stays open for its life; a `LocalPacer`'s closes with it)."""
        os.close(self._fd)

    def set_limits(self, rps: float, tps: float) -> None:
        """The configured limits (times headroom) this job's reservations are spaced at."""
        self._request_gap = 1.0 / rps
        self._token_gap = 1.0 / tps

    def reserve(self, requests: int, tokens: int) -> float:
        """Take the next slot for `requests` and `tokens`: the seconds to wait before they go
        (0 when they may go now)."""
        fcntl.flock(self._fd, fcntl.LOCK_EX)
        try:
            now = self._clock()
            request_free, token_free = self._read(now)
            # As a bucket of BURST seconds: they go once the schedule, with them, is at
            # most that far ahead.
            request_span = requests * self._request_gap
            token_span = tokens * self._token_gap
            go = max(now, request_free + request_span - BURST, token_free + token_span - BURST)
            request_free = max(request_free, go) + request_span
            token_free = max(token_free, go) + token_span
            os.pwrite(self._fd, _RECORD.pack(_MAGIC, request_free, token_free), 0)
        finally:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
        return go - now if go - now > _EPSILON else 0.0

    def _read(self, now: float) -> tuple[float, float]:
        data = os.pread(self._fd, _RECORD.size, 0)
        if len(data) == _RECORD.size:
            magic, request_free, token_free = _RECORD.unpack(data)
            times = (request_free, token_free)
            if magic == _MAGIC and all(_plausible(t, now) for t in times):
                return times
        return now, now  # a new file (or one that is not ours): the schedule is free


def _forget_earlier_boots(folder: Path) -> None:
    """Remove this host's folders of other boots (their clocks mean nothing now); other
    hosts' (a home directory shared over the network) are theirs to keep. Nothing is
    followed: a link there is left as it is (`remove_folder`)."""
    host = folder.name.rsplit("-", 1)[0]
    for other in folder.parent.glob(f"{host}-*"):
        if other != folder and other.name.rsplit("-", 1)[0] == host:
            remove_folder(other)  # False: a link, another's, or removed by another job


def _plausible(free: float, now: float) -> bool:
    return math.isfinite(free) and free < now + _FORGET_SECONDS
