"""Identical states, found once: the dedup key, the repeats of a corpus, and stale rows.

A repeated state is found by its `state_key`, a digest of its canonical JSON; `repeated_states`
is the streaming pass that finds the keys occurring more than once, holding one digest per
distinct state and never a state; `survey` does the same pass and also finds the committed rows
of an output whose state changed since (stale: scored again).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc

from evalpipe.contract import canonical
from evalpipe.output import stale_ids, state_hashes

if TYPE_CHECKING:
    from evalpipe.input import Source

_MERGE_EVERY = 1 << 20  # new digests buffered before they are merged into the sorted ones
_STALE_EVERY = 1 << 18  # source rows compared with the committed ones at a time


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
