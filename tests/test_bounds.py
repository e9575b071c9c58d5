"""What a run reads is bounded: an answer larger than `service.max_response_mb` ends its request
`invalid_response` (read no further, not retried), and a state larger in bytes than any context
holds ends its row `context_limit` without being sent; either ends one row, never the run.

The run test puts a front of its own before the session's embedded service (real HTTP on
loopback) that answers one row's request with a 50 MB body, and counts what it was sent.
"""

from __future__ import annotations

import threading
from collections.abc import AsyncIterator, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from conftest import QUESTIONS, STATE, auth, evaluate_body, job_config, run_config
from evalpipe.contract.tokens import MAX_STATE_BYTES, QUESTION_CONTEXT_LIMIT
from evalpipe.errors import CONTEXT_LIMIT
from evalpipe.input import Row
from evalpipe.planning import Fate, Planner, RowClassifier
from evalpipe.send import EvalClient
from evalpipe.service import EmbeddedService

MB = 1_000_000
HUGE = 50 * MB  # the answer the front gives the marked row
MARK = "HUGE-ANSWER-PLEASE"


# --------------------------------------------------------------------------- the response bound


def _huge_stream(sent: list[int], size: int = HUGE) -> AsyncIterator[bytes]:
    async def chunks() -> AsyncIterator[bytes]:
        for _ in range(size // MB):
            sent[0] += MB
            yield b" " * MB

    return chunks()


@pytest.mark.parametrize("declared", [False, True])
async def test_an_answer_over_the_bound_is_invalid_response_read_no_further(
    declared: bool,
) -> None:
    sent = [0]

    def handler(request: httpx.Request) -> httpx.Response:
        headers = {"content-length": str(HUGE)} if declared else {}
        return httpx.Response(200, headers=headers, content=_huge_stream(sent))

    client = EvalClient("http://svc", "key", transport=httpx.MockTransport(handler))
    async with client:
        result = await client.evaluate(evaluate_body(), {}, 10)
    assert result.error is not None and result.error.error_type == "invalid_response"
    assert "over 8,000,000 bytes" in result.error.message
    assert result.attempts == 1  # not retried: the same request would get the same
    assert sent[0] <= (0 if declared else 9 * MB)  # read up to the bound, not to the end


# --------------------------------------------------------------------------- the row's byte bound


def test_a_state_larger_than_any_context_is_context_limit_whatever_its_words() -> None:
    classifier = RowClassifier(Planner(QUESTIONS), set())
    one_word = "x" * (100 * MB)  # one word to a count by words: one token
    decision = classifier.classify(Row("big", one_word, None))
    assert decision.fate is Fate.CONTEXT_LIMIT and decision.requests == ()
    assert decision.error is not None and "100,000,000 bytes" in decision.error
    nested = {"a": "y" * (MAX_STATE_BYTES // 2), "b": ["z" * (MAX_STATE_BYTES // 2), 1]}
    assert classifier.classify(Row("obj", nested, None)).fate is Fate.CONTEXT_LIMIT
    under = "w " * (QUESTION_CONTEXT_LIMIT // 4)  # many bytes short of the bound, and fits
    assert classifier.classify(Row("fits", under, None)).fate is Fate.SEND
    assert Planner(QUESTIONS).plan(one_word).error_type == CONTEXT_LIMIT  # the same rule


# --------------------------------------------------------------------------- a run


class _Front(ThreadingHTTPServer):
    """Forwards to the session's service, except a request holding MARK: a 50 MB answer."""

    daemon_threads = True

    def __init__(self, upstream: str) -> None:
        self.upstream = upstream
        self.bodies: list[int] = []  # the size of every evaluate request it was sent
        self.marked = 0
        super().__init__(("127.0.0.1", 0), _FrontHandler)
        threading.Thread(target=self.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class _FrontHandler(BaseHTTPRequestHandler):
    server: _Front
    protocol_version = "HTTP/1.1"

    def _forward(self, method: str, body: bytes | None) -> None:
        headers = {"authorization": self.headers.get("authorization", "")}
        with httpx.Client(timeout=30) as client:
            headers["content-type"] = "application/json"
            url = self.server.upstream + self.path
            answer = client.request(method, url, content=body, headers=headers)
        self.send_response(answer.status_code)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(answer.content)))
        self.end_headers()
        self.wfile.write(answer.content)

    def do_GET(self) -> None:
        self._forward("GET", None)

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("content-length", 0)))
        self.server.bodies.append(len(body))
        if MARK.encode() not in body:
            self._forward("POST", body)
            return
        self.server.marked += 1
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("connection", "close")  # no length: the body runs to the close
        self.end_headers()
        try:
            for _ in range(HUGE // MB):
                self.wfile.write(b" " * MB)
        except OSError:  # the client stopped reading at its bound and hung up
            pass
        self.close_connection = True

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def front(service: EmbeddedService) -> Iterator[_Front]:
    started = _Front(service.base_url)
    yield started
    started.shutdown()
    started.server_close()


@pytest.mark.ray
def test_a_50_mb_answer_and_a_100_mb_row_each_end_one_row_not_the_run(
    front: _Front, tmp_path: Path, ray_runtime: None
) -> None:
    texts = [f"{STATE} ({i})" for i in range(6)]
    texts[2] = f"{MARK}: {STATE}"
    texts[4] = "x" * (100 * MB)  # 100 MB without a space
    pq.write_table(pa.table({"id": list(range(6)), "text": texts}), tmp_path / "in.parquet")
    config = job_config(tmp_path, front.url, retries={"max_attempts": 3})
    summary = run_config(config)
    assert summary["rows_total"] == 6 and summary["rows_answered"] == 4, summary
    table = pl.read_parquet(tmp_path / "out" / "*.parquet").sort("id")
    errors = dict(zip(table["id"].to_list(), table["_error_type"].to_list(), strict=True))
    assert errors == {0: None, 1: None, 2: "invalid_response", 3: None, 4: CONTEXT_LIMIT, 5: None}
    assert "bytes" in table.filter(pl.col("id") == 4)["_error"].item()
    assert front.marked == 1  # the huge answer was asked for once, not retried
    assert max(front.bodies) < MB  # the 100 MB row was never sent
    assert httpx.get(front.url + "/v1/models", headers=auth()).status_code == 200
