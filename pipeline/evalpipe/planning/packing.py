"""Rows packed into one request: which rows share a request, by one rule for plan and run.

One request carries one state and its questions; the service's contract lets that state be an
object whose fields each hold a row, and a question point at one field by its name in
backticks. So k rows can share a request: the state is `{"0": row0, "1": row1, ...}` (a row
whose state is already an object is nested whole), and each row is asked each of its questions
once, under the key `"1:helpful"`, with the pointer leading the question's own instructions:
`"`1`: Does the review help?"` (a string, or an array's first item; instructions that are an
object go as `["`1`", {...}]`). The service answers the question about that field alone
(`evalpipe.service.evaluator` does, as the reference); the answers go back to their rows by key
(`evalpipe.send.packs`).

A pack is as lean as the contract allows, because tokens, not requests, are what a packed run
spends: what a packed row costs beyond its request alone is its field's name, the JSON around
it (quotes, a colon, a comma, and the escapes of its newlines and quotes, which a tokenizer that
reads JSON counts and no form of the request avoids), and the pointer, 4 tokens a question. The
field names are the shortest that no question names in backticks (`field_prefix`: the rows'
positions, unless a question names such a field), and nothing else is repeated.

A pack must stay within the service's limits, by its count (our count times the kept ratio, as
`Planner` plans rows): the state plus every question under 64k tokens, the state plus the
longest question under 32k, and no more questions than the service accepts per request (not
published: learned from a 422 that names `questions`, and kept per service and model, like the
token ratio, in `packing.json` beside it). `Packer.groups` fills packs in the order rows come,
up to `rows` each; a row that does not fit with others goes alone.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from evalpipe.contract import context_violation, count_text
from evalpipe.planning.kept import kept
from evalpipe.planning.requests import Request

if TYPE_CHECKING:
    from evalpipe.planning.prepared import PreparedJob
    from evalpipe.tier import TierAddress

FILE_NAME = "packing.json"
POINTER = "`{field}`: "  # leads a question's instructions: ask it of that field of the pack
_PREFIXES = ("", "r", "row", "rp", "packed_row")  # field names: prefix + position in the pack
_NAMED = re.compile(r"`([^`\n]+)`")  # a name in backticks, as the service reads a pointer


def pointer(field: str) -> str:
    return POINTER.format(field=field)


def field_prefix(questions: Mapping[str, Mapping[str, Any]]) -> str:
    """The shortest prefix of the pack's field names (the prefix, then the row's position)
    whose names no question names in backticks: a question of a row with an object state may
    point at the row's own fields, and must never be taken to point at another row."""
    named = {name for text in _strings(questions) for name in _NAMED.findall(text)}
    for prefix in _PREFIXES:
        if not any(n.startswith(prefix) and n[len(prefix) :].isdigit() for n in named):
            return prefix
    return "evalpipe_packed_row"


def _strings(value: Any) -> Iterator[str]:
    """Every string in a JSON value, keys included."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, Mapping):
        for key, item in value.items():
            yield str(key)
            yield from _strings(item)
    elif isinstance(value, list | tuple):
        for item in value:
            yield from _strings(item)


def packed_question(question: Mapping[str, Any], field: str) -> dict[str, Any]:
    """`question` asked about the pack's field `field` alone: the pointer leads its
    instructions (a string, or an array's first string), else goes before them in an array."""
    instructions = question["instructions"]
    if isinstance(instructions, str):
        led: Any = pointer(field) + instructions
    elif isinstance(instructions, list) and instructions and isinstance(instructions[0], str):
        led = [pointer(field) + instructions[0], *instructions[1:]]
    else:  # an object, or an array led by one: the service unwraps the lone rest
        led = [f"`{field}`", instructions]
    return {**question, "instructions": led}


@dataclass(frozen=True)
class PackPlan:
    """Rows sharing one request: their positions in what was given, and the request's tokens
    by our count (the state's, and every question's)."""

    members: tuple[int, ...]
    state_tokens: int
    question_tokens: int
    shares: tuple[int, ...]  # each member's part of `tokens` (its state and questions)

    @property
    def tokens(self) -> int:
        return self.state_tokens + self.question_tokens


class Packer:
    """Groups rows' requests into packs of at most `rows`, within the limits (module docstring).

    `question_tokens` is the planner's count of each question; `scale` the service's count
    per token of ours, with the planner's margin (`Planner.scale`); `max_questions` the most
    questions per request the service accepts, once learned (None: not known)."""

    def __init__(
        self,
        question_tokens: Mapping[str, int],
        prefix: str,
        rows: int,
        max_questions: int | None = None,
    ) -> None:
        self.question_tokens = question_tokens
        self.prefix = prefix
        self.rows = rows
        self.max_questions = max_questions
        self.scale = 1.0
        self._refused: int | None = None  # the fewest questions the service refused
        self._accepted = 0  # the most it answered below that
        self._pointer = [count_text(pointer(self.field(i))) for i in range(rows)]
        # A row in the pack's state, by evalpipe's count of the JSON sent: its field's name in
        # quotes, a colon, the row (a string in quotes, or an object), a comma.
        self._field = [count_text(f'"{self.field(i)}":"",') for i in range(rows)]

    @classmethod
    def of(cls, prepared: PreparedJob, rows: int, max_questions: int | None) -> Packer:
        """A packer for a prepared job's questions, planning by its planner's scale now."""
        packer = cls(
            prepared.planner.question_tokens, field_prefix(prepared.questions), rows, max_questions
        )
        packer.scale = prepared.planner.scale
        return packer

    def field(self, position: int) -> str:
        return f"{self.prefix}{position}"

    def fits(self, state_tokens: int, questions: Sequence[int]) -> bool:
        """Do a state and questions of these sizes fit the limits, by the service's count?"""
        if self.max_questions is not None and len(questions) > self.max_questions:
            return False
        scaled = {str(i): math.ceil(t * self.scale) for i, t in enumerate(questions)}
        return context_violation(math.ceil(state_tokens * self.scale), scaled) is None

    def groups(self, requests: Sequence[Request]) -> list[PackPlan]:
        """`requests` (one per row, in order) in packs: each row joins the open pack while
        it fits there and the pack holds fewer than `rows`; else the pack is closed and the
        row opens the next. A pack of one is a row sent alone."""
        packs: list[PackPlan] = []
        members: list[int] = []
        shares: list[int] = []
        state = 0
        questions: list[int] = []

        def close() -> None:
            packs.append(PackPlan(tuple(members), state, sum(questions), tuple(shares)))

        for i, request in enumerate(requests):
            more_state, more_questions = self._cost(len(members), request)
            if members and (
                len(members) >= self.rows
                or not self.fits(state + more_state, questions + more_questions)
            ):
                close()
                members, shares, state, questions = [], [], 0, []
                more_state, more_questions = self._cost(0, request)
            members.append(i)
            shares.append(more_state + sum(more_questions))
            state += more_state
            questions += more_questions
        if members:
            close()
        return packs

    def one(self, requests: Sequence[Request]) -> PackPlan:
        """`requests` as one pack, counted as `groups` counts a pack (whether it fits or not:
        the packing measurement's packs are its sample's first rows)."""
        costs = [self._cost(i, request) for i, request in enumerate(requests)]
        state, questions = sum(c[0] for c in costs), sum(sum(c[1]) for c in costs)
        shares = tuple(c[0] + sum(c[1]) for c in costs)
        return PackPlan(tuple(range(len(requests))), state, questions, shares)

    def _cost(self, position: int, request: Request) -> tuple[int, list[int]]:
        pointer_tokens = self._pointer[min(position, self.rows - 1)]
        state = request.state_tokens + self._field[min(position, self.rows - 1)]
        return state, [self.question_tokens[k] + pointer_tokens for k in request.keys]

    def learn(self, refused: int, accepted: int) -> None:
        """A pack's request of `refused` questions was refused as too many (0: none was), and
        its halves' largest answered request asked `accepted`: from now on, pack at most the
        largest count answered below the smallest refused (halving finds it in a few steps)."""
        if refused:
            self._refused = min(self._refused or refused, refused)
        if accepted and (self._refused is None or accepted < self._refused):
            self._accepted = max(self._accepted, accepted)
        if self._refused is not None:
            cap = self._accepted or max(1, self._refused // 2)
            self.max_questions = cap if self.max_questions is None else min(self.max_questions, cap)


# --------------------------------------------------------------------------- kept measurements


@dataclass(frozen=True)
class KnownPacking:
    """What was measured of packing on a service and model: the most questions per request it
    accepts, and the last agreement measurement (`evalpipe.preflight.choice`) as it was shown."""

    max_questions: int | None
    measurement: dict[str, Any] | None
    source: str
    measured_at: str


def known_packing(
    service: str, model: str, root: Path | None = None, tier: TierAddress | None = None
) -> KnownPacking | None:
    """What is kept for (service, model), if anything (in the shared `tier` when there is one).
    Advice: a bad file is nothing kept."""
    entry = kept(FILE_NAME, root, tier).entry(service, model)
    if entry is None:
        return None
    cap = entry.get("max_questions")
    measured = entry.get("measurement")
    return KnownPacking(
        cap if isinstance(cap, int) and cap > 0 else None,
        measured if isinstance(measured, dict) else None,
        str(entry.get("source", "")),
        str(entry.get("at", "")),
    )


def keep_packing(
    service: str,
    model: str,
    source: str,
    *,
    max_questions: int | None = None,
    measurement: dict[str, Any] | None = None,
    root: Path | None = None,
    tier: TierAddress | None = None,
) -> None:
    """Keep what was learned for (service, model), the rest of its entry as it was; written
    whole (a temporary file renamed). Failing to write is silent."""
    where = kept(FILE_NAME, root, tier)
    entry = dict(where.entry(service, model) or {})
    if max_questions is not None:
        entry["max_questions"] = max_questions
    if measurement is not None:
        entry["measurement"] = measurement
    where.keep(service, model, {**entry, "source": source})
