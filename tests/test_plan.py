"""Token counting, the context limits, splitting, repeated states and the row classifier."""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from evalpipe.config import parse_config
from evalpipe.contract.tokens import (
    CONTEXT_LIMIT,
    QUESTION_CONTEXT_LIMIT,
    context_violation,
    count_question,
    count_questions,
    count_text,
    count_value,
)
from evalpipe.input.source import Row, Source, SourceSpec
from evalpipe.output.table import state_hashes
from evalpipe.planning import (
    CacheHit,
    Fate,
    Planner,
    Request,
    RowClassifier,
    minimum_seconds,
    price_of,
    repeated_states,
    repeats as plan_module,
    split_refused,
    state_key,
    survey,
)


def request_tokens(state: Any, questions: dict[str, Any]) -> int:
    return count_value(state) + sum(count_questions(questions).values())


def test_tokens_are_words_and_punctuation() -> None:
    assert count_text("Hello, world!") == 4
    assert count_text("") == 0
    assert count_text("café naïve 東京") == 3


def test_a_batch_of_plain_states_is_counted_as_the_contract_counts_each() -> None:
    import random

    from evalpipe.planning.counts import plain_counts

    edges = [
        "", " ", "Hello, world!", "snake_case_word __init__", "a\tb\nc\rd\x0ce", "x_1 = y[2]{3}",
        "".join(chr(c) for c in range(32, 127)), "line\vtab", "unit\x1fsep", "nbsp\xa0here",
        "café naïve 東京", "e\u0301t\u00e9", "½ ² ٣", "ﬁx", "a\u2028b",
    ]  # fmt: skip
    plain_alphabet = [*map(chr, range(32, 127)), "\t", "\n", "\r", "\x0c"]
    mixed = [*map(chr, range(0, 128)), "é", "\u0301", "\xa0", "²", "東", "\u200b", "_"]
    rng = random.Random(7)
    texts = edges + [
        "".join(rng.choices(alphabet, k=rng.randint(0, 40)))
        for alphabet in (plain_alphabet, mixed)
        for _ in range(1500)
    ]
    counts = plain_counts([*texts, {"text": "an object"}, None, 7])
    plain = [n for n in counts if n is not None]
    assert len(plain) > 1500  # the plain ones (and some mixed ones) are counted here
    assert counts[-3:] == [None, None, None]  # not strings: left to count_value
    for text, n in zip(texts, counts, strict=False):
        assert n is None or n == count_text(text), repr(text)
    for text in ("Hello, world!", "snake_case_word __init__", "a\tb\nc\rd\x0ce", edges[6]):
        assert plain_counts([text]) == [count_text(text)]
    for text in ("line\vtab", "unit\x1fsep", "café naïve 東京", "e\u0301t\u00e9"):
        assert plain_counts([text]) == [None]  # Python's \s or \w differ there: not plain


def test_values_count_keys_and_scalars() -> None:
    assert count_value({"rating": 5, "text": "good stuff"}) == 1 + 1 + 1 + 2
    assert count_value(["a b", None, True]) == 4


def test_question_keys_are_not_counted_but_options_are() -> None:
    noul = {"type": "noul", "instructions": "Is it good?", "criteria": {"true": "yes it is"}}
    assert count_question(noul) == 4 + 3
    choice = {"type": "choice", "instructions": "Pick", "criteria": {"red": None, "blue": "sky"}}
    assert count_question(choice) == 1 + 1 + 2
    assert request_tokens("a b", {"any-key": choice}) == request_tokens("a b", {"k": choice}) == 6


def test_context_violation_edges() -> None:
    assert context_violation(QUESTION_CONTEXT_LIMIT - 10, {"q": 10}) is None
    assert "longest question ('q')" in context_violation(QUESTION_CONTEXT_LIMIT - 10, {"q": 11})
    quarter = CONTEXT_LIMIT // 4
    assert context_violation(quarter, {"a": quarter, "b": quarter, "c": quarter}) is None
    four = {k: 13_500 for k in "abcd"}  # each fits with the state; all four do not
    assert context_violation(CONTEXT_LIMIT - 4 * 13_500, four) is None
    assert "all questions" in context_violation(CONTEXT_LIMIT - 4 * 13_500 + 1, four)
    # both limits broken: the one no split can mend is named
    assert "longest question" in context_violation(quarter, {"a": quarter + 1, "b": 3 * quarter})


def question(words: int) -> dict:
    return {"type": "noul", "instructions": " ".join(["word"] * words)}


def test_a_row_that_fits_is_one_request_with_every_question() -> None:
    planner = Planner({"a": question(10), "b": question(20)})
    plan = planner.plan("one two three")
    assert plan.error_type is None
    assert [(r.keys, r.tokens) for r in plan.requests] == [(("a", "b"), 33)]


def test_an_over_long_row_is_split_so_every_request_fits() -> None:
    questions = {k: question(15_000) for k in "abcde"}
    planner = Planner(questions)
    state = " ".join(["w"] * 10_000)
    plan = planner.plan(state)
    assert plan.error_type is None
    assert len(plan.requests) == 2  # 10k + 5 x 15k > 64k; 10k + 3 x 15k fits
    assert sorted(k for r in plan.requests for k in r.keys) == list("abcde")
    for r in plan.requests:
        assert context_violation(10_000, {k: 15_000 for k in r.keys}) is None
        assert r.tokens == 10_000 + 15_000 * len(r.keys)


def test_a_state_that_cannot_fit_one_question_is_a_context_limit_error() -> None:
    planner = Planner({"small": question(5), "big": question(3_000)})
    plan = planner.plan(" ".join(["w"] * 29_500))
    assert plan.requests == ()
    assert plan.error_type == "context_limit"
    assert "'big'" in plan.error


@pytest.mark.parametrize(("requests", "tokens", "expected"), [(1200, 10, 60.0), (10, 500_000, 2.0)])
def test_minimum_duration_is_the_binding_limit(requests: int, tokens: int, expected: float) -> None:
    assert minimum_seconds(requests, tokens, rpm=1200, tps=250_000) == expected


def test_the_price_is_the_configs_by_model_then_default_else_unknown() -> None:
    base = {
        "input": {"path": "in.parquet", "id_column": "id", "state": "text"},
        "output": {"path": "out"},
        "service": {"base_url": "https://evals.example.com"},
        "model": "model-1.13.0",
        "questions": {"q": {"type": "noul", "instructions": "Is it?"}},
    }
    unknown = price_of(parse_config(base))
    assert unknown.per_million is None and unknown.cost(10**6) is None
    assert unknown.describe() == "cost unknown (no pricing in the config)"
    by_default = price_of(parse_config({**base, "pricing": {"default": 0.05}}))
    assert by_default.cost(1_000_000) == pytest.approx(0.05)
    assert by_default.source == "pricing.default"
    pricing = {"default": 0.05, "models": {"model-1.13.0": 0.042, "model-1.12.0": 0.03}}
    by_model = price_of(parse_config({**base, "pricing": pricing}))
    assert by_model.cost(1_000_000) == pytest.approx(0.042)
    assert by_model.describe() == ("$0.042 per million input tokens (pricing.models.model-1.13.0)")


# --------------------------------------------------------------------------- repeated states


def write(path: Path, columns: dict) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table(columns), path)
    return path


def test_state_key_is_canonical() -> None:
    assert state_key({"a": 1, "b": "x"}) == state_key({"b": "x", "a": 1})
    assert state_key('{"a":1}') != state_key({"a": 1})
    assert len(state_key("x")) == 16


@pytest.mark.parametrize("merge_every", [1 << 20, 3])
def test_repeated_states_exact(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, merge_every: int
) -> None:
    # merge_every=3 makes the finder merge its buffer many times, across batches and files
    monkeypatch.setattr(plan_module, "_MERGE_EVERY", merge_every)
    texts = ["a", "b", "a", "c", "d", "b", None, None, " ", " ", "a", "e"]
    write(tmp_path / "1.parquet", {"id": list(range(6)), "t": texts[:6]})
    write(tmp_path / "2.parquet", {"id": list(range(6, 12)), "t": texts[6:]})
    source = Source(SourceSpec(tmp_path, "id", "t", batch_rows=2))
    # invalid states (null, blank) are never sent, so they are not keys even when repeated
    assert repeated_states(source) == {state_key("a"), state_key("b")}


def test_repeated_object_states(tmp_path: Path) -> None:
    path = write(tmp_path / "a.parquet", {"id": [1, 2, 3], "x": [1, 1, 1], "y": ["p", "p", "q"]})
    source = Source(SourceSpec(path, "id", ("x", "y")))
    assert repeated_states(source) == {state_key({"x": 1, "y": "p"})}


# --------------------------------------------------------------------------- the classifier


def row(state: Any, invalid: str | None = None) -> Row:
    return Row(0, state, invalid)


def test_every_fate_is_decided_in_corpus_order() -> None:
    planner = Planner({"a": question(10), "b": question(20)})
    huge = " ".join(["w"] * 40_000)
    repeated = {state_key("same"), state_key(huge)}
    classifier = RowClassifier(planner, repeated)
    fates = [
        classifier.classify(r).fate
        for r in [row(None, "state is null"), row("same"), row("other"), row("same"), row(huge)]
    ]
    assert fates == [Fate.INVALID, Fate.SEND, Fate.SEND, Fate.REPEAT, Fate.CONTEXT_LIMIT]
    # a repeated over-limit state is refused every time, never taken for a reuse
    again = classifier.classify(row(huge))
    assert again.fate is Fate.CONTEXT_LIMIT and "context limit" in (again.error or "")


def test_a_failed_repeated_state_is_sent_again_at_its_next_occurrence() -> None:
    classifier = RowClassifier(Planner({"a": question(3)}), {state_key("x")})
    first = classifier.classify(row("x"))
    assert first.fate is Fate.SEND and first.key == state_key("x")
    assert classifier.classify(row("x")).fate is Fate.REPEAT
    classifier.forget(state_key("x"))
    assert classifier.classify(row("x")).fate is Fate.SEND
    # a state seen once is never keyed: nothing is kept for it
    assert classifier.classify(row("y")).key is None


# --------------------------------------------------------------------------- cached answers


def test_a_subset_of_the_questions_is_planned_and_split_on_its_own() -> None:
    questions = {k: question(15_000) for k in "abcde"}
    planner = Planner(questions)
    assert [r.keys for r in planner.plan_tokens(10_000, ["b", "d"]).requests] == [("b", "d")]
    split = planner.plan_tokens(10_000, ["a", "b", "c", "e"]).requests
    assert len(split) == 2 and sorted(k for r in split for k in r.keys) == list("abce")
    # the context rule is the whole row's: a state that cannot fit its longest question is
    # refused whichever questions are left to ask
    small = Planner({"small": question(5), "big": question(3_000)})
    assert small.plan_tokens(29_500, ["small"]).error_type == "context_limit"


def hit(*keys: str) -> CacheHit:
    return CacheHit({k: {"noul": 0.5} for k in keys}, "model-1.13.0")


def test_cached_rows_send_nothing_and_partly_cached_rows_send_the_rest() -> None:
    planner = Planner({"a": question(10), "b": question(20), "c": question(30)})
    hits = {state_key("all"): hit("a", "b", "c"), state_key("some"): hit("b")}
    asked: list[list[bytes]] = []

    def lookup(digests: Sequence[bytes]) -> dict[bytes, CacheHit]:
        asked.append(list(digests))
        return {d: hits[d] for d in digests if d in hits}

    classifier = RowClassifier(planner, {state_key("some")}, lookup)
    rows = [row("all"), row("some"), row("none"), row("some"), row(None, "state is null")]
    whole, some, none, again, invalid = classifier.classify_batch(rows)
    assert len(asked) == 1 and sorted(asked[0]) == sorted(map(state_key, ["all", "some", "none"]))
    assert whole.fate is Fate.CACHED and whole.requests == ()
    assert whole.hit == hits[state_key("all")]
    assert whole.saved_tokens == 1 + 10 + 20 + 30  # what the one request would have billed
    assert some.fate is Fate.SEND and [r.keys for r in some.requests] == [("a", "c")]
    assert some.saved_tokens == 20 and some.requests[0].tokens == 1 + 10 + 30
    assert none.fate is Fate.SEND and none.hit is None and none.saved_tokens == 0
    assert again.fate is Fate.REPEAT  # a repeated state is looked up once, at its first row
    assert invalid.fate is Fate.INVALID
    # a later batch does not ask again for a repeated state already taken
    assert classifier.classify_batch([row("some")])[0].fate is Fate.REPEAT
    assert len(asked) == 1


def test_survey_finds_repeats_and_rows_whose_state_changed(tmp_path: Path) -> None:
    path = write(
        tmp_path / "in.parquet",
        {"id": [1, 2, 3, 4, 5], "t": ["same", "edited now", "same", None, "new row"]},
    )
    source = Source(SourceSpec(path, "id", "t", batch_rows=2))
    committed = pa.table(
        {
            "id": pa.array([1, 2, 4, 9], pa.int64()),
            "_state_hash": state_hashes([state_key("same"), state_key("edited"), None, b"x"]),
        }
    )
    found = survey(source, committed)
    assert found.repeated == {state_key("same")}
    assert found.stale is not None and found.stale.to_pylist() == [2]  # 4 stays invalid
    assert survey(source, committed.slice(0, 0)).stale is None


# --------------------------------------------------------------------------- calibration


def test_calibrated_planning_splits_and_refuses_by_the_services_count() -> None:
    questions = {k: question(4_000) for k in "abcde"}
    planner = Planner(questions)
    fits_by_ours = planner.plan_tokens(4_000)
    assert len(fits_by_ours.requests) == 1  # 24k by our count
    planner.calibrate(1.01)  # our own count, give or take: nothing changes
    assert planner.scale == 1.0
    planner.calibrate(3.0)  # the service counts three tokens for each of ours
    split = planner.plan_tokens(4_000)
    assert len(split.requests) == 2  # 72k (and the margin) by its count: two requests
    assert sorted(k for r in split.requests for k in r.keys) == list("abcde")
    for r in split.requests:  # tokens stay in our count (the Budget scales its pacing)
        assert r.tokens == 4_000 + 4_000 * len(r.keys)
    refused = planner.plan_tokens(9_000)  # 27k + 12k by its count: over 32k
    assert refused.error_type == "context_limit"
    assert "by the service's count as measured (3.15 x evalpipe's)" in (refused.error or "")
    planner.calibrate(1.0)
    assert planner.plan_tokens(4_000) == fits_by_ours


@pytest.mark.parametrize(
    "sizes",
    [
        {"a": 5, "b": 5, "c": 5, "d": 5, "e": 5},  # equal: 3 + 2
        {"a": 10, "b": 9, "c": 8},  # two large and one: never three groups
        {"a": 10, "b": 3, "c": 3, "d": 3, "e": 1},
        {"a": 0, "b": 0, "c": 0, "d": 0},  # no tokens at all: split by count
        {"a": 40, "b": 1},
    ],
)
def test_a_refused_request_is_split_in_two_by_the_plans_own_rule(sizes: dict[str, int]) -> None:
    request = Request.of(sizes, 1_000, sizes)
    halves = split_refused(request, sizes)
    assert len(halves) == 2
    assert sorted(k for half in halves for k in half.keys) == sorted(sizes)
    for half in halves:
        assert half.state_tokens == 1_000
        assert half.tokens == 1_000 + sum(sizes[k] for k in half.keys)
        assert len(half.keys) <= math.ceil(len(sizes) / 2)
        assert list(half.keys) == [k for k in sizes if k in half.keys]  # the request's order
    heavier = max(sum(sizes[k] for k in half.keys) for half in halves)
    assert heavier <= (sum(sizes.values()) + max(sizes.values())) / 2
    assert split_refused(Request.of(["a"], 1_000, sizes), sizes) == [
        Request.of(["a"], 1_000, sizes)
    ]
