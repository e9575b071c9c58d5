"""Files the job writes in folders other users may write to, opened so that nobody else decides
where the bytes go.

An output folder is often a team's; the cache folder may be shared (`XDG_CACHE_HOME`). A name
there that the job opens for writing (the output's lock, the journal, an account's schedule)
could be a symbolic link planted by another user, pointing at a file of the runner's (an
`O_CREAT` then a truncate would overwrite it), or a file of another user's that the job has no
business changing. So such a file is opened with `open_private`: never through a symbolic link
(`O_NOFOLLOW`), and only when it is a regular file of this user's with no other name (a hard
link). Clean-ups (`remove_folder`) never follow a link either: a link is removed as a name, or
left alone, never read through.

Only the standard library, so the account's Budget actor uses it without pyarrow.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path


def open_private(path: Path, flags: int, mode: int = 0o644) -> int:
    """`os.open(path, flags, mode)` for writing in a shared folder (see the module docstring):
    the descriptor, or an OSError whose `strerror` says what was wrong with the file."""
    try:  # O_NONBLOCK: a FIFO planted there fails here instead of blocking the open
        fd = os.open(path, flags | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK, mode)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise OSError(errno.ELOOP, f"{path.name} is a symbolic link", str(path)) from None
        raise
    try:
        refused = _refused(os.fstat(fd), path.name)
    except BaseException:
        os.close(fd)
        raise
    if refused is not None:
        os.close(fd)
        raise OSError(errno.EPERM, refused, str(path))
    return fd


def _refused(info: os.stat_result, name: str) -> str | None:
    if not stat.S_ISREG(info.st_mode):
        return f"{name} is not a regular file"
    if info.st_uid != os.geteuid():
        return f"{name} belongs to another user (uid {info.st_uid})"
    if info.st_nlink > 1:
        return f"{name} has another name (a hard link)"
    return None


def remove_folder(folder: Path) -> bool:
    """Remove `folder` and the files in it, following no symbolic link: a folder that is a
    link, or not this user's, is left alone; a link in it is removed as a name (its target is
    untouched); a folder in it is left (so `folder` stays). True when `folder` is gone."""
    try:
        fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:  # a link (ELOOP, ENOTDIR), gone, or not readable
        return False
    try:
        if os.fstat(fd).st_uid != os.geteuid():
            return False
        for entry in os.scandir(fd):
            if not entry.is_dir(follow_symlinks=False):
                os.unlink(entry.name, dir_fd=fd)  # unlink never follows a link
        os.rmdir(folder)
    except OSError:  # another process removes it at the same moment, or a folder is left
        return False
    finally:
        os.close(fd)
    return True
