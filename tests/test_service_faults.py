"""Injected faults, each seen by a raw client the way a real client would meet it."""

from __future__ import annotations

import socket
import time
from urllib.parse import urlsplit

import httpx
import orjson
import pytest

from conftest import API_KEY, auth, embedded, evaluate_body
from evalpipe.errors import ConfigError
from evalpipe.service import EmbeddedService
from evalpipe.service.faults import Fault, FaultInjector, FaultRates, Latency


def raw_exchange(service: EmbeddedService, body: bytes) -> bytes:
    """Send one request on a fresh socket and read until the server closes it."""
    address = urlsplit(service.base_url)
    request = (
        f"POST /v1/evaluate HTTP/1.1\r\nHost: {address.netloc}\r\n"
        f"Authorization: Bearer {API_KEY}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    ).encode() + body
    with socket.create_connection((address.hostname, address.port), timeout=10) as sock:
        sock.sendall(request)
        received = b""
        while chunk := sock.recv(65536):
            received += chunk
    return received


def test_drop_closes_the_connection_without_a_response() -> None:
    with embedded(fault_drop=1.0) as service:
        assert raw_exchange(service, orjson.dumps(evaluate_body())) == b""
        with pytest.raises(httpx.RemoteProtocolError):
            httpx.post(service.base_url + "/v1/evaluate", json=evaluate_body(), headers=auth())
        assert service.stats()["faults"]["drop"] == 2


def test_truncate_sends_a_200_whose_json_is_cut_short() -> None:
    with embedded(fault_truncate=1.0) as service:
        received = raw_exchange(service, orjson.dumps(evaluate_body()))
        head, _, body = received.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 200 OK") and b"Connection: close" in head
        assert body.startswith(b'{"model":"model-1.13.0"')
        with pytest.raises(orjson.JSONDecodeError):
            orjson.loads(body)
        # A library client reads a complete 200 whose body is not JSON.
        response = httpx.post(
            service.base_url + "/v1/evaluate", json=evaluate_body(), headers=auth()
        )
        assert response.status_code == 200
        with pytest.raises(ValueError):
            response.json()


@pytest.mark.parametrize(
    ("fault", "status", "kind"),
    [
        ("fault_529", 529, "overloaded_error"),
        ("fault_500", 500, "api_error"),
    ],
)
def test_error_faults_answer_with_a_json_body(fault: str, status: int, kind: str) -> None:
    with embedded(**{fault: 1.0}) as service:
        response = httpx.post(
            service.base_url + "/v1/evaluate", json=evaluate_body(), headers=auth()
        )
        stats = service.stats()
    assert response.status_code == status
    assert response.json()["error"]["type"] == kind
    if status == 529:
        assert response.headers["retry-after"] == "1"
    assert stats["faults_injected"] == 1 and stats["requests_accepted"] == 1


def test_slow_answers_after_slow_seconds() -> None:
    with embedded(fault_slow=1.0, slow_seconds=0.4) as service:
        start = time.monotonic()
        response = httpx.post(
            service.base_url + "/v1/evaluate", json=evaluate_body(), headers=auth()
        )
        elapsed = time.monotonic() - start
        stats = service.stats()
    # Held at least slow_seconds (a busy machine only adds to it), then a complete answer.
    assert response.status_code == 200 and response.json()["answers"] and elapsed >= 0.4
    assert stats["faults"]["slow"] == 1 and stats["faults_injected"] == 1


def test_faults_are_off_by_default() -> None:
    """A service of the test's own: the session's is shared, and tests may set faults on it."""
    with embedded() as service, httpx.Client(base_url=service.base_url, headers=auth()) as client:
        statuses = {
            client.post("/v1/evaluate", json=evaluate_body()).status_code for _ in range(20)
        }
        assert statuses == {200} and service.stats()["faults_injected"] == 0


def _statuses(seed: int) -> list[int]:
    with embedded(fault_500=0.3, fault_529=0.2, fault_seed=seed) as service:
        client = httpx.Client(base_url=service.base_url, headers=auth())
        with client:
            return [
                client.post("/v1/evaluate", json=evaluate_body()).status_code for _ in range(30)
            ]


def test_faults_are_reproducible_with_a_seed() -> None:
    first = _statuses(seed=11)
    assert first == _statuses(seed=11)
    assert first != _statuses(seed=12)
    assert {200, 500, 529} <= set(first)


def test_fault_draws_follow_their_rates() -> None:
    injector = FaultInjector(FaultRates(overloaded=0.1, drop=0.2, slow=0.3), seed=5)
    draws = [injector.draw() for _ in range(20_000)]
    share = {fault: draws.count(fault) / len(draws) for fault in [*Fault, None]}
    assert share[Fault.OVERLOADED] == pytest.approx(0.1, abs=0.01)
    assert share[Fault.DROP] == pytest.approx(0.2, abs=0.01)
    assert share[Fault.SLOW] == pytest.approx(0.3, abs=0.01)
    assert share[Fault.SERVER_ERROR] == share[Fault.TRUNCATE] == 0
    assert share[None] == pytest.approx(0.4, abs=0.01)


@pytest.mark.parametrize("rates", [{"drop": 1.5}, {"drop": -0.1}, {"drop": 0.6, "slow": 0.6}])
def test_fault_rates_are_checked(rates: dict[str, float]) -> None:
    with pytest.raises(ConfigError):
        FaultRates(**rates)


def test_latency_is_lognormal_around_its_median() -> None:
    latency = Latency(0.1, seed=3)
    samples = sorted(latency.sample() for _ in range(4001))
    assert samples[2000] == pytest.approx(0.1, rel=0.05)
    assert samples[0] > 0.03 and samples[-1] < 0.4
    assert Latency(0.0).sample() == 0.0
