"""The answer cache across runs: a job pays once per content, not once per run.

An answer is kept per question, under the state's digest (`plan.state_key`, of its canonical JSON)
and a digest of the service that answered (its origin, or `embedded`: answers of one service are
never served for another), the versioned model and the question's content as the service receives
it (type, instructions, criteria in their order, since the model reads them in that order). The
question's key is not in it: keys never reach the model, so renaming a question costs nothing, and
a job that adds a question sends only that one for each state it already knows. Answers of an alias
(`model-latest`, `model-preview`) move, so a job on an alias neither reads nor writes the cache;
neither is an answer of a row in error ever written.

Storage is one SQLite file shared by the jobs of a machine (`evalpipe.cache.store`), asked once per
batch of states. Each stored answer starts with a CRC-32 of its key and its text, so a damaged
value is a miss, never a wrong answer (`evalpipe.cache.hits` checks and parses what a lookup
finds). A cache that cannot be opened, read or written is a warning
and a run without it; the job keeps going, paying for what it would have found. A cache another
process holds under a write lock is read on (WAL readers do not wait), and the answers to write
wait for it, tried again with a growing pause and a short wait each time (`TURN_SECONDS`), so
the driver's turn never stalls; a lock held past `BUSY_SECONDS` is one warning.

With a shared tier (`shared.url`) the answers are kept there instead, for every host on the
account (`evalpipe.cache.shared`), and a job claims the states it sends so that two hosts pay
each once (`claim`, `claimed_elsewhere`); without one, a job's claims are always its own.

Nothing here sees the API key; file names come from `cache.path` only."""

from __future__ import annotations

import contextlib
import hashlib
import sqlite3
import time
import zlib
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson
import pyarrow as pa

from evalpipe.cache.hits import CHECK, Asked, hits
from evalpipe.cache.shared import CLAIM_SECONDS, SharedStore
from evalpipe.cache.store import (
    BUSY_SECONDS,
    DAY,
    CacheUnusable,
    Store,
    busy,
    cache_file,
    check_access,
)
from evalpipe.config import CacheConfig, JobConfig
from evalpipe.contract import dumps
from evalpipe.errors import first_line
from evalpipe.planning import CacheHit, Request
from evalpipe.tier import Tier, TierAddress

_MAX_PENDING = 50_000  # answers kept for a later write while the file is busy (~15 MB)
TURN_SECONDS = 0.05  # the longest a commit in a driver's turn waits for another's lock
OPEN_SECONDS = 0.5  # ... and the job's opening, before it reads on without numbering
_RETRY_FIRST, _RETRY_MAX = 0.25, 5.0  # seconds between commits while the file is held
# An answer to write: state, question key, answer blob, model, tokens, created (unix seconds).
_Kept = tuple[bytes, str, bytes, str, int, int]


# --------------------------------------------------------------------------- keys and answers


def question_digest(service: str, model: str, question: Mapping[str, Any]) -> bytes:
    """16 bytes naming (service, model, question content); the question's key is not part of
    it. `service` is the identity of who answers (`ServiceConfig.identity`): answers are reused
    only from the service that gave them."""
    criteria = question.get("criteria")
    ordered = list(criteria.items()) if isinstance(criteria, Mapping) else criteria
    content = [service, model, question.get("type"), question.get("instructions"), ordered]
    return hashlib.blake2b(dumps(content), digest_size=16, person=b"evalpipe-q").digest()


def pack(question: bytes, state: bytes, answer: Mapping[str, Any]) -> bytes:
    """The stored form: a CRC-32 of (question digest, state digest, text), then the answer's
    JSON without what the table does not keep (its type, a score's legend)."""
    text = dumps({k: v for k, v in answer.items() if k not in ("type", "legend")})
    check = zlib.crc32(text, zlib.crc32(state, zlib.crc32(question)))
    return check.to_bytes(CHECK, "big") + text


def unpack(question: bytes, state: bytes, blob: bytes) -> dict[str, Any] | None:
    """The answer stored for (question, state), or None when the value is damaged."""
    return _unpack(zlib.crc32(question), state, blob)


def _unpack(question_crc: int, state: bytes, blob: Any) -> dict[str, Any] | None:
    if type(blob) is not bytes or len(blob) <= CHECK:
        return None
    text = blob[CHECK:]
    if int.from_bytes(blob[:CHECK], "big") != zlib.crc32(text, zlib.crc32(state, question_crc)):
        return None
    try:
        answer = orjson.loads(text)
    except orjson.JSONDecodeError:
        return None
    return answer if type(answer) is dict else None


def shares(
    billed: int, requests: Iterable[Request], question_tokens: Mapping[str, int]
) -> dict[str, int]:
    """Each question's share of the tokens its requests billed: its own tokens and an equal
    part of its request's state, scaled to what was billed."""
    requests = list(requests)
    weights: dict[str, float] = {}
    for request in requests:
        state = request.state_tokens
        for key in request.keys:
            weights[key] = question_tokens[key] + state / len(request.keys)
    total = sum(weights.values()) or 1.0
    return {key: round(billed * w / total) for key, w in weights.items()}


# --------------------------------------------------------------------------- a job's view


@dataclass
class JobCache:
    """The cache as one job sees it: its model and questions, lookups by state digest, and
    the answers to write, one transaction per `commit`. `on` is False when the job runs
    without it; `note` says why ("on" otherwise). A failure while in use is one warning, and
    the rest of the run goes on without the cache. `ids` numbers the job's questions in the
    file (a question the file does not know has no answer in it); `unnumbered` are questions
    to number at the next commit (the file was held when the job opened it). `answer_types`
    (`evalpipe.output.answer_types`, when it names every question): hits' answers are held in
    Arrow (`evalpipe.cache.hits`), else they are dicts."""

    store: Store | SharedStore | None
    service: str
    model: str
    questions: Mapping[str, Mapping[str, Any]]
    question_tokens: Mapping[str, int]
    max_age_days: float | None = None
    note: str = "on"
    warn: Callable[[str], None] = lambda message: None
    ids: Mapping[str, int] = field(default_factory=dict)
    unnumbered: Mapping[str, bytes] = field(default_factory=dict)
    pending: list[_Kept] = field(default_factory=list)
    answer_types: pa.Schema | None = None

    def __post_init__(self) -> None:
        self.digests = {
            k: question_digest(self.service, self.model, q) for k, q in self.questions.items()
        }
        if self.answer_types is not None and not set(self.questions) <= set(
            self.answer_types.names
        ):
            self.answer_types = None
        self._by_id = self._asked()
        self._held_since: float | None = None  # the first commit another process's lock refused
        self._retry_at = 0.0
        self._told = False  # the lock's warning was given

    def _asked(self) -> dict[int, Asked]:
        """The job's questions by their number in the file."""
        return {
            i: Asked(k, dumps(k) + b":", zlib.crc32(self.digests[k])) for k, i in self.ids.items()
        }

    @property
    def on(self) -> bool:
        return self.store is not None

    def _since(self) -> int:
        return 0 if self.max_age_days is None else int(time.time() - self.max_age_days * DAY)

    def lookup(self, states: Sequence[bytes]) -> dict[bytes, CacheHit]:
        """The cached answers of each state digest that has any (one query per 5,000 states)."""
        if self.store is None or not states or not self._by_id:
            return {}
        try:
            found = self.store.get(states, list(self._by_id), self._since())
        except sqlite3.Error as exc:
            if busy(exc):  # held even from readers: these rows are sent, the cache stays
                self._held()
            else:
                self._fail("cannot be read", exc)
            return {}
        return hits(found, self._by_id, self.answer_types)

    def claim(self, states: Sequence[bytes]) -> set[bytes]:
        """Claim `states`, about to be sent (or still in flight: renewed): those another host
        claimed first, to wait for (`evalpipe.cache.shared`); none without a shared tier."""
        if not isinstance(self.store, SharedStore) or not states:
            return set()
        return self.store.claim(states)

    @property
    def claim_seconds(self) -> float:
        """How long this job's claims last unrenewed (`evalpipe.cache.shared`)."""
        return self.store.claim_seconds if isinstance(self.store, SharedStore) else CLAIM_SECONDS

    def claimed_elsewhere(self, states: Sequence[bytes]) -> set[bytes]:
        """Of `states`, those another host still holds a claim on."""
        if not isinstance(self.store, SharedStore) or not states:
            return set()
        return self.store.claimed_elsewhere(states)

    def add(
        self,
        state: bytes,
        answers: Mapping[str, Any],
        model: str,
        billed: int,
        requests: Iterable[Request],
    ) -> None:
        """Keep fresh answers of one state, for the next `commit`."""
        if self.store is None or len(self.pending) >= _MAX_PENDING:
            return
        tokens = shares(billed, requests, self.question_tokens)
        now = int(time.time())
        for qkey, answer in answers.items():
            if (qkey in self.ids or qkey in self.unnumbered) and qkey in tokens:
                blob = pack(self.digests[qkey], state, answer)
                self.pending.append((state, qkey, blob, model, tokens[qkey], now))

    def commit(self, wait: float = TURN_SECONDS) -> None:
        """Write the answers kept since the last commit, in one transaction, waiting at most
        `wait` seconds for another process's lock. While another process holds the file they
        wait, and the next commits try again after a growing pause."""
        if self.store is None or not self.pending or time.monotonic() < self._retry_at:
            return
        try:
            self.store.wait(wait)
            self._number()
            ids = self.ids
            self.store.put([(s, ids[q], b, m, t, c) for s, q, b, m, t, c in self.pending])
        except sqlite3.Error as exc:
            if busy(exc):
                self._held()
                return
            self._fail("cannot be written", exc)
        self.pending, self._held_since, self._retry_at = [], None, 0.0

    def _number(self) -> None:
        """Number the questions the file was too busy to number when the job opened it."""
        if self.store is None or not self.unnumbered:
            return
        digests = dict(self.unnumbered)
        known = self.store.question_ids(list(digests.values()), add=True, service=self.service)
        self.ids = {**self.ids, **{k: known[d] for k, d in digests.items()}}
        self._by_id = self._asked()
        self.unnumbered = {}

    def _held(self) -> None:
        """Another process holds the file: try again later; say so once it lasts."""
        now = time.monotonic()
        self._held_since = self._held_since or now
        waited = now - self._held_since
        self._retry_at = now + min(_RETRY_MAX, max(_RETRY_FIRST, waited))
        if waited >= BUSY_SECONDS and not self._told and self.store is not None:
            self._told = True
            self.warn(
                f"answer cache: {self.store.path} is held by another process; this run's "
                "answers wait to be written until it is free, and the run goes on"
            )

    def close(self, prune_seconds: float = 1.0) -> None:
        """Write what is left (waiting up to BUSY_SECONDS for another process's lock),
        prune expired answers (for at most `prune_seconds`), close."""
        if self.store is None:
            return
        self._retry_at = 0.0
        self.commit(wait=BUSY_SECONDS)
        store, self.store = self.store, None
        if store is None:  # the commit failed: the store is closed
            return
        if self.pending:
            self.warn(
                f"answer cache: {store.path} stayed held by another process; "
                f"{len(self.pending):,} answers of this run were not kept in it"
            )
            self.pending = []
        # Pruning is housekeeping: what is left, the next run or `evalpipe cache prune` does.
        with contextlib.suppress(sqlite3.Error):
            if self.max_age_days is not None:
                store.prune(self._since(), budget=prune_seconds)
        store.close()

    def _fail(self, what: str, exc: BaseException) -> None:
        assert self.store is not None
        path = self.store.path
        self.note = f"off: {path} {what} ({first_line(exc)})"
        self.warn(f"answer cache: {path} {what} ({first_line(exc)}); the run goes on without it")
        self.store.close()
        self.store = None
        self.pending = []


def open_job_cache(
    config: JobConfig,
    questions: Mapping[str, Mapping[str, Any]],
    question_tokens: Mapping[str, int],
    *,
    tier: TierAddress | None = None,
    warn: Callable[[str], None] = lambda message: None,
    write: bool = True,
    answer_types: pa.Schema | None = None,
    packed: bool = False,
) -> JobCache:
    """The job's cache, or a JobCache that is off (with a warning when the user should know).
    `tier`: the job's shared tier as its session resolved it (`planning.PreparedJob.tier`),
    which keeps every host's answers instead of the file.
    `write=False` (`evalpipe plan`) opens an existing file to read and creates nothing.
    `answer_types`: the output table's answers (`JobCache`), for hits held in Arrow.
    `packed`: the answers given in packs of rows (`packing.rows`), kept apart from those
    given alone under a service of their own (`<service> packed`), so that a job that does
    not pack never gets a packed answer."""
    settings: CacheConfig = config.cache
    service = config.service.identity + (" packed" if packed else "")

    def view(
        note: str,
        store: Store | SharedStore | None = None,
        ids: Mapping[str, int] | None = None,
        unnumbered: Mapping[str, bytes] | None = None,
    ) -> JobCache:
        return JobCache(store, service, config.model, questions, question_tokens,
                        settings.max_age_days, note, warn, ids or {}, unnumbered or {},
                        answer_types=answer_types)  # fmt: skip

    if not settings.enabled:
        return view("off: cache.enabled is false")
    if config.model_is_alias:  # `prepare` warns about aliases; the summary says this once
        return view(f"off: {config.model} is an alias, whose answers move")
    if tier is not None:  # every host's answers, in the tier
        opened = Tier.of(tier, warn if write else None)  # `plan`'s warnings are the run's
        shared = SharedStore(opened, tier, settings.max_age_days, config.shared.lease_seconds)
        digests = {k: question_digest(service, config.model, q) for k, q in questions.items()}
        known = shared.question_ids(list(digests.values()), add=True)
        return view(f"on ({shared.path})", shared, {k: known[d] for k, d in digests.items()})
    path = cache_file(settings.path)
    if not write and not path.exists():
        return view("on (empty)")
    try:
        if not write:
            check_access(path)  # the run would not use it: neither does the estimate
        store = Store.open(path, write=write)
    except CacheUnusable as exc:
        warn(f"answer cache: {exc}; the run goes on without it")
        return view(f"off: {exc}")
    digests = {k: question_digest(service, config.model, q) for k, q in questions.items()}
    try:
        store.wait(OPEN_SECONDS)
        try:
            known = store.question_ids(list(digests.values()), add=write, service=service)
        except sqlite3.Error as exc:
            if not (write and busy(exc)):
                raise
            # Another process holds it: read on; number the new questions at a later commit.
            known = store.question_ids(list(digests.values()), add=False)
    except sqlite3.Error as exc:
        store.close()
        warn(f"answer cache: {path} cannot be used ({first_line(exc)}); the run goes on without it")
        return view(f"off: {path} cannot be used ({first_line(exc)})")
    ids = {k: known[d] for k, d in digests.items() if d in known}
    later = {k: d for k, d in digests.items() if write and d not in known}
    return view("on", store, ids, later)
