"""Many rows in one request (`packing.rows`): the service's pointers, the packs, the run.

Quick tests (no process): the embedded evaluator answers a question pointed at a field of an
object state as it answers that field alone; packs are built within the limits and the cap;
a pack's answer fans back to its rows; halving learns the cap. Then jobs on the session's Ray
against embedded services with the packing settings (the session's, for those that need no
settings of their own: their jobs share its account's Budget): every row's answers are its
answers alone.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import httpx
import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from conftest import CLIENT, QUESTIONS, auth, embedded, job_config, run_config
from evalpipe.contract import count_questions, count_value
from evalpipe.errors import TooManyQuestionsError
from evalpipe.planning import Request
from evalpipe.planning.packing import Packer, field_prefix, packed_question
from evalpipe.send.failures import Reply, judge
from evalpipe.send.packs import Pack, halves, pack_payload, split_tokens
from evalpipe.service import EmbeddedService
from evalpipe.service.evaluator import answer_request, compile_questions

MODEL = "model-1.13.0"
ROWS: list[Any] = [
    "Great kettle, boils fast and the handle stays cool.",
    "The tent leaked on the first night; support never answered.",
    {"title": "Lamp", "text": "Bright, but the switch broke after a week."},
    "ok",
]


def _ask(state: Any, questions: dict[str, Any]) -> dict[str, Any]:
    return answer_request(state, questions, compile_questions(questions))


def _packed(rows: list[Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    state = {f"r{i}": row for i, row in enumerate(rows)}
    questions = {
        f"r{i}:{key}": packed_question(q, f"r{i}")
        for i in range(len(rows))
        for key, q in QUESTIONS.items()
    }
    return state, questions


# --------------------------------------------------------------------------- the service


def test_a_pointed_question_is_answered_as_its_field_alone() -> None:
    state, questions = _packed(ROWS)
    packed = _ask(state, questions)
    for i, row in enumerate(ROWS):
        alone = _ask(row, QUESTIONS)
        for key in QUESTIONS:
            assert packed[f"r{i}:{key}"] == alone[key], (i, key)


def test_the_pointer_words_do_not_change_the_answer() -> None:
    state, _ = _packed(ROWS)
    question = QUESTIONS["helpful"]
    worded = [
        {**question, "instructions": [question["instructions"], f"About `r1`{words}"]}
        for words in (".", " only, please.", ": the second review.")
    ]
    answers = [_ask(state, {"q": q})["q"] for q in worded]
    assert answers[0] == answers[1] == answers[2] == _ask(ROWS[1], {"q": question})["q"]


def test_a_swaying_service_moves_some_packed_answers() -> None:
    state, questions = _packed(ROWS * 5)
    swayed = answer_request(state, questions, compile_questions(questions), sway=0.5)
    exact = _ask(state, questions)
    moved = sum(swayed[k] != exact[k] for k in questions)
    assert 0 < moved < len(questions)


def test_the_service_caps_questions_and_bills_per_question() -> None:
    state, questions = _packed(ROWS)  # 12 questions
    with embedded(max_questions=6, bill_per_question=True) as service:
        body = {"state": state, "model": MODEL, "questions": questions}
        url = f"{service.base_url}/v1/evaluate"
        refused = CLIENT.post(url, json=body, headers=auth(), timeout=30)
        assert refused.status_code == 422
        assert refused.json()["detail"][0]["loc"] == ["body", "questions"]
        error = judge(Reply(422, refused.headers, refused.content))
        assert error is not None and isinstance(error.error, TooManyQuestionsError)
        one = {"state": ROWS[0], "model": MODEL, "questions": QUESTIONS}
        billed = CLIENT.post(url, json=one, headers=auth(), timeout=30).json()["usage"]
    with embedded() as plain:
        url = f"{plain.base_url}/v1/evaluate"
        once = CLIENT.post(url, json=one, headers=auth(), timeout=30).json()["usage"]
    assert billed["input_tokens"] - once["input_tokens"] == 2 * count_value(ROWS[0])


# --------------------------------------------------------------------------- packs


TOKENS = count_questions(QUESTIONS)


def _requests(*state_tokens: int) -> list[Request]:
    return [Request.of(QUESTIONS, n, TOKENS) for n in state_tokens]


def test_packs_fill_up_to_rows_and_the_cap() -> None:
    packer = Packer(TOKENS, "r", rows=4)
    assert [p.members for p in packer.groups(_requests(*[20] * 10))] == [
        (0, 1, 2, 3), (4, 5, 6, 7), (8, 9)
    ]  # fmt: skip
    packer.max_questions = 6  # two rows of three questions
    assert [len(p.members) for p in packer.groups(_requests(*[20] * 5))] == [2, 2, 1]


def test_a_row_too_long_to_share_goes_alone() -> None:
    packer = Packer(TOKENS, "r", rows=8)
    plans = packer.groups(_requests(20, 31_970, 20, 20))  # 31,970: fits alone, not with one more
    assert [p.members for p in plans] == [(0,), (1,), (2, 3)]
    for plan in plans:
        assert plan.tokens == sum(plan.shares)
        assert plan.state_tokens + max(TOKENS.values()) + 5 <= 32_000


def test_halving_learns_the_cap() -> None:
    packer = Packer(TOKENS, "r", rows=8)
    packer.learn(refused=24, accepted=12)
    assert packer.max_questions == 12
    packer.learn(refused=0, accepted=12)
    assert packer.max_questions == 12


def test_a_pack_fans_back_to_its_rows() -> None:
    from evalpipe.send.actors import StateJob

    jobs = tuple(
        StateJob(i, row, tuple(_requests(10))) for i, row in enumerate(ROWS)
    )  # one request each
    pack = Pack(jobs, ("r0", "r1", "r2", "r3"), 100, (25, 25, 25, 25))
    body, back = pack_payload(pack, MODEL, QUESTIONS)
    assert set(body["state"]) == {"r0", "r1", "r2", "r3"}
    assert body["state"]["r2"] == ROWS[2]  # an object state nested whole
    assert back["r3:quality"] == (3, "quality")
    helpful = QUESTIONS["helpful"]["instructions"]
    assert body["questions"]["r1:helpful"]["instructions"] == f"`r1`: {helpful}"
    assert [len(h.jobs) for h in halves(pack)] == [2, 2]
    assert sum(split_tokens(103, (1, 2, 3))) == 103


def test_field_names_avoid_those_the_questions_name() -> None:
    assert field_prefix(QUESTIONS) == ""  # the rows' positions: `0`, `1`, ...
    named = {"q": {**QUESTIONS["helpful"], "instructions": "Is `title` kind, or `text`?"}}
    assert field_prefix(named) == ""  # a question's own fields are no positions
    pointing = {"q": {**QUESTIONS["helpful"], "instructions": ["Is it kind?", "See `0`."]}}
    assert field_prefix(pointing) == "r"
    both = {"q": {**QUESTIONS["helpful"], "criteria": {"true": "`0` or `r1`", "false": "no"}}}
    assert field_prefix(both) == "row"


def test_the_pointer_leads_instructions_of_every_shape() -> None:
    """A string gets the pointer before it, an array's first string too; an object (or an
    array led by one) goes after the pointer's name in an array. Each packed row is answered
    as alone, an object state's own pointers included."""
    shapes: dict[str, Any] = {
        "text": {"type": "noul", "instructions": "Is it kind?"},
        "array": {"type": "noul", "instructions": ["Is it kind?", {"example": "a gift"}]},
        "object": {
            "type": "choice",
            "instructions": {"ask": "Which fits best?", "note": "one word"},
            "criteria": {"lamp": None, "tent": "camping"},
        },
        "led": {"type": "score", "instructions": [{"ask": "How bright?"}], "criteria": ["a", "b"]},
        "own": {"type": "noul", "instructions": "`title`: is it a lamp?"},
        "inner": {"type": "noul", "instructions": ["Is it kind?", "Mind `text`."]},
    }
    assert packed_question(shapes["text"], "3")["instructions"] == "`3`: Is it kind?"
    assert packed_question(shapes["array"], "3")["instructions"][0] == "`3`: Is it kind?"
    assert packed_question(shapes["object"], "3")["instructions"][0] == "`3`"
    assert packed_question(shapes["led"], "3")["instructions"] == ["`3`", [{"ask": "How bright?"}]]
    rows = [*ROWS, {"title": "Tent", "text": "It leaked."}]
    state = {str(i): row for i, row in enumerate(rows)}
    asked = {
        f"{i}:{k}": packed_question(q, str(i)) for i in range(len(rows)) for k, q in shapes.items()
    }
    packed = _ask(state, asked)
    for i, row in enumerate(rows):
        alone = _ask(row, shapes)
        assert {k: packed[f"{i}:{k}"] for k in shapes} == alone, i
    # An object state's own pointer is followed alone and packed: its answer is the field's.
    assert (
        _ask(rows[2], shapes)["own"]
        == _ask("Lamp", {"q": {"type": "noul", "instructions": "is it a lamp?"}})["q"]
    )


def test_the_json_rule_counts_what_a_tokenizer_reads() -> None:
    """`--token-rule json`: a string as its text (evalpipe's count), anything else as its
    JSON, each quote, bracket, colon, comma and escape a token; questions likewise."""
    from evalpipe.service.counting import ServiceCounter, count_json

    assert count_json('Returns "x".\n') == count_value('Returns "x".\n') == 5
    assert count_json({"r": "a\nb"}) == 11  # { " r " : " a \n b " }
    assert count_json(["a", 1, None, True]) == 11  # [ " a " , 1 , null , true ]
    counter = ServiceCounter("json")
    assert counter.state(ROWS[0]) == count_value(ROWS[0])  # a string alone: as evalpipe counts
    assert counter.state(ROWS[2]) > count_value(ROWS[2])  # an object: its punctuation too
    assert {k: counter.question(q) for k, q in QUESTIONS.items()} == TOKENS  # plain questions
    listed = {**QUESTIONS["helpful"], "instructions": ["Does it help?", "About `r1`."]}
    assert counter.question(listed) == count_questions({"q": listed})["q"] + 7  # [ " " , " " ]


def test_a_packed_row_costs_its_field_and_four_tokens_a_question_more_by_a_json_count() -> None:
    """What packing adds to a row, by a service that counts the JSON it reads: the row's field
    name, its quotes, a colon and a comma (7 tokens with the name), its newlines' escapes, and
    `` `k`: `` before each question's instructions (4). evalpipe's estimate of a pack is the
    same but for the escapes (and the pack's braces, less its last comma)."""
    from evalpipe.send.actors import StateJob
    from evalpipe.service.counting import ServiceCounter

    counter = ServiceCounter("json")
    rows = [
        f"Return the {w}.\n\nRaises ValueError when it is {w} twice."
        for w in ("sum", "max", "mean")
    ]
    requests = [Request.of(QUESTIONS, count_value(r), TOKENS) for r in rows]
    packer = Packer(TOKENS, field_prefix(QUESTIONS), rows=8)
    plan = packer.one(requests)
    jobs = tuple(
        StateJob(i, row, (request,))
        for i, (row, request) in enumerate(zip(rows, requests, strict=True))
    )
    pack = Pack(jobs, tuple(packer.field(i) for i in range(3)), plan.tokens, plan.shares)
    body, _ = pack_payload(pack, MODEL, QUESTIONS)
    billed = counter.state(body["state"]) + sum(
        counter.question(q) for q in body["questions"].values()
    )
    alone = sum(counter.state(r) + sum(TOKENS.values()) for r in rows)
    escapes = sum(r.count("\n") for r in rows)
    assert billed - alone == 3 * (7 + 4 * len(QUESTIONS)) + escapes + 2 - 1
    assert billed - plan.tokens == escapes + 2 - 1


# --------------------------------------------------------------------------- runs


def _written(tmp: Path, texts: list[str]) -> list[str]:
    """`texts` as the corpus `job_config` reads (`tmp/in.parquet`: id, text)."""
    pq.write_table(pa.table({"id": list(range(len(texts))), "text": texts}), tmp / "in.parquet")
    return texts


def _corpus(tmp: Path, n: int = 60) -> list[str]:
    texts = [
        f"Review {i}: the {['lamp', 'kettle', 'tent', 'jacket'][i % 4]} "
        f"{['broke', 'works well', 'is fine', 'leaked'][i % 3]} after {i} days."
        for i in range(n)
    ]
    return _written(tmp, texts)


def _alone(
    base_url: str,
    text: str,
    client: httpx.Client | None = None,
    questions: dict[str, Any] = QUESTIONS,
) -> dict[str, Any]:
    """The service's answers for `text` alone (`client`: a pool for many; a new client costs
    an SSL context)."""
    body = {"state": text, "model": MODEL, "questions": questions}
    post = client.post if client is not None else httpx.post
    reply = post(f"{base_url}/v1/evaluate", json=body, headers=auth(), timeout=30)
    return dict(reply.json()["answers"])


def _exact(
    tmp: Path, base_url: str, texts: list[str], questions: dict[str, Any] = QUESTIONS
) -> pl.DataFrame:
    out = pl.read_parquet(tmp / "out" / "part-*.parquet").sort("id")
    assert out["id"].to_list() == list(range(len(texts)))
    # The reference evaluator is the service's answer (checked over HTTP on a few rows): asking
    # the service for every row would cost its latency per row.
    alone_answers = [_ask(text, questions) for text in texts]
    with httpx.Client() as client:
        for text, answers in list(zip(texts, alone_answers, strict=True))[:3]:
            assert _alone(base_url, text, client, questions) == answers
    for row in out.iter_rows(named=True):
        alone = alone_answers[row["id"]]
        assert row["helpful__p_true"] == alone["helpful"]["noul"]
        assert row["sentiment__choice"] == alone["sentiment"]["choice"]
        assert row["quality__score"] == alone["quality"]["score"]
    return out


@pytest.mark.usefixtures("ray_runtime")
def test_packed_rows_get_their_answers_alone_and_the_cap_is_learned(tmp_path: Path) -> None:
    texts = _corpus(tmp_path)
    with embedded(max_questions=12) as service:
        config = job_config(tmp_path, service.base_url, packing={"rows": 8})
        summary = run_config(config)
        out = _exact(tmp_path, service.base_url, texts)
        refused = service.stats()["responses"].get("422", 0)
    assert set(out["_pack"].to_list()) <= {1, 2, 3, 4}
    assert out["_pack"].max() == 4  # 12 questions: 4 rows of 3
    assert summary["packing"]["max_questions_per_request"] == 12
    assert 1 <= refused <= 3
    assert summary["requests"] < len(texts) / 3
    assert 3 < summary["packing"]["rows_per_request"] <= 4


WORDS = (
    "The {thing} arrived on day {i}; it {verdict}. The box was dented, the manual was short, "
    "and the colour matched the photos well enough for the price we paid at the shop."
)


def _long_corpus(tmp: Path, n: int) -> list[str]:
    texts = [
        WORDS.format(
            thing=["lamp", "kettle", "tent", "jacket"][i % 4],
            i=i,
            verdict=["broke", "works well", "is fine", "leaked"][i % 3],
        )
        for i in range(n)
    ]
    return _written(tmp, texts)


def _auto(tmp: Path, base_url: str) -> dict[str, Any]:
    config = job_config(tmp, base_url, packing={"rows": "auto", "sample_rows": 40})
    return run_config(config)


@pytest.mark.usefixtures("ray_runtime")
def test_auto_packs_an_exact_service_and_the_sample_keeps_its_answers(
    service: EmbeddedService, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    texts = _long_corpus(tmp_path, 100)
    summary = _auto(tmp_path, service.base_url)
    out = _exact(tmp_path, service.base_url, texts)
    packing = summary["packing"]
    assert packing["rows"] > 1, packing["reason"]
    assert all(a["interval_95"][0] >= 0.9 for a in packing["agreement"])
    assert packing["cost_ratio"] <= 1.25
    assert out.filter(pl.col("id") < 40)["_pack"].to_list() == [1] * 40  # the sample, alone
    assert out.filter(pl.col("id") >= 40)["_pack"].max() > 1
    manifest = json.loads((tmp_path / "out" / "_manifest.json").read_text())
    assert manifest["summary"]["packing"]["agreement"] == packing["agreement"]
    # The report's "Service and models" section gives k, the agreement and the cost ratio.
    from evalpipe.report import build, report_output

    page = build(report_output(str(tmp_path / "out")))
    models = next(section for section in page.sections if section.id == "models")
    assert ("rows per request (at most)", str(packing["rows"])) in models.figures
    assert any(t.columns[0] == "question" and len(t.rows) == 3 for t in models.tables)


# Questions about docstrings (~90 tokens, as the issue's), under the keys `_exact` reads.
DOC_QUESTIONS: dict[str, Any] = {
    "helpful": {
        "type": "noul",
        "instructions": "Does the docstring say what the function returns, or what it changes "
        "when it returns nothing?",
        "criteria": {"true": "it names the result or the effect", "false": "it says nothing of it"},
    },
    "sentiment": {
        "type": "choice",
        "instructions": "What does the documented code mainly do, as its docstring tells it?",
        "criteria": {
            "compute": "calculates or transforms values",
            "io": "reads or writes files, streams or sockets",
            "check": "tests a condition and says whether it holds",
            "other": None,
        },
    },
    "quality": {
        "type": "score",
        "instructions": "How clear is the docstring for a new user of the library, who has "
        "not read its source?",
        "criteria": ["unclear: it could not be used from this", "adequate", "clear at once"],
    },
}


def _docstrings(tmp: Path, n: int) -> list[str]:
    """Short docstrings of a few lines (their newlines and quotes are JSON escapes packed)."""
    verbs = ["Return", "Compute", "Read", "Check whether"]
    things = ["the sum of the items", "a copy of the mapping", "the next line", "the path exists"]
    texts = [
        f'{verbs[i % 4]} {things[(i // 4) % 4]} ({i}).\n\nArgs:\n    value: the "input" to '
        f"use.\n\nRaises ValueError when it is empty; see also item {i * 7 % 13}."
        for i in range(n)
    ]
    return _written(tmp, texts)


@pytest.mark.usefixtures("ray_runtime")
def test_auto_packs_for_a_service_that_counts_json_and_plan_shows_what_a_row_costs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Against a service that counts tokens as a tokenizer reads the JSON (`--token-rule json`),
    with the default `max_cost_ratio`: auto packs, a packed row costs at most 1.2 times its
    request alone by the service's own count, and every row is its answer alone. `plan` then
    shows what a row costs alone and packed by that count (the kept measurement's), and which
    limit binds each way."""
    from evalpipe.config import parse_config
    from evalpipe.planning import prepare
    from evalpipe.preflight import format_plan, plan_figures

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    texts = _docstrings(tmp_path, 100)
    with embedded(token_rule="json") as service:
        config = job_config(
            tmp_path, service.base_url, packing={"rows": "auto", "sample_rows": 40},
            questions=DOC_QUESTIONS,
        )  # fmt: skip
        summary = run_config(config)
        out = _exact(tmp_path, service.base_url, texts, DOC_QUESTIONS)
    packing = summary["packing"]
    assert packing["rows"] > 1, packing["reason"]
    assert packing["cost_ratio"] <= 1.2
    packed = out.filter(pl.col("_pack") > 1)
    assert packed.height >= 50
    figures = plan_figures(prepare(parse_config(config)))["packing"]
    per_row = figures["per_row"]
    assert per_row["counted_by"] == "the service's count, measured on 40 rows"
    measured = packing["tokens_per_row"]
    assert per_row["ratio"] == pytest.approx(measured["packed"] / measured["alone"], abs=0.01)
    assert {figures[w]["binding_limit"] for w in ("packed", "alone")} <= {
        "requests_per_minute", "tokens_per_second"
    }  # fmt: skip
    shown = format_plan(plan_figures(prepare(parse_config(config))))
    assert "by the service's count, measured on 40 rows" in shown


@pytest.mark.usefixtures("ray_runtime")
def test_auto_sends_rows_alone_to_a_swaying_service(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    texts = _long_corpus(tmp_path, 60)
    with embedded(pack_sway=0.5) as service:
        summary = _auto(tmp_path, service.base_url)
        out = _exact(tmp_path, service.base_url, texts)
    assert summary["packing"]["rows"] == 1
    assert "agrees with its answer alone" in summary["packing"]["reason"]
    assert set(out["_pack"].to_list()) == {1}


@pytest.mark.usefixtures("ray_runtime")
def test_auto_does_not_pack_for_a_service_that_bills_the_state_per_question(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    texts = _long_corpus(tmp_path, 60)
    with embedded(bill_per_question=True) as service:
        summary = _auto(tmp_path, service.base_url)
        out = _exact(tmp_path, service.base_url, texts)
        answered = service.stats()["requests_answered"]
    packing = summary["packing"]
    assert packing["rows"] == 1
    assert "times its cost alone" in packing["reason"]
    assert set(out["_pack"].to_list()) == {1}
    # One pack per k tried found the cost, never the rest of the sample packed.
    assert answered <= 60 + len(packing["tried"]) + 60  # rows alone, probes, the checks here


def test_plan_counts_requests_packed_and_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from evalpipe.config import parse_config
    from evalpipe.planning import prepare
    from evalpipe.preflight import format_plan, plan_figures

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    _corpus(tmp_path, 30)
    config = job_config(tmp_path, "http://127.0.0.1:9", packing={"rows": 4})  # never called
    figures = plan_figures(prepare(parse_config(config)))
    packing = figures["packing"]
    assert (packing["packed"]["requests"], packing["alone"]["requests"]) == (8, 30)
    assert packing["packed"]["input_tokens"] > packing["alone"]["input_tokens"]
    assert packing["packed"]["minimum_seconds"] <= packing["alone"]["minimum_seconds"]
    # What a packed row adds, by evalpipe's count: its field and the JSON around it (7), and
    # a 4-token pointer in each of its 3 questions.
    per_row = packing["per_row"]
    assert per_row["added"] == 7 + 4 * 3 and per_row["counted_by"] == "evalpipe's count"
    assert per_row["packed"] == pytest.approx(per_row["alone"] + 19)
    assert packing["alone"]["binding_limit"] == "requests_per_minute"
    shown = format_plan(figures)
    assert "8 requests" in shown and "+19 (" in shown and "requests per minute bind" in shown


@pytest.mark.usefixtures("ray_runtime")
def test_the_python_api_packs_through_the_service(
    service: EmbeddedService, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import evalpipe as ep

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    texts = _corpus(tmp_path, 24)
    data = pl.DataFrame({"id": list(range(24)), "text": texts})
    svc = ep.Service(service.base_url, model=MODEL, packing=6)
    scored = ep.score(data, id="id", state="text", questions=QUESTIONS, service=svc,
                      progress=False)  # fmt: skip
    alone = [_alone(service.base_url, t) for t in texts]
    assert scored["_pack"].max() == 6
    assert scored["helpful__p_true"].to_list() == [a["helpful"]["noul"] for a in alone]


@pytest.mark.subprocess
def test_kill_9_of_a_packed_run_then_the_same_command_has_every_row_once(
    ray_address: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A packed run killed mid-run re-pays at most the packs in flight; the rerun finishes
    every row once, each with its answers alone. The run joins the session's Ray (as on a
    cluster) and is killed with its workers there."""
    import math

    from conftest import cli_run
    from evalpipe.config import load_config
    from evalpipe.output.table import output_schema
    from test_resume import committed_so_far, kill_9_joined, start, write_yaml

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    n, k = 600, 4
    texts = _corpus(tmp_path, n)
    with embedded(latency=0.05) as service:  # the job paces itself at 2,400 RPM
        config = job_config(
            tmp_path, service.base_url, limits={"requests_per_minute": 2400},
            output={"part_rows": 100}, concurrency={"actors": 1, "max_in_flight": 8},
            cache={"enabled": False}, packing={"rows": k},
        )  # fmt: skip
        path = write_yaml(tmp_path, config)
        out, log = tmp_path / "out", tmp_path / "runs.log"
        loaded = load_config(path)
        schema = output_schema("id", pa.int64(), loaded.parsed_questions)
        first = start(path, log, "--ray-address", ray_address)
        deadline = time.monotonic() + 90
        while len(set().union(*committed_so_far(out, schema, loaded.fingerprint()))) < n // 3:
            assert first.poll() is None and time.monotonic() < deadline, log.read_text()[-2000:]
            time.sleep(0.05)
        kill_9_joined(first)
        cli_run(path)
        answered = service.stats()["requests_answered"]
        result = _exact(tmp_path, service.base_url, texts)
    assert result["_pack"].max() == k
    # Every row once; what was paid twice is at most the packs in flight at the kill (one actor
    # with 8 requests: several actors are not the point) and the rerun's first pack, sent while
    # the others wait.
    assert answered - math.ceil(n / k) <= 8 + 4, answered


@pytest.mark.usefixtures("ray_runtime")
def test_packed_answers_are_cached_apart_from_answers_alone(
    service: EmbeddedService, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    texts = _corpus(tmp_path, 24)
    packed = job_config(tmp_path, service.base_url, packing={"rows": 6})
    first = run_config(packed)
    again = run_config({**packed, "output": {"path": str(tmp_path / "again")}})
    alone = run_config({**packed, "output": {"path": str(tmp_path / "alone")}, "packing": {}})
    assert first["requests"] >= 4 and first["rows_from_cache"] == 0
    assert again["requests"] == 0 and again["rows_from_cache"] == len(texts)  # packed, kept
    assert alone["rows_from_cache"] == 0 and alone["requests"] == len(texts)  # never packed


def test_a_refused_pack_is_halved_and_its_parts_not_sent_twice_too_big() -> None:
    """20 rows of 3 questions to a service that takes 12 a request: the refusals are 60, 30
    and 15 questions (a part as big as one refused is split unsent), every row is answered."""
    import asyncio

    from evalpipe.contract import validate_questions
    from evalpipe.send import CallResult
    from evalpipe.send.actors import JobResult, StateJob
    from evalpipe.send.packs import send_pack

    refused: list[int] = []
    jobs = tuple(StateJob(i, f"row {i}", tuple(_requests(5))) for i in range(20))
    pack = Pack(jobs, tuple(f"r{i}" for i in range(20)), 20 * 30, (30,) * 20)

    async def call(body: dict[str, Any], parsed: dict[str, Any], tokens: int) -> CallResult:
        n = len(body["questions"])
        if n > 12:
            refused.append(n)
            return CallResult(None, TooManyQuestionsError("too many questions", 422), 1, 0)
        answers = _ask(body["state"], body["questions"])
        from evalpipe.contract import check_response

        response = check_response(parsed, {"model": MODEL, "answers": answers,
                                           "usage": {"input_tokens": tokens}})  # fmt: skip
        return CallResult(response, None, 1, 0)

    async def alone(job: StateJob) -> JobResult:
        raise AssertionError("no half of one row here")

    parsed = validate_questions(QUESTIONS)
    results, fewest, most = asyncio.run(send_pack(pack, MODEL, QUESTIONS, parsed, call, alone))
    assert refused == [60, 30, 15] and (fewest, most) == (15, 9)
    assert [r.index for r in results] == list(range(20))
    for job, result in zip(jobs, results, strict=True):
        assert result.answers == _ask(job.state, QUESTIONS)
    assert sum(r.requests for r in results) == 8 + 3  # 8 packs of 3 or 2 rows, 3 refused


def test_plan_calibrate_measures_agreement_and_run_would_use_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`plan --calibrate N` with `packing.rows: auto` asks N rows alone and packed, prints each
    question's agreement and the cost ratio, and keeps them: the next plan shows them too."""
    import yaml
    from click.testing import CliRunner

    from evalpipe.cli.main import main

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    monkeypatch.setenv("EVAL_API_KEY", "test-key")
    _long_corpus(tmp_path, 50)
    with embedded() as service:
        config = job_config(tmp_path, service.base_url, packing={"rows": "auto"})
        path = tmp_path / "job.yaml"
        path.write_text(yaml.safe_dump(config))
        measured = CliRunner().invoke(main, ["plan", str(path), "--calibrate", "40"])
        again = CliRunner().invoke(main, ["plan", str(path), "--json"])
    assert measured.exit_code == 0, measured.output
    for key in QUESTIONS:
        assert f"'{key}': agrees on 40/40 rows" in measured.output
    assert "cost per row packed / alone" in measured.output
    figures = json.loads(again.output)["packing"]
    assert figures["rows"] > 1 and figures["sample_rows"] == 40
    assert figures["packed"]["requests"] < figures["alone"]["requests"]
