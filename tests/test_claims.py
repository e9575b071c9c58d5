"""States another host is paying for (evalpipe.engine.claims): parked, then finished from the
cache once answered, or sent once the other's claim lapsed; this host's claims renewed.

The cache here is a stand-in for the shared tier's (what it claims and holds is a set): the
tier's own claims are shown against a real redis-server in tests/test_tier.py, and two real
hosts paying each state once in tests/test_tier_hosts.py."""

from __future__ import annotations

from typing import Any

import pytest

from evalpipe.engine import claims
from evalpipe.engine.claims import Parked
from evalpipe.engine.sending import Pending
from evalpipe.planning import CacheHit, Request
from evalpipe.send import StateJob


class Claims:
    """What the shared tier holds: the states another host claimed, and the answers."""

    def __init__(self) -> None:
        self.elsewhere: set[bytes] = set()
        self.answers: dict[bytes, CacheHit] = {}
        self.renewed: list[list[bytes]] = []
        self.claim_seconds = 15.0

    def claim(self, states: list[bytes]) -> set[bytes]:
        self.renewed.append(list(states))
        return {s for s in states if s in self.elsewhere}

    def lookup(self, states: Any) -> dict[bytes, CacheHit]:
        return {s: self.answers[s] for s in states if s in self.answers}


def pending(n: int, keys: tuple[str, ...] = ("a", "b")) -> Pending:
    state = bytes([n]) * 16
    return Pending(StateJob(n, f"state {n}", (Request(keys, 10, 5),)), [], None, state)


@pytest.fixture(autouse=True)
def _at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(claims, "RECHECK_SECONDS", 0.0)


def test_states_another_host_claimed_are_parked_then_answered_or_sent() -> None:
    tier = Claims()
    parked = Parked(tier)  # type: ignore[arg-type]
    mine, theirs, lapsing = pending(1), pending(2), pending(3)
    tier.elsewhere = {theirs.state_hash, lapsing.state_hash}
    assert parked.claim([mine, theirs, lapsing]) == [mine]
    assert len(parked) == 2
    # Nothing changed yet: still parked.
    assert parked.recheck(tier.lookup, [mine]) == ([], [])
    # The other host answered one (in full) and its claim on the other lapsed.
    tier.answers[theirs.state_hash] = CacheHit({"a": {}, "b": {}}, "model-1.13.0")
    tier.elsewhere = set()
    answered, lapsed = parked.recheck(tier.lookup, [mine])
    assert [p for p, _ in answered] == [theirs] and lapsed == [lapsing]
    assert len(parked) == 0


def test_an_answer_in_part_keeps_the_state_parked() -> None:
    tier = Claims()
    parked = Parked(tier)  # type: ignore[arg-type]
    theirs = pending(4)
    tier.elsewhere = {theirs.state_hash}
    parked.claim([theirs])
    tier.answers[theirs.state_hash] = CacheHit({"a": {}}, "model-1.13.0")  # "b" not yet
    assert parked.recheck(tier.lookup, []) == ([], [])
    assert parked.drop() == [theirs] and len(parked) == 0


def test_this_hosts_claims_in_hand_are_renewed_every_third_of_their_length() -> None:
    tier = Claims()
    parked = Parked(tier)  # type: ignore[arg-type]
    mine = pending(5)
    parked.recheck(tier.lookup, [mine])
    assert tier.renewed == [[mine.state_hash]]
    parked.recheck(tier.lookup, [mine])  # a moment later: not a third of 15 s
    assert len(tier.renewed) == 1
    tier.claim_seconds = 0.0  # claims as short as can be: renewed at each recheck
    parked.recheck(tier.lookup, [mine])
    assert tier.renewed == [[mine.state_hash]] * 2


def test_without_a_shared_tier_nothing_is_parked() -> None:
    parked = Parked(None)
    fresh = [pending(6), pending(7)]
    assert parked.claim(fresh) == fresh
    assert parked.recheck(lambda states: {}, fresh) == ([], [])
