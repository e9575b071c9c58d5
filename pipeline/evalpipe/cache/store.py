"""The answer cache's file: one SQLite database that several jobs on one machine share.

SQLite (the standard library's) in WAL mode: readers never wait for a writer, a writer waits for
another at most `BUSY_SECONDS` (or what `wait` says: a job's driver never stalls on it), and a
transaction is all or nothing, so `kill -9` at any moment leaves the file whole
(`synchronous=NORMAL`: a power cut may lose the last transactions, never the file). `questions`
numbers the question digests (`evalpipe.cache.answers` makes them: service,
model and question content) and names the service each was put to; `answers` holds one answer per
(state digest, question), with the model that answered, the tokens it cost and when. A batch of
states is looked up by state, so all of a state's answers come back from one b-tree range; an index
on the time serves pruning by age and `evalpipe cache stats`. A `meta` table holds the format
version: a file of a newer format is neither read nor changed; a format-1 file (before questions
named a service) is migrated when a run opens it, its answers never served again. Every way a file
cannot be used is one `CacheUnusable` with a one-line reason.

    $XDG_CACHE_HOME/evalpipe/answers.sqlite3     (else ~/.cache/evalpipe/; or `cache.path`)
"""

from __future__ import annotations

import os
import sqlite3
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any
from urllib.parse import quote

from evalpipe.errors import first_line
from evalpipe.stores import cache_home

FORMAT = 2  # the file's format version: a newer one is refused (2: questions name a service)
UNKNOWN_SERVICE = "unknown"  # questions of a format-1 file: never served (their digests lack it)
DAY = 86_400  # seconds: ages are given in days (cache.max_age_days, --older-than)
FILE_NAME = "answers.sqlite3"
FILE_SUFFIXES = (".sqlite3", ".sqlite", ".db")
BUSY_SECONDS = 2.0  # how long a write waits for another job's transaction
_CHUNK = 5000  # states per lookup query (SQLite takes up to 32,766 parameters)
_PRUNE_ROWS = 20_000  # rows deleted per transaction when pruning
_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS meta (name TEXT PRIMARY KEY, value TEXT NOT NULL) WITHOUT ROWID",
    """CREATE TABLE IF NOT EXISTS questions (
        id INTEGER PRIMARY KEY,
        digest BLOB NOT NULL UNIQUE, -- evalpipe.cache.answers.question_digest
        service TEXT NOT NULL DEFAULT 'unknown'  -- who answered: ServiceConfig.identity
    )""",
    """CREATE TABLE IF NOT EXISTS answers (
        state BLOB NOT NULL,         -- evalpipe.planning.state_key
        question INTEGER NOT NULL,   -- questions.id
        answer BLOB NOT NULL,        -- a check, then the answer's JSON (answers.pack)
        model TEXT NOT NULL,         -- the versioned model that answered
        tokens INTEGER NOT NULL,     -- input tokens billed for it (its share of its request)
        created INTEGER NOT NULL,    -- unix seconds
        PRIMARY KEY (state, question)
    ) WITHOUT ROWID""",
    "CREATE INDEX IF NOT EXISTS answers_created ON answers (created)",
    f"INSERT OR IGNORE INTO meta VALUES ('format', '{FORMAT}')",
)
_TABLES = {"meta", "questions", "answers"}
Row = tuple[bytes, int, bytes, str, int, int]  # state, question, answer, model, tokens, created


class CacheUnusable(Exception):
    """Why a cache file cannot be used (a warning in a run, an error for `evalpipe cache`)."""


def cache_file(path: Path | None) -> Path:
    """The SQLite file for `cache.path`: the path itself when it names a file, else
    `answers.sqlite3` in that directory (the default directory when None)."""
    where = cache_home() if path is None else Path(path).expanduser()
    if where.suffix.lower() in FILE_SUFFIXES or where.is_file():
        return where
    return where / FILE_NAME


# --------------------------------------------------------------------------- the file


class Store:
    """One cache file, used by one thread; other processes may use it at the same time."""

    def __init__(self, conn: sqlite3.Connection, path: Path) -> None:
        self._conn = conn
        self.path = path

    @classmethod
    def open(cls, path: Path, *, write: bool = True) -> Store:
        """Open (with `write`, create) the file; CacheUnusable says why it cannot be used."""
        if not write and not path.exists():
            raise CacheUnusable(f"{path} does not exist")
        try:
            if write:
                path.parent.mkdir(parents=True, exist_ok=True)
                check_access(path)
            mode = "rwc" if write else "ro"
            conn = sqlite3.connect(
                f"file:{quote(str(path))}?mode={mode}",
                uri=True,
                timeout=BUSY_SECONDS,
                isolation_level=None,
            )
        except (OSError, sqlite3.Error) as exc:
            raise CacheUnusable(f"{path} cannot be opened ({first_line(exc)})") from None
        store = cls(conn, path)
        try:
            store._prepare(write)
        except sqlite3.Error as exc:
            conn.close()
            raise CacheUnusable(f"{path} cannot be used ({first_line(exc)})") from None
        except CacheUnusable:
            conn.close()
            raise
        return store

    def _prepare(self, write: bool) -> None:
        conn = self._conn
        if write:
            _write_ahead(conn)
            conn.execute("PRAGMA synchronous=NORMAL")
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        if tables and "meta" not in tables:
            raise CacheUnusable(f"{self.path} is an SQLite file, but not an evalpipe cache")
        found = self._check_format() if tables else FORMAT
        if write and found < FORMAT:
            self._migrate()
        if write and not _TABLES.issubset(tables):
            with self._transaction():  # two jobs creating it at once: one waits
                for statement in _SCHEMA:
                    conn.execute(statement)

    def _migrate(self) -> None:
        """A format-1 file: its questions' service is unknown, and their digests lack one, so
        their answers are never served again (prune removes them with age)."""
        with self._transaction():
            columns = {r[1] for r in self._conn.execute("PRAGMA table_info(questions)")}
            if "service" not in columns:
                self._conn.execute(
                    "ALTER TABLE questions ADD COLUMN service TEXT NOT NULL "
                    f"DEFAULT '{UNKNOWN_SERVICE}'"
                )
            self._conn.execute(f"UPDATE meta SET value = '{FORMAT}' WHERE name = 'format'")

    def _check_format(self) -> int:
        row = self._conn.execute("SELECT value FROM meta WHERE name = 'format'").fetchone()
        found = int(row[0]) if row and str(row[0]).isdigit() else None
        if found is None:
            raise CacheUnusable(f"{self.path} has no format version: it is not an evalpipe cache")
        if found > FORMAT:
            raise CacheUnusable(
                f"{self.path} was written by a newer evalpipe (cache format {found}; this one "
                f"reads format {FORMAT}), so it is neither read nor changed: upgrade evalpipe, "
                "or set cache.path to another place"
            )
        return found

    def wait(self, seconds: float) -> None:
        """From now on, wait at most `seconds` for another process's transaction."""
        self._conn.execute(f"PRAGMA busy_timeout = {max(0, int(seconds * 1000))}")

    def _transaction(self) -> _Transaction:
        return _Transaction(self._conn)

    def question_ids(
        self, digests: Sequence[bytes], add: bool, service: str = UNKNOWN_SERVICE
    ) -> dict[bytes, int]:
        """The ids of these question digests; with `add`, those not numbered yet are added,
        as questions put to `service`."""
        if add:
            with self._transaction():
                self._conn.executemany(
                    "INSERT OR IGNORE INTO questions (digest, service) VALUES (?, ?)",
                    [(d, service) for d in digests],
                )
        marks = ",".join("?" * len(digests))
        sql = f"SELECT digest, id FROM questions WHERE digest IN ({marks})"
        return dict(self._conn.execute(sql, list(digests)).fetchall())

    def get(
        self, states: Sequence[bytes], questions: Sequence[int], since: int = 0
    ) -> list[tuple[bytes, int, bytes, str]]:
        """(state, question, answer blob, model) of these states' answers to these questions,
        created at or after `since`."""
        found: list[tuple[bytes, int, bytes, str]] = []
        asked = ",".join(str(int(q)) for q in questions)
        for start in range(0, len(states), _CHUNK):
            chunk = states[start : start + _CHUNK]
            # `+question`: one range of the primary key per state, filtered as it is read,
            # rather than a seek per (state, question) pair: half the time for 100k states.
            sql = (
                "SELECT state, question, answer, model FROM answers WHERE state IN "
                f"({','.join('?' * len(chunk))}) AND +question IN ({asked}) AND created >= ?"
            )
            found += self._conn.execute(sql, (*chunk, since)).fetchall()
        return found

    def put(self, rows: Sequence[Row]) -> None:
        """Write (state, question, answer blob, model, tokens, created) rows in one transaction."""
        with self._transaction():
            self._conn.executemany("INSERT OR REPLACE INTO answers VALUES (?, ?, ?, ?, ?, ?)", rows)

    def prune(self, before: int, budget: float | None = None) -> int:
        """Delete answers created before `before` (unix seconds), a bounded number per
        transaction so other jobs wait little; stop after `budget` seconds. Returns how many."""
        removed, started = 0, time.monotonic()
        sql = (
            "DELETE FROM answers WHERE (state, question) IN "
            f"(SELECT state, question FROM answers WHERE created < ? LIMIT {_PRUNE_ROWS})"
        )
        while budget is None or time.monotonic() - started < budget:
            with self._transaction():
                count = self._conn.execute(sql, (before,)).rowcount
            removed += count
            if count < _PRUNE_ROWS:
                break
        return removed

    def vacuum(self) -> None:
        self._conn.execute("VACUUM")

    def stats(self) -> dict[str, Any]:
        """Entries, bytes on disk, entries by model, oldest and newest (unix seconds)."""
        conn = self._conn
        entries, oldest, newest = conn.execute(
            "SELECT count(*), min(created), max(created) FROM answers"
        ).fetchone()
        models = conn.execute(
            "SELECT model, count(*), sum(tokens) FROM answers GROUP BY model ORDER BY 2 DESC"
        ).fetchall()
        services = conn.execute(
            f"SELECT {self._service_column()}, count(*), sum(tokens) FROM answers "
            "JOIN questions ON questions.id = answers.question GROUP BY 1 ORDER BY 2 DESC"
        ).fetchall()
        files = [self.path, *(self.path.with_name(self.path.name + s) for s in ("-wal", "-shm"))]
        return {
            "path": str(self.path),
            "format": FORMAT,
            "entries": entries,
            "bytes": sum(p.stat().st_size for p in files if p.exists()),
            "models": {m: {"entries": n, "tokens": t} for m, n, t in models},
            "services": {v: {"entries": n, "tokens": t} for v, n, t in services},
            "oldest": oldest,
            "newest": newest,
        }

    def _service_column(self) -> str:
        """`questions.service`, or 'unknown' in a format-1 file read without migrating it."""
        columns = {r[1] for r in self._conn.execute("PRAGMA table_info(questions)")}
        return "questions.service" if "service" in columns else f"'{UNKNOWN_SERVICE}'"

    def close(self) -> None:
        self._conn.close()


def busy(exc: sqlite3.Error) -> bool:
    """Whether `exc` is another process holding the file (a lock that will go), not damage."""
    text = str(exc).lower()
    return isinstance(exc, sqlite3.OperationalError) and ("locked" in text or "busy" in text)


def check_access(path: Path) -> None:
    """An unreadable or read-only file (or directory, where SQLite keeps its -wal and -shm
    files) is found before any write: SQLite would say so late, or not at all. A symbolic link
    is refused: SQLite would write wherever it points (a file of another user's is used, as a
    team's cache shared on purpose is)."""
    for name in (path, *(path.with_name(path.name + end) for end in ("-wal", "-shm"))):
        if name.is_symlink():  # SQLite would write its WAL through a link as well
            raise CacheUnusable(f"{name} is a symbolic link: evalpipe writes through none")
    if path.exists() and not os.access(path, os.R_OK):
        raise CacheUnusable(f"{path} cannot be read (permission denied)")
    target = path if path.exists() else path.parent
    if not os.access(target, os.W_OK) or not os.access(path.parent, os.W_OK):
        raise CacheUnusable(f"{path} is read-only")


def _write_ahead(conn: sqlite3.Connection) -> None:
    """Put the file in WAL mode (it stays so). Switching a new file takes an exclusive lock for
    which SQLite does not wait through the busy timeout: when jobs create one cache at once,
    all but one are told "database is locked" at once (1 in 9 openings, three processes at
    once, measured), so the switch is tried again for up to BUSY_SECONDS."""
    deadline = time.monotonic() + BUSY_SECONDS
    while True:
        try:
            mode = conn.execute("PRAGMA journal_mode=WAL").fetchone()[0]
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() > deadline:
                raise
        else:
            if str(mode).lower() == "wal" or time.monotonic() > deadline:
                return
        time.sleep(0.01)


class _Transaction:
    """BEGIN IMMEDIATE ... COMMIT, or ROLLBACK on an error (the connection is in autocommit
    mode, so each transaction says where it begins)."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self._conn = conn

    def __enter__(self) -> None:
        self._conn.execute("BEGIN IMMEDIATE")

    def __exit__(self, kind: object, exc: object, tb: object) -> None:
        self._conn.execute("COMMIT" if kind is None else "ROLLBACK")
