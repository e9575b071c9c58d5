"""Where `score` keeps its output when the caller gives none: a rerun of the same call resumes it.

A notebook's cell is run again and again (after a kernel restart, a changed chart, "Run all").
Were each call's output thrown away, every rerun would build its table again from the answer
cache: a lookup and a check per answer, seconds for 100k rows. So, as Hugging Face datasets'
`map` and Curator keep a result under a fingerprint of the function and the data, a call
without `output=` writes to a folder named by a digest of what decides its rows, under the
cache home (`$XDG_CACHE_HOME/evalpipe/scores/<digest>`): the job's fingerprint (questions,
service, model, id and state columns), evalpipe's version and the input (the content of a
DataFrame or table; a file's path, size and modification time; an object-store URI). The same
call again is a resume of a finished output: nothing is looked up or sent, and the rows come
back as they were scored (`_run_id`, `_scored_at` and `_cached` of the call that scored them).

Nothing is trusted for being kept: a resume is the job's own (`evalpipe.output.Sink.resume`),
so a row whose state changed since is scored again, a row that failed for a reason worth
retrying is tried again, and an interrupted call's rows are finished by the next. A kept
folder another process is writing (the same cell in two notebooks) is left to it: the call
then writes to a temporary folder (`OutputLocked` is the signal). A kept folder the job refuses
to resume (`ResumeConflict`: a damaged manifest, say) is the call's own, so it is started over
(`restart`), never left to fail every rerun. Kept folders are tidied
after each call (`tidy`): one unused for `KEEP_DAYS`, or beyond the `KEEP_FOLDERS` most
recently used, or beyond `KEEP_BYTES` in all, is deleted, never one a run holds.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import time
from collections.abc import Iterator
from pathlib import Path

from evalpipe.config import JobConfig
from evalpipe.contract import canonical
from evalpipe.errors import EvalpipeError
from evalpipe.output import SCHEMA_VERSION, hold, output_lock
from evalpipe.stores import cache_home, is_uri

SCORES = "scores"  # the kept folders' parent, under the cache home
KEEP_DAYS = 7.0  # a kept folder unused this long is deleted
KEEP_FOLDERS = 20  # at most this many are kept (the most recently used)
KEEP_BYTES = 2 << 30  # and at most this many bytes in all (the one just used is always kept)
BUSY_SECONDS = 600.0  # a folder used this recently is never deleted (a call may be reading it)
_READ = 1 << 20  # bytes hashed at a time


def scores_home() -> Path:
    """The folder that holds the kept outputs."""
    return cache_home() / SCORES


def file_digest(path: Path) -> str:
    """A digest of a file's bytes (a DataFrame's, as `score` wrote it to Parquet)."""
    digest = hashlib.blake2b(digest_size=16)
    with path.open("rb") as file:
        while chunk := file.read(_READ):
            digest.update(chunk)
    return digest.hexdigest()


def path_identity(path: str) -> str:
    """What names a corpus given by path: for local files, each file's path, size and
    modification time (a file written again is another input); a URI as it is."""
    if is_uri(path):
        return path
    from evalpipe.input import corpus_files

    stats = [(f, os.stat(f).st_size, os.stat(f).st_mtime_ns) for f in sorted(corpus_files(path))]
    return canonical({"path": str(Path(path).resolve()), "files": stats}).decode()


def keeps(config: JobConfig) -> bool:
    """Whether a call of `config` keeps its output: only where the answer cache would answer
    its rows again (on, a versioned model: an alias's answers move; no age limit on them)."""
    cache = config.cache
    return cache.enabled and not config.model_is_alias and cache.max_age_days is None


def kept_folder(config: JobConfig, input_identity: str, version: str) -> Path:
    """The folder a call of `config` on this input keeps its output in (module docstring)."""
    parts = {
        "job": config.fingerprint(),
        "input": input_identity,
        "evalpipe": version,
        "schema": SCHEMA_VERSION,
    }
    if config.packing.rows != 1:  # packed answers are kept apart from answers alone
        parts["packing"] = config.packing.rows
    return scores_home() / hashlib.blake2b(canonical(parts), digest_size=16).hexdigest()


def used(folder: Path) -> None:
    """Mark `folder` used now (its modification time is its last use)."""
    folder.mkdir(parents=True, exist_ok=True)
    os.utime(folder)


@contextlib.contextmanager
def _unless_held(folder: Path) -> Iterator[bool]:
    """True (holding its lock meanwhile) when no run holds `folder`, else False (held, or
    its lock cannot be opened: another user's folder, say)."""
    try:
        with hold(output_lock(folder), str(folder)):
            yield True
    except EvalpipeError:  # OutputLocked, or a ConfigError: the lock file cannot be opened
        yield False


def tidy(keep: Path | None = None, now: float | None = None) -> list[Path]:
    """Delete kept folders unused for `KEEP_DAYS`, or beyond the `KEEP_FOLDERS` most recently
    used, or beyond `KEEP_BYTES` in all; `keep` (the call's own) stays whatever its size, and
    so does a folder a run holds or one used in the last `BUSY_SECONDS` (a call that has just
    finished may be reading it). Returns the folders deleted."""
    home = scores_home()
    if not home.is_dir():
        return []
    now = time.time() if now is None else now
    folders = sorted(  # a link is never followed, nor removed
        (p for p in home.iterdir() if p.is_dir() and not p.is_symlink()),
        key=lambda p: p.stat().st_mtime,
        reverse=True,
    )
    count, total, deleted = 0, 0, []
    for folder in folders:
        size = _size(folder)
        idle = now - folder.stat().st_mtime
        old = idle > KEEP_DAYS * 86_400
        surplus = count >= KEEP_FOLDERS or total + size > KEEP_BYTES
        if folder != keep and idle > BUSY_SECONDS and (old or surplus) and _deleted(folder):
            deleted.append(folder)
            continue
        count, total = count + 1, total + size
    return deleted


def _deleted(folder: Path) -> bool:
    """Delete `folder` unless a run holds it; True when deleted."""
    with _unless_held(folder) as free:
        if free:
            shutil.rmtree(folder, ignore_errors=True)
    return free


def _size(folder: Path) -> int:
    return sum(f.stat().st_size for f in folder.rglob("*") if f.is_file())
