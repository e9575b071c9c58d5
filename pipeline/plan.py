"""What becomes of each row, decided in one place for `evalpipe plan` and `evalpipe run`.

Both commands walk the corpus through one `RowClassifier`, so the estimate and the run cannot
disagree about a row's fate (`Fate`):

    invalid_state   the state is null or blank: an error row, never sent
    context_limit   the state plus its longest question is over the context limit: never sent
    repeat          an identical state was sent earlier in the corpus: its answer is reused
                    (or waited for, while its request is in flight)
    cached          the answer cache (`pipeline.cache`) holds every question's answer
    send            one request with every question not in the cache, or several when the
                    state plus those questions is over the total limit (`Planner` groups them)

Rows are classified a batch at a time, so the cache is asked once per batch, not once per row.
A repeated state is found by its `state_key`, a digest of its canonical JSON; `repeated_states`
is the streaming pass that finds the keys occurring more than once, holding one digest per
distinct state and never a state; `survey` does the same pass and also finds the committed rows
of an output whose state changed since (stale: scored again). The price of a token and the
floor the account's limits set on a job's duration are stated here too.
"""

from __future__ import annotations

import enum
import hashlib
import math
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc

from pipeline.errors import CONTEXT_LIMIT, INVALID_STATE
from pipeline.jsonio import canonical
from pipeline.table import stale_ids, state_hashes
from pipeline.tokens import context_violation, count_questions, count_value

if TYPE_CHECKING:
    from pipeline.source import Row, Source

PRICE_PER_MILLION_INPUT_TOKENS = 0.042  # dollars, model-1.13.0 (spec section 1)
_MERGE_EVERY = 1 << 20  # new digests buffered before they are merged into the sorted ones
_STALE_EVERY = 1 << 18  # source rows compared with the committed ones at a time
_PLANS_KEPT = 1 << 16  # plans of every question kept, by state size (a few MB at most)
# Calibrated planning: the service's count is our count times the measured ratio; plan with
# this margin on top (the ratio varies from row to row), once it is measurably above ours.
SERVICE_MARGIN = 1.05
SAME_COUNT = 1.02  # a ratio up to this is our own count, give or take: no calibration


def cost(input_tokens: int) -> float:
    """Dollars for this many input tokens."""
    return input_tokens * PRICE_PER_MILLION_INPUT_TOKENS / 1_000_000


def minimum_seconds(requests: int, tokens: int, rpm: float, tps: float) -> float:
    """The floor the limits set: requests / (RPM/60) or tokens / TPS, whichever is larger."""
    return max(requests / (rpm / 60.0), tokens / tps)


# --------------------------------------------------------------------------- repeated states


def state_key(state: Any) -> bytes:
    """16-byte digest of a state's canonical JSON (object keys sorted): the dedup key.

    Hashing the JSON rather than the raw text keeps a string state and an object state with
    the same characters apart: the service receives them differently.
    """
    return hashlib.blake2b(canonical(state), digest_size=16).digest()


class _RepeatFinder:
    """Finds the digests that occur more than once, by sorting rather than hashing.

    Holds the distinct digests seen so far as one sorted Arrow array (16 bytes each) plus the
    repeated ones; new digests are buffered and merged in whenever the buffer outgrows what is
    held (amortized doubling), so memory follows the number of distinct states, never the
    states. A merge sorts, so it briefly needs ~40 more bytes per digest; an Arrow hash
    group_by needed ~190.
    """

    def __init__(self) -> None:
        self._pending: list[pa.Array] = []
        self._pending_rows = 0
        self._seen = pa.array([], pa.binary(16))  # sorted, each digest once
        self._repeated: set[bytes] = set()
        self._limit = _MERGE_EVERY

    def add(self, digests: list[bytes]) -> None:
        if digests:
            self._pending.append(pa.array(digests, pa.binary(16)))
            self._pending_rows += len(digests)
        if self._pending_rows >= self._limit:
            self._merge()

    def _merge(self) -> None:
        keys = pa.concat_arrays([self._seen, *self._pending])
        self._pending, self._pending_rows = [], 0
        if len(keys) < 2:
            self._seen = keys
            return
        keys = keys.take(pc.sort_indices(keys))
        # equal neighbours are repeats; `seen` holds each digest once, so a digest equal to its
        # neighbour occurred twice in the corpus (in `seen` and new, or twice new)
        same = pc.equal(keys.slice(1), keys.slice(0, len(keys) - 1))
        self._repeated.update(pc.unique(keys.slice(1).filter(same)).to_pylist())
        self._seen = keys.filter(pa.concat_arrays([pa.array([True]), pc.invert(same)]))
        self._limit = max(_MERGE_EVERY, len(self._seen))

    def repeated(self) -> set[bytes]:
        self._merge()
        return self._repeated


def repeated_states(source: Source) -> set[bytes]:
    """The `state_key`s of the valid states that occur more than once in the corpus.

    One streaming pass over the state columns; what is held is one digest per distinct state
    (see `_RepeatFinder`), never a state.
    """
    finder = _RepeatFinder()
    for states in source.state_batches():
        finder.add([state_key(s) for s in states if s is not None])
    return finder.repeated()


@dataclass(frozen=True)
class Survey:
    """What one pass over the corpus found: the repeated states, and the committed ids whose
    state changed since they were scored (None when nothing was committed)."""

    repeated: set[bytes]
    stale: pa.Array | None


def survey(source: Source, committed: pa.Table | None) -> Survey:
    """`repeated_states`, and with `committed` (id, `_state_hash`) pairs of an output, the ids
    whose state is another now, in the same pass. Memory: the committed pairs, one digest per
    distinct state, and `_STALE_EVERY` current pairs at a time."""
    if committed is None or committed.num_rows == 0:
        return Survey(repeated_states(source), None)
    finder = _RepeatFinder()
    id_type = committed.schema.field(0).type
    ids: list[Any] = []
    digests: list[bytes | None] = []
    stale: list[pa.Array] = []

    def compare() -> None:
        current = pa.table([pa.array(ids, id_type), state_hashes(digests)], ["id", "hash"])
        stale.append(stale_ids(committed, current))
        ids.clear()
        digests.clear()

    for batch in source.batches():
        keys = [None if row.state is None else state_key(row.state) for row in batch]
        finder.add([k for k in keys if k is not None])
        ids.extend(row.id for row in batch)
        digests.extend(keys)
        if len(ids) >= _STALE_EVERY:
            compare()
    if ids:
        compare()
    return Survey(finder.repeated(), pa.concat_arrays(stale))


# --------------------------------------------------------------------------- splitting


@dataclass(frozen=True)
class Request:
    """One evaluate call of a row: which questions it asks and its estimated input tokens."""

    keys: tuple[str, ...]
    tokens: int


@dataclass(frozen=True)
class RowPlan:
    """The requests a row needs, or why it is never sent."""

    requests: tuple[Request, ...]
    error_type: str | None = None
    error: str | None = None


class Planner:
    """Plans rows against one fixed set of questions (their token counts are computed once).

    Token counts are evalpipe's (`pipeline.tokens`); the service counts with a tokenizer of its
    own. `calibrate(ratio)` gives the ratio of the service's count to ours (measured from the
    `usage` it bills): the context limits are then checked against our count times the ratio
    and a margin, so rows are split before the service refuses them. Requests keep their
    tokens in our count (the Budget calibrates the pacing by the account's billed usage).
    """

    def __init__(self, questions: Mapping[str, Mapping[str, Any]]) -> None:
        self.question_tokens = count_questions(questions)
        self._by_size = sorted(self.question_tokens.items(), key=lambda kv: (-kv[1], kv[0]))
        self._all = tuple(questions)
        self._all_tokens = sum(self.question_tokens.values())
        self._by_tokens: dict[int, RowPlan] = {}  # state tokens -> the plan of every question
        self.scale = 1.0  # the service's count per token of ours, with the margin

    def calibrate(self, ratio: float) -> None:
        """Plan with the service's count: `ratio` of its count to ours (1.0: ours)."""
        scale = ratio * SERVICE_MARGIN if ratio > SAME_COUNT else 1.0
        if abs(scale - self.scale) > 0.01 * self.scale:
            self.scale = scale
            self._by_tokens.clear()

    def _violation(self, state_tokens: int, sizes: Mapping[str, int]) -> str | None:
        """The context rule against the service's count as calibrated (ours until then)."""
        if self.scale == 1.0:
            return context_violation(state_tokens, sizes)
        scaled = {k: math.ceil(t * self.scale) for k, t in sizes.items()}
        found = context_violation(math.ceil(state_tokens * self.scale), scaled)
        if found is None:
            return None
        return f"{found}, by the service's count as measured ({self.scale:.2f} x evalpipe's)"

    @property
    def keys(self) -> tuple[str, ...]:
        return self._all

    def plan(self, state: Any) -> RowPlan:
        return self.plan_tokens(count_value(state))

    def plan_tokens(self, state_tokens: int, keys: Collection[str] | None = None) -> RowPlan:
        """The requests for a state of `state_tokens`, asking `keys` (default: every question).
        A row whose state cannot fit its longest question is refused whatever `keys` holds:
        the answers of a row all come from one rule. The plan of every question depends on
        the state's size alone: it is made once per size."""
        if keys is None or len(keys) == len(self._all):
            plan = self._by_tokens.get(state_tokens)
            if plan is None:
                plan = self._plan(state_tokens, None)
                if len(self._by_tokens) < _PLANS_KEPT:
                    self._by_tokens[state_tokens] = plan
            return plan
        return self._plan(state_tokens, keys)

    def _plan(self, state_tokens: int, keys: Collection[str] | None) -> RowPlan:
        longest_key, longest = self._by_size[0]
        refused = self._violation(state_tokens, {longest_key: longest})
        if refused is not None:
            return RowPlan((), CONTEXT_LIMIT, refused)
        if keys is None or len(keys) == len(self._all):
            asked, sizes, tokens = self._all, self._by_size, self._all_tokens
        else:
            asked = tuple(k for k in self._all if k in keys)
            sizes = [(k, t) for k, t in self._by_size if k in keys]
            tokens = sum(t for _, t in sizes)
        if self._violation(state_tokens, dict(sizes)) is None:
            return RowPlan((Request(asked, state_tokens + tokens),))
        return RowPlan(tuple(self._split(state_tokens, sizes)))

    def _split(self, state_tokens: int, sizes: list[tuple[str, int]]) -> list[Request]:
        """First-fit decreasing: few requests, each within the context limits."""
        groups: list[dict[str, int]] = []
        for key, tokens in sizes:
            for group in groups:
                if self._violation(state_tokens, {**group, key: tokens}) is None:
                    group[key] = tokens
                    break
            else:
                groups.append({key: tokens})
        order = {key: i for i, key in enumerate(self._all)}
        return [
            Request(tuple(sorted(group, key=order.__getitem__)), state_tokens + sum(group.values()))
            for group in groups
        ]


# --------------------------------------------------------------------------- the classifier


class Fate(enum.Enum):
    INVALID = INVALID_STATE
    CONTEXT_LIMIT = CONTEXT_LIMIT
    REPEAT = "repeat"
    CACHED = "cached"
    SEND = "send"


@dataclass(frozen=True, slots=True)
class CacheHit:
    """Answers the cache holds for one state: question key -> answer, and the model(s) that
    gave them ("+"-joined, as for a split row)."""

    answers: dict[str, Any]
    model: str


# State digests in, the hits of those the cache knows out (`pipeline.cache.JobCache.lookup`).
Lookup = Callable[[Sequence[bytes]], Mapping[bytes, CacheHit]]


@dataclass(frozen=True, slots=True)
class Decision:
    """A row's fate. `state_hash` is the `state_key` of a valid state; `key` is the same digest
    when the state occurs more than once in the corpus (it is shared), else None. `hit` holds
    the answers from the cache (all of them when CACHED, some when SEND: `requests` then ask
    the others); `saved_tokens` is what those would have cost, by the plan's estimate."""

    fate: Fate
    state_hash: bytes | None = None
    key: bytes | None = None
    requests: tuple[Request, ...] = ()
    error: str | None = None
    hit: CacheHit | None = None
    saved_tokens: int = 0


class RowClassifier:
    """Decides each row's fate, in corpus order (see the module docstring).

    `repeated` are the keys `repeated_states` found. The first row of a repeated state is
    looked up and sent (or answered from the cache); the later ones are repeats of it, unless
    its request failed (`forget`), in which case the next one is tried again. A repeated state
    over the context limit is refused every time. `lookup` is the answer cache's, or None.
    """

    def __init__(
        self, planner: Planner, repeated: set[bytes], lookup: Lookup | None = None
    ) -> None:
        self._planner = planner
        self._repeated = repeated
        self._lookup = lookup
        self._sent: set[bytes] = set()
        self._refused: dict[bytes, Decision] = {}

    def classify(self, row: Row) -> Decision:
        return self.classify_batch([row])[0]

    def classify_batch(self, rows: Sequence[Row]) -> list[Decision]:
        """The fates of `rows`, in order; the cache is asked once for all of them."""
        digests = [None if row.state is None else state_key(row.state) for row in rows]
        hits: Mapping[bytes, CacheHit] = {}
        if self._lookup is not None:
            wanted = {d for d in digests if d is not None and d not in self._sent}
            hits = self._lookup(list(wanted)) if wanted else {}
        return [
            self._classify(row, digest, hits.get(digest) if digest is not None else None)
            for row, digest in zip(rows, digests, strict=True)
        ]

    def _classify(self, row: Row, digest: bytes | None, hit: CacheHit | None) -> Decision:
        if row.state is None or digest is None:
            return Decision(Fate.INVALID, error=row.invalid or "state is empty")
        key = digest if digest in self._repeated else None
        if key is not None:
            if key in self._sent:
                return Decision(Fate.REPEAT, digest, key)
            if key in self._refused:
                return self._refused[key]
        state_tokens = count_value(row.state)
        plan = self._planner.plan_tokens(state_tokens)
        if plan.error_type is not None:
            decision = Decision(Fate.CONTEXT_LIMIT, digest, key, error=plan.error)
            if key is not None:
                self._refused[key] = decision
            return decision
        if key is not None:
            self._sent.add(key)
        if hit is None:
            return Decision(Fate.SEND, digest, key, plan.requests)
        full = sum(r.tokens for r in plan.requests)
        missing = [k for k in self._planner.keys if k not in hit.answers]
        if not missing:
            return Decision(Fate.CACHED, digest, key, hit=hit, saved_tokens=full)
        rest = self._planner.plan_tokens(state_tokens, missing).requests
        saved = full - sum(r.tokens for r in rest)
        return Decision(Fate.SEND, digest, key, rest, hit=hit, saved_tokens=saved)

    def calibrate(self, ratio: float) -> None:
        """The service's token count per token of ours, measured: plan with it from now on."""
        self._planner.calibrate(ratio)

    @property
    def scale(self) -> float:
        """The planner's token scale now (`Planner.calibrate`)."""
        return self._planner.scale

    def replan(self, state: Any, keys: Sequence[str], key: bytes | None) -> RowPlan:
        """The requests for `keys` of a state planned before the scale changed, planned again.
        A state now over the context limit is refused, and so are its later repeats."""
        plan = self._planner.plan_tokens(count_value(state), keys)
        if plan.error_type is not None and key is not None:
            self._sent.discard(key)
            self._refused[key] = Decision(Fate.CONTEXT_LIMIT, key, key, error=plan.error)
        return plan

    def forget(self, key: bytes) -> None:
        """The request of a repeated state failed: its next occurrence is sent again."""
        self._sent.discard(key)
