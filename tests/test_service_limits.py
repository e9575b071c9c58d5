"""Rate limits (429), the in-flight cap (529), latency and the admin endpoints, over HTTP.

The machine may be busy, so no test here needs its requests to arrive within some time: limits
are set so low that the bucket cannot refill during a test (1 rpm refills one request a minute),
waits are asserted as lower bounds only, and the limit schedule's timing is tested on a virtual
clock.
"""

from __future__ import annotations

import asyncio
import time

import httpx
import orjson
import pytest

from conftest import API_KEY, LIFTED, auth, billed_tokens, embedded, evaluate_body
from evalpipe.errors import ConfigError
from evalpipe.service import EmbeddedService, ServiceSettings
from evalpipe.service.app import ServiceApp
from virtual_clock import on_virtual_clock


def post(service: EmbeddedService, body: object = None) -> httpx.Response:
    body = evaluate_body() if body is None else body
    return httpx.post(service.base_url + "/v1/evaluate", json=body, headers=auth())


async def _burst(service: EmbeddedService, n: int) -> list[httpx.Response]:
    """`n` evaluate requests at once, on connections opened beforehand so they arrive together."""
    async with httpx.AsyncClient(base_url=service.base_url, headers=auth(), timeout=10) as client:
        await asyncio.gather(*(client.get("/v1/models") for _ in range(n)))  # not rate-limited
        return await asyncio.gather(
            *(client.post("/v1/evaluate", json=evaluate_body()) for _ in range(n))
        )


async def test_a_burst_against_1_rpm_gets_429_with_retry_after() -> None:
    with embedded(rpm=1) as service:  # a bucket of one request, refilled in 60 s
        responses = await _burst(service, 4)
        stats = service.stats()
    statuses = sorted(r.status_code for r in responses)
    assert statuses == [200, 429, 429, 429]
    for refused in responses:
        if refused.status_code == 429:
            assert refused.json()["error"]["type"] == "rate_limit_error"
            assert "requests per minute" in refused.json()["error"]["message"]
            seconds, millis = (int(refused.headers[h]) for h in ("retry-after", "retry-after-ms"))
            assert 1 <= millis <= 60_000 and seconds == -(-millis // 1000)  # whole seconds, up
    assert stats["requests_accepted"] == 1 and stats["rate_limited"] == 3
    assert stats["responses"] == {"200": 1 + 4, "429": 3}  # and the four GETs of the warm-up


def test_waiting_retry_after_ms_is_enough() -> None:
    with embedded(rpm=60) as service:  # one a second, a bucket of one
        refused = post(service)
        while refused.status_code == 200:  # until the bucket is empty, however slow we are
            refused = post(service)
        assert refused.status_code == 429
        time.sleep(int(refused.headers["retry-after-ms"]) / 1000)
        assert post(service).status_code == 200


async def test_tokens_per_second_are_limited_too() -> None:
    body = evaluate_body()
    tokens = billed_tokens(body["state"], body["questions"])
    # Room for one request, refilled in about a second: of five sent at once, the first gets
    # through and the next is refused unless a whole second passed between them.
    with embedded(tps=tokens * 1.01) as service:
        responses = await _burst(service, 5)
        stats = service.stats()
    statuses = sorted(r.status_code for r in responses)
    assert statuses[0] == 200 and statuses[-1] == 429 and set(statuses) == {200, 429}
    refused = next(r for r in responses if r.status_code == 429)
    assert "tokens per second" in refused.json()["error"]["message"]
    assert stats["tokens_accepted"] == statuses.count(200) * tokens  # a 429 consumes nothing


def test_a_request_larger_than_the_tps_bucket_says_it_can_never_fit() -> None:
    with embedded(tps=50) as service:
        refused = post(service, evaluate_body(state="word " * 100))
        assert refused.status_code == 429
        assert "more than the whole tokens-per-second limit" in refused.json()["error"]["message"]
        assert int(refused.headers["retry-after"]) >= 1
        assert post(service, evaluate_body(state="short")).status_code == 200


def test_validation_comes_before_the_rate_limit() -> None:
    with embedded(rpm=1) as service:
        assert post(service).status_code == 200
        assert post(service, evaluate_body(state=None)).status_code == 422


def test_admin_limits_take_effect_at_once() -> None:
    with embedded(rpm=6000) as service:
        url = service.base_url + "/_admin/limits"
        changed = httpx.post(url, json={"rpm": 1}, headers=auth())
        assert changed.status_code == 200
        assert changed.json() == {"limits": {"rpm": 1, "tps": 10_000_000_000}}
        assert [post(service).status_code for _ in range(2)] == [200, 429]
        service.set_limits(rpm=600_000, tps=10**6)  # the Python method, same effect
        time.sleep(0.01)  # a hundred requests' worth at the new rate
        assert post(service).status_code == 200
        assert service.stats()["limits"] == {"rpm": 600_000, "tps": 1_000_000}


@pytest.mark.parametrize(
    ("body", "status"),
    [
        ({"rpm": 0}, 422),
        ({"tps": -5}, 422),
        ({"rpm": "fast"}, 422),
        ({"burst": 3}, 422),
        ([60], 422),
        ({}, 200),
    ],
)
def test_admin_limits_validates_its_body(
    service: EmbeddedService, body: object, status: int
) -> None:
    url = service.base_url + "/_admin/limits"
    response = httpx.post(url, content=orjson.dumps(body), headers=auth())
    assert response.status_code == status, response.text


def test_admin_faults_take_effect_at_once() -> None:
    with embedded(fault_500=1.0) as service:
        assert post(service).status_code == 500
        url = service.base_url + "/_admin/faults"
        changed = httpx.post(url, json={"fault_500": 0, "fault_529": 1}, headers=auth())
        assert changed.status_code == 200, changed.text
        assert changed.json()["fault_529"] == 1 and changed.json()["fault_500"] == 0
        assert post(service).status_code == 529
        service.set_faults(fault_529=0.0)  # the Python method, same effect
        assert post(service).status_code == 200
        assert service.stats()["faults"]["529"] == 1
        with pytest.raises(ConfigError, match="latency: not a fault setting"):
            service.set_faults(latency=1.0)
        with pytest.raises(ConfigError, match="fault rate slow"):
            service.set_faults(fault_slow=2.0)


@pytest.mark.parametrize(
    "body",
    [
        {"fault_slow": 2},
        {"fault_500": 0.6, "fault_529": 0.6},
        {"slow_seconds": -1},
        {"latency": 1},
        {"fault_drop": "often"},
        [0.5],
    ],
)
def test_admin_faults_validates_its_body(service: EmbeddedService, body: object) -> None:
    response = httpx.post(
        service.base_url + "/_admin/faults", content=orjson.dumps(body), headers=auth()
    )
    assert response.status_code == 422, response.text
    assert post(service).status_code == 200  # the session's service injects nothing still


@pytest.mark.parametrize(
    ("method", "path"),
    [("POST", "/_admin/limits"), ("POST", "/_admin/faults"), ("GET", "/_admin/stats")],
)
def test_admin_endpoints_need_the_key(service: EmbeddedService, method: str, path: str) -> None:
    url = service.base_url + path
    response = httpx.request(method, url, json={"rpm": 1}, headers=auth("nope"))
    assert response.status_code == 401
    assert service.stats()["limits"]["rpm"] != 1


def test_stats_report_every_counter(service: EmbeddedService) -> None:
    before = service.stats()
    post(service)
    httpx.get(service.base_url + "/v1/models")  # a 401
    after = httpx.get(service.base_url + "/_admin/stats", headers=auth()).json()
    assert after["requests_accepted"] == before["requests_accepted"] + 1
    body = evaluate_body()
    assert after["tokens_accepted"] - before["tokens_accepted"] == billed_tokens(
        body["state"], body["questions"]
    )
    assert int(after["responses"]["401"]) >= 1
    assert set(after) >= {
        "responses",
        "requests_accepted",
        "tokens_accepted",
        "rate_limited",
        "overloaded",
        "faults_injected",
        "faults",
        "limits",
        "inflight",
        "peak_inflight",
    }
    assert after["inflight"] == 0 and after["peak_inflight"] >= 1


SCHEDULE = "0.4:rpm=60,tps=5000;1.2:rpm=120"
LIMITS_IN_TURN = [
    {"rpm": 6000, "tps": 10_000_000_000},
    {"rpm": 60, "tps": 5000},
    {"rpm": 120, "tps": 5000},
]


@on_virtual_clock
async def test_the_limit_schedule_steps_at_its_times() -> None:
    settings = ServiceSettings(api_key=API_KEY, **{**LIFTED, "rpm": 6000}, limit_schedule=SCHEDULE)
    service = ServiceApp(settings)
    loop = asyncio.get_running_loop()
    seen = []
    service.start_schedule()
    for at in (0.0, 0.39, 0.41, 1.19, 1.21, 3600.0):
        await asyncio.sleep(at - loop.time())
        seen.append(service.limiter.limits())
    await service.stop_schedule()
    first, second, third = LIMITS_IN_TURN
    assert seen == [first, first, second, second, third, third]


def test_the_served_limit_schedule_changes_limits_without_notice() -> None:
    # Over HTTP only the order is certain (a busy machine may miss a step while it sleeps):
    # the limits seen are the schedule's, in its order, ending with the last.
    with embedded(rpm=6000, limit_schedule=SCHEDULE) as service:
        seen = [service.stats()["limits"]]
        while seen[-1] != LIMITS_IN_TURN[-1]:
            time.sleep(0.05)
            limits = service.stats()["limits"]
            if limits != seen[-1]:
                seen.append(limits)
    assert seen == [limits for limits in LIMITS_IN_TURN if limits in seen]


async def test_more_in_flight_than_the_cap_is_529() -> None:
    with embedded(max_inflight=2, latency=0.8) as service:
        responses = await _burst(service, 8)
        stats = service.stats()
    statuses = sorted(r.status_code for r in responses)
    assert statuses.count(200) >= 2 and 529 in statuses and set(statuses) <= {200, 529}
    overloaded = next(r for r in responses if r.status_code == 529)
    assert overloaded.headers["retry-after"] == "1"
    assert overloaded.json()["error"]["type"] == "overloaded_error"
    assert stats["peak_inflight"] == 2 and stats["overloaded"] == statuses.count(529)
    assert stats["requests_accepted"] == statuses.count(200)  # a 529 consumes nothing


async def test_latency_sleeps_without_blocking_the_loop() -> None:
    with embedded(latency=0.5) as service:
        responses = await _burst(service, 10)
        stats = service.stats()
    assert all(r.status_code == 200 for r in responses)
    # Answers overlapped: a sleep that blocked the loop would serve one request at a time.
    assert stats["peak_inflight"] >= 2


def test_requests_logging_never_shows_the_key(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level("INFO", logger="evalpipe.service.access")
    with embedded(log_requests=True) as service:
        post(service)
    assert any("/v1/evaluate" in r.getMessage() for r in caplog.records)
    assert all(API_KEY not in r.getMessage() for r in caplog.records)
