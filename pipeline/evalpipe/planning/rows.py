"""What becomes of each row, decided in one place for `evalpipe plan` and `evalpipe run`.

Both commands walk the corpus through one `RowClassifier`, so the estimate and the run cannot
disagree about a row's fate (`Fate`):

    invalid_state   the state is null or blank: an error row, never sent
    context_limit   the state plus its longest question is over the context limit, or the state
                    is larger in bytes than any context holds: never sent
    repeat          an identical state was sent earlier in the corpus: its answer is reused
                    (or waited for, while its request is in flight)
    cached          the answer cache (`evalpipe.cache`) holds every question's answer
    send            one request with every question not in the cache, or several when the
                    state plus those questions is over the total limit (`Planner` groups them)

Rows are classified a batch at a time, so the cache is asked once per batch, not once per row.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from evalpipe.contract import count_value
from evalpipe.errors import CONTEXT_LIMIT, INVALID_STATE
from evalpipe.planning.counts import plain_counts
from evalpipe.planning.repeats import state_key
from evalpipe.planning.requests import Planner, Request, RowPlan

if TYPE_CHECKING:
    from evalpipe.input import Row


class Fate(enum.Enum):
    INVALID = INVALID_STATE
    CONTEXT_LIMIT = CONTEXT_LIMIT
    REPEAT = "repeat"
    CACHED = "cached"
    SEND = "send"


@dataclass(frozen=True, slots=True)
class CacheHit:
    """Answers the cache holds for one state: question key -> answer (dicts, or a mapping that
    reads as them: `evalpipe.output.ArrowAnswers`), and the model(s) that gave them
    ("+"-joined, as for a split row)."""

    answers: Mapping[str, Any]
    model: str


# State digests in, the hits of those the cache knows out
# (`evalpipe.cache.answers.JobCache.lookup`).
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
        """The fates of `rows`, in order; the cache is asked once for all of them, and the
        plain text states are counted together (`plain_counts`)."""
        states = [row.state for row in rows]
        digests = [None if state is None else state_key(state) for state in states]
        hits: Mapping[bytes, CacheHit] = {}
        if self._lookup is not None:
            wanted = {d for d in digests if d is not None and d not in self._sent}
            hits = self._lookup(list(wanted)) if wanted else {}
        # A state too large in bytes is refused uncounted (a count of 100 MB takes seconds).
        oversized = self._planner.oversized
        too_large = [None if state is None else oversized(state) for state in states]
        counts = plain_counts(
            [None if big else s for s, big in zip(states, too_large, strict=True)]
        )
        return [
            self._classify(row, digest, hits.get(digest) if digest is not None else None, n, big)
            for row, digest, n, big in zip(rows, digests, counts, too_large, strict=True)
        ]

    def _classify(
        self,
        row: Row,
        digest: bytes | None,
        hit: CacheHit | None,
        tokens: int | None,
        oversized: RowPlan | None = None,
    ) -> Decision:
        if row.state is None or digest is None:
            return Decision(Fate.INVALID, error=row.invalid or "state is empty")
        key = digest if digest in self._repeated else None
        if key is not None:
            if key in self._sent:
                return Decision(Fate.REPEAT, digest, key)
            if key in self._refused:
                return self._refused[key]
        state_tokens = 0 if oversized else count_value(row.state) if tokens is None else tokens
        plan = oversized or self._planner.plan_tokens(state_tokens)
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
