"""The reference evaluator: deterministic, content-sensitive answers without a model.

The embedded service answers with this so a pipeline can be run end to end offline. Its answers
are not judgements, but they behave like a model's in the ways a pipeline can observe:

- deterministic in every process (blake2b of the text, never Python's salted `hash()`);
- content-sensitive: word and bigram overlap between the state and each option's text;
- well-formed: distributions sum to 1, `choice` is the argmax, confidence is
  `(n * p_max - 1) / (n - 1)`;
- versioned: a newer version (`models.REVISED`) answers a known share of states anew.

Each option's text (instructions + option key + rubric, or instructions + level description)
is scored by its overlap with the state, normalised by its size, plus a small per-(state, option)
hash jitter so ties break; a softmax turns the scores into probabilities. A noul answer is a
sigmoid of the overlap with `criteria.true` (or, without it, the instructions) minus the overlap
with `criteria.false` (or, without it, a fixed baseline), plus the jitter.

A question may point at a top-level field of an object state (the contract: "the question
text refers to a data field by its name in backticks"): its instructions (or their first item)
begin with "`r1`: ", or one string item of an instructions array names exactly one field in
backticks. It is answered against that field's value alone, as the rest of its instructions
(`pointed`, `answer_request`): a pack's answer for a row is the row's answer alone
(`evalpipe.planning.packing`). A share of such answers can be swayed by the rest of the state
(`sway`), so that a job's agreement check has something to find.

Input is a request that passed `evalpipe.contract.resources.validate_request` (plain JSON
values); `compile_questions` does the per-question work once, for the next row too.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from hashlib import blake2b
from itertools import pairwise
from typing import Any

from evalpipe.contract import dumps
from evalpipe.service.models import CURRENT_VERSION, REVISED
from evalpipe.service.rehearsal import Rehearsal

PLAIN = Rehearsal()  # the service as it is: nothing rehearsed

SIMILARITY_WEIGHT = 2.0  # logit per unit of normalised overlap
JITTER_WEIGHT = 0.6  # logit spread of the tie-breaking hash, in [0, JITTER_WEIGHT)
NOUL_BASELINE = 0.5  # overlap the instructions must beat for a yes, when no `false` is given
_BIGRAM_WEIGHT = 2.0  # a shared bigram says more than a shared word
_MASK64 = 2**64 - 1
_ODD64 = 0x9E3779B97F4A7C15  # 2**64 / golden ratio, odd: multiplying by it is a bijection

_WORD = re.compile(r"\w+")
# Words too common to say anything about content.
_STOP_WORDS = """
a an and are as at be been but by do does for from had has have he her his i if in is it its me
my no not of on or our she so that the their them there they this to was we were what which who
will with you your
"""
_STOP = frozenset(_STOP_WORDS.split())


# --------------------------------------------------------------------------- text


def flatten(value: Any) -> str:
    """A JSON value as plain text: strings as they are, object keys and values, array items."""
    if isinstance(value, str):
        return value
    parts: list[str] = []
    stack = [value]  # iterative, so deeply nested states cannot exhaust the recursion limit
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            parts.append(item)
        elif isinstance(item, dict):
            for key, child in reversed(item.items()):
                stack.append(child)
                stack.append(str(key))
        elif isinstance(item, list):
            stack.extend(reversed(item))
        elif isinstance(item, bool):
            parts.append("true" if item else "false")
        elif item is not None:
            parts.append(str(item))
    return "\n".join(parts)


def json_text(value: Any) -> str:
    """A value as a string: strings unchanged, anything else as compact JSON."""
    return value if isinstance(value, str) else dumps(value).decode()


def _digest(text: str, size: int) -> bytes:
    # surrogatepass: a JSON string may hold a lone surrogate, which strict UTF-8 refuses.
    return blake2b(text.encode("utf-8", "surrogatepass"), digest_size=size).digest()


def _seed(text: str) -> int:
    return int.from_bytes(_digest(text, 8), "big")


def _content_words(text: str) -> list[str]:
    return [w for w in _WORD.findall(text.lower()) if w not in _STOP]


def _bigrams(words: list[str]) -> set[tuple[str, str]]:
    return set(pairwise(words))


@dataclass(frozen=True, slots=True)
class Profile:
    """What the evaluator knows of one option's text: its words, bigrams, size and hash."""

    words: frozenset[str]
    bigrams: frozenset[tuple[str, str]]
    norm: float
    seed: int

    @classmethod
    def of(cls, text: str) -> Profile:
        words = _content_words(text)
        unique, pairs = frozenset(words), frozenset(_bigrams(words))
        norm = math.sqrt(len(unique) + len(pairs) + 1)
        return cls(unique, pairs, norm, _seed(text))


class StateView:
    """The state's words, bigrams and hash key, computed once per request."""

    def __init__(self, state: Any) -> None:
        text = flatten(state)
        words = _content_words(text)
        self.words = set(words)
        self.bigrams = _bigrams(words)
        self._key = _seed(text)

    def similarity(self, profile: Profile) -> float:
        shared = len(profile.words & self.words) + _BIGRAM_WEIGHT * len(
            profile.bigrams & self.bigrams
        )
        return shared / profile.norm

    def jitter(self, seed: int) -> float:
        """A uniform number in [0, 1) fixed by this state and `seed` (both blake2b hashes)."""
        # Both are uniform 64-bit hashes, so their xor is too; the odd multiplier stirs it so
        # options of one state do not keep the order of their seeds. A keyed blake2b per option
        # would cost several times more, for every option of every request.
        return (((self._key ^ seed) * _ODD64) & _MASK64) / 2**64

    def logit(self, profile: Profile) -> float:
        """An option's score: its overlap with the state plus the tie-breaking jitter."""
        shared: float = len(profile.words & self.words)
        shared += _BIGRAM_WEIGHT * len(profile.bigrams & self.bigrams)
        jitter = (((self._key ^ profile.seed) * _ODD64) & _MASK64) / 2**64  # as `jitter`, inline
        return SIMILARITY_WEIGHT * shared / profile.norm + JITTER_WEIGHT * jitter


# --------------------------------------------------------------------------- questions


@dataclass(frozen=True, slots=True)
class _Noul:
    yes: Profile
    no: Profile | None
    seed: int  # of the whole question, so the instructions move the jitter too


@dataclass(frozen=True, slots=True)
class _Options:
    kind: str  # "choice" or "score"
    keys: tuple[str, ...]
    profiles: tuple[Profile, ...]
    legend: dict[str, str] | None


Compiled = tuple[tuple[str, "_Noul | _Options"], ...]


def compile_questions(questions: Mapping[str, Mapping[str, Any]]) -> Compiled:
    """What the evaluator needs of a questions map, prepared once; callers may keep it, since a
    batch job sends the same questions with every row."""
    return tuple((key, _compile(question)) for key, question in questions.items())


def _compile(question: Mapping[str, Any]) -> _Noul | _Options:
    instructions = flatten(question["instructions"])
    criteria: Any = question.get("criteria")  # validated: a mapping or list for its type
    kind = question["type"]
    if kind == "noul":
        criteria = criteria or {}
        true, false = criteria.get("true"), criteria.get("false")
        yes = Profile.of(flatten(true)) if true is not None else Profile.of(instructions)
        no = Profile.of(flatten(false)) if false is not None else None
        return _Noul(yes, no, _seed(json_text(question)))
    if kind == "choice":
        keys = tuple(criteria)
        texts = [f"{instructions}\n{k}\n{flatten(v)}" for k, v in criteria.items()]
        legend = None
    else:
        keys = tuple(str(i) for i in range(len(criteria)))
        texts = [f"{instructions}\n{flatten(level)}" for level in criteria]
        legend = {k: json_text(level) for k, level in zip(keys, criteria, strict=True)}
    return _Options(kind, keys, tuple(map(Profile.of, texts)), legend)


# --------------------------------------------------------------------------- answers


def softmax(logits: list[float]) -> list[float]:
    top = max(logits)
    exps = [math.exp(x - top) for x in logits]
    total = math.fsum(exps)
    return [e / total for e in exps]


def confidence(p_max: float, n: int) -> float:
    """How concentrated a distribution is: 0 for uniform, 1 for certain."""
    if n <= 1:
        return 1.0
    return min(1.0, max(0.0, (n * p_max - 1) / (n - 1)))


def _noul_answer(state: StateView, q: _Noul) -> dict[str, Any]:
    against = state.similarity(q.no) if q.no is not None else NOUL_BASELINE
    logit = SIMILARITY_WEIGHT * (state.similarity(q.yes) - against)
    logit += JITTER_WEIGHT * (state.jitter(q.seed) - 0.5)
    logit = min(500.0, max(-500.0, logit))  # huge texts: keep exp() finite
    return {"type": "noul", "noul": 1.0 / (1.0 + math.exp(-logit))}


def _options_answer(state: StateView, q: _Options) -> dict[str, Any]:
    logits = [state.logit(p) for p in q.profiles]
    probs = softmax(logits)
    best = logits.index(max(logits))  # the largest logit has the largest probability
    result: dict[str, Any] = {"type": q.kind}
    if q.kind == "choice":
        result["choice"] = q.keys[best]
    else:
        result["score"] = math.fsum([i * p for i, p in enumerate(probs)])
        result["legend"] = q.legend
    result["probabilities"] = dict(zip(q.keys, probs, strict=True))
    result["confidence"] = confidence(probs[best], len(probs))
    return result


def revised(state: Any, model: str) -> bool:
    """Does `model` answer this state anew (`models.REVISED`)? A fixed share of states, drawn
    by a hash of the state's text, so a test knows exactly which rows a newer version changes."""
    share = REVISED.get(model, 0.0)
    return share > 0 and _seed(f"revised\n{flatten(state)}") / 2**64 < share


def _turned(result: dict[str, Any], compiled: _Noul | _Options) -> dict[str, Any]:
    """A revised answer: p(yes) becomes p(no); a distribution moves one option or level on
    (its argmax changes whenever it has one: the choice and the most probable level flip)."""
    if isinstance(compiled, _Noul):
        return {"type": "noul", "noul": 1.0 - result["noul"]}
    probs = list(result["probabilities"].values())
    moved = probs[-1:] + probs[:-1]
    turned = dict(result, probabilities=dict(zip(compiled.keys, moved, strict=True)))
    best = moved.index(max(moved))
    if compiled.kind == "choice":
        turned["choice"] = compiled.keys[best]
    else:
        turned["score"] = math.fsum([i * p for i, p in enumerate(moved)])
    return turned


def answer(
    state: Any, compiled: Compiled, model: str = CURRENT_VERSION, rehearsal: Rehearsal = PLAIN
) -> dict[str, Any]:
    """Answers of `model` for a state and compiled questions, under the questions' keys, as
    the service's `rehearsal` settings report them (`evalpipe.service.rehearsal`)."""
    view = StateView(state)
    answers = {
        key: _noul_answer(view, q) if isinstance(q, _Noul) else _options_answer(view, q)
        for key, q in compiled
    }
    if revised(state, model) or rehearsal.drifts(state):
        answers = {key: _turned(answers[key], q) for key, q in compiled}
    return rehearsal.reported(answers)


def evaluate(state: Any, questions: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """Answers for a validated request's state and questions, under the questions' keys."""
    return answer(state, compile_questions(questions))


# --------------------------------------------------------------------------- pointers

_REFERENCE = re.compile(r"`([^`\n]+)`")
_LEADING = re.compile(r"`([^`\n]+)`: ")  # a field named first, then what to ask of it


def pointed(state: Any, question: Mapping[str, Any]) -> tuple[str, dict[str, Any]] | None:
    """(the field, the question without its pointer) when `question` points at a top-level
    field of the object `state` (the module docstring), else None."""
    instructions = question.get("instructions")
    if not isinstance(state, dict):
        return None
    led = _led(state, instructions)
    if led is not None:
        return led[0], {**question, "instructions": led[1]}
    if not isinstance(instructions, list) or len(instructions) < 2:
        return None
    for i, item in enumerate(instructions):
        if not isinstance(item, str):
            continue
        names = _REFERENCE.findall(item)
        if len(names) == 1 and names[0] in state:
            rest = instructions[:i] + instructions[i + 1 :]
            return names[0], {**question, "instructions": rest[0] if len(rest) == 1 else rest}
    return None


def _led(state: dict[str, Any], instructions: Any) -> tuple[str, Any] | None:
    """(the field, the instructions without it) when the instructions, or their first item,
    begin with a top-level field of `state` in backticks and a colon: "`r1`: Is it kind?"."""
    first = instructions[0] if isinstance(instructions, list) and instructions else instructions
    if not isinstance(first, str):
        return None
    match = _LEADING.match(first)
    if match is None or match.group(1) not in state:
        return None
    rest = first[match.end() :]
    return match.group(1), [rest, *instructions[1:]] if isinstance(instructions, list) else rest


def swayed(whole: Any, field: str, question: Mapping[str, Any], share: float) -> bool:
    """Is this pointed answer swayed by the rest of the state? A fixed share of (field value,
    question) pairs, drawn by a hash, and only when the state holds other fields."""
    if share <= 0 or len(whole) < 2:
        return False
    drawn = _seed(f"sway\n{flatten(whole[field])}\n{json_text(question)}") / 2**64
    return drawn < share


class PointedQuestions:
    """Compiled questions by their JSON, for questions met once their pointer is taken out (a
    packed request asks a job's few questions about many rows)."""

    def __init__(self, size: int = 4096) -> None:
        self._items: dict[bytes, _Noul | _Options] = {}
        self._size = size

    def compiled(self, question: Mapping[str, Any]) -> _Noul | _Options:
        key = dumps(question)
        found = self._items.get(key)
        if found is None:
            if len(self._items) >= self._size:
                self._items.clear()
            found = self._items[key] = _compile(question)
        return found


def _resolve(
    state: Any, question: Mapping[str, Any], sway: float
) -> tuple[tuple[str, ...], Any, Mapping[str, Any]]:
    """(path followed, the state answered against, the question asked) of one question."""
    path: list[str] = []
    while (found := pointed(state, question)) is not None:
        field, question = found
        if swayed(state, field, question, sway):
            return (*path, ""), state, question  # answered against the whole: its neighbours
        path.append(field)
        state = state[field]
    return tuple(path), state, question


def answer_request(
    state: Any,
    questions: Mapping[str, Mapping[str, Any]],
    compiled: Compiled,
    model: str = CURRENT_VERSION,
    sway: float = 0.0,
    cache: PointedQuestions | None = None,
    rehearsal: Rehearsal = PLAIN,
) -> dict[str, Any]:
    """Answers for a validated request, its pointers followed (the module docstring); `compiled`
    is `compile_questions(questions)`, used as it is when nothing points; a row packed in it is
    rehearsed as it would be alone."""
    if not isinstance(state, dict) or not any(
        isinstance(i := q.get("instructions"), list) or (isinstance(i, str) and i[:1] == "`")
        for q in questions.values()
    ):
        return answer(state, compiled, model, rehearsal)
    cache = cache or PointedQuestions()
    groups: dict[tuple[str, ...], tuple[Any, list[tuple[str, _Noul | _Options]]]] = {}
    for (key, plain), question in zip(compiled, questions.values(), strict=True):
        path, target, asked = _resolve(state, question, sway)
        if not path:
            groups.setdefault(path, (state, []))[1].append((key, plain))
            continue
        groups.setdefault(path, (target, []))[1].append((key, cache.compiled(asked)))
    answers: dict[str, Any] = {}
    for target, items in groups.values():
        answers.update(answer(target, tuple(items), model, rehearsal))
    return {key: answers[key] for key in questions}
