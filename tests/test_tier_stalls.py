"""Exactly once across hosts when the tier or a host stalls (issue 56), with faults made for real:
two `evalpipe run` hosts (a home and a cache folder each) on one object-store output in moto's
S3, sharing a real redis-server: the Redis process frozen (SIGSTOP) past the lease, a host's
process group frozen past its lease while the other runs, a host's connection to Redis cut by a
proxy that stops forwarding (nothing refused, nothing passes).

Each ends with every id in the output exactly once after a last resume, every run ended 0 or 9
(which schedulers retry), and the stalled host committed nothing after its lease lapsed. The
stall lands while host a is well under way (`PAID`); then the service's limit is lifted, so the
rest goes quickly. The leases are short (`shared.lease_seconds`, and with them the claims of
states to pay), so the tests are quick, and a stalled host's lease is waited out by watching it
leave Redis. Host b (which is never stalled) and the last resume, whose exit and output are what
is checked, run in this process as that host (`here`: its cache folder), on the session's Ray;
host a, the one stalled, is an `evalpipe run` process of its own. The fleet's figures at the
issue's scale are bench/fleet_stalls.py's.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from conftest import API_KEY, LIFTED, Redis, _s3_env, _s3_environment, embedded, job_config
from netdoubles import cut_proxy
from test_tier_hosts import corpus, ended, here, lapsed, start

pytestmark = [pytest.mark.subprocess, pytest.mark.ray]
LEASE = 3.0  # `shared.lease_seconds` of host b: a healthy host keeps it through any pause
STALLED_LEASE = 1.5  # host a's, shorter than one stalled call to the tier (2 s): lost in one
ROWS = 100
PAID = 30  # the stall lands once host a was paid this many: 70 rows (3.5 s) before its end


def host(tmp: Path, name: str, base_url: str, tier: str, output: str, format: str) -> Path:
    folder = tmp / name
    (folder / "cache").mkdir(parents=True, exist_ok=True)
    lease = STALLED_LEASE if name == "a" else LEASE
    config = job_config(tmp, base_url, shared={"url": tier, "lease_seconds": lease})
    config["output"] = {"path": output, "format": format}
    config["concurrency"] = {"actors": 1}  # each host's actors are new Ray workers: one will do
    (folder / "job.yaml").write_text(yaml.safe_dump(config))
    return folder


def output_ids(output: str, endpoint: str) -> list[int]:
    from evalpipe.reading import open_output

    with _s3_env(endpoint):
        return sorted(open_output(output).rows["id"].to_list())


def paid(service: Any, process: Any) -> None:
    """Until host a (`process`) was paid `PAID` rows: its run is under way, far from its end."""
    while service.stats()["requests_accepted"] < PAID:
        assert process.poll() is None, ended(process)
        time.sleep(0.05)


@contextlib.contextmanager
def fleet(tmp: Path, s3_endpoint: str) -> Iterator[tuple[Any, Redis, str, dict[str, str]]]:
    """A service (1200 RPM: 5 s of sending for the corpus, until the stall lifts it), a
    redis-server of the test's own, an output URI in moto's S3 and the hosts' S3 environment."""
    corpus(tmp, ROWS)
    server = Redis(tmp).start()
    try:
        with embedded(latency=0.05, rpm=1200) as service:
            output = f"s3://tables/stall-{secrets.token_hex(4)}/out"
            yield service, server, output, _s3_environment(s3_endpoint)
    finally:
        if server.process is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(server.process.pid, signal.SIGCONT)
        server.stop()


def lost(events: list[dict[str, Any]]) -> bool:
    return any(e.get("error_type") == "LeaseLost" for e in events if e["event"] == "error")


@pytest.mark.parametrize("format", ["parquet", "delta"])
def test_a_host_frozen_past_its_lease_commits_nothing_once_thawed(
    tmp_path: Path, s3_endpoint: str, ray_address: str, format: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    with fleet(tmp_path, s3_endpoint) as (service, server, output, env):
        a = host(tmp_path, "a", service.base_url, server.url, output, format)
        b = host(tmp_path, "b", service.base_url, server.url, output, format)
        first = start(a, API_KEY, ray_address, env)
        paid(service, first)
        os.killpg(first.pid, signal.SIGSTOP)  # the host's driver, frozen
        service.set_limits(rpm=LIFTED["rpm"])  # the rest goes quickly
        try:
            lapsed(server, output)
            here(b, monkeypatch, **env)  # it exits 0
        finally:
            os.killpg(first.pid, signal.SIGCONT)
        rc, events = ended(first)
        assert rc == 9 and lost(events), events
        assert output_ids(output, s3_endpoint) == list(range(ROWS))  # b's whole: a added none
        here(a, monkeypatch, **env)  # the last resume
    assert output_ids(output, s3_endpoint) == list(range(ROWS))


def test_a_tier_frozen_past_the_lease_stops_the_host_then_a_second_one_finishes(
    tmp_path: Path, s3_endpoint: str, ray_address: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    with fleet(tmp_path, s3_endpoint) as (service, server, output, env):
        assert server.process is not None
        a = host(tmp_path, "a", service.base_url, server.url, output, "delta")
        b = host(tmp_path, "b", service.base_url, server.url, output, "delta")
        first = start(a, API_KEY, ray_address, env)
        paid(service, first)
        os.kill(server.process.pid, signal.SIGSTOP)
        service.set_limits(rpm=LIFTED["rpm"])  # the rest goes quickly
        try:
            rc, events = ended(first)  # it cannot confirm its lease: it stops
        finally:
            os.kill(server.process.pid, signal.SIGCONT)
        assert rc == 9 and lost(events), events
        lapsed(server, output)  # Redis, thawed, lets a's lease go (its expiry is by the clock)
        here(b, monkeypatch, **env)  # it exits 0
        here(a, monkeypatch, **env)  # the last resume
    assert output_ids(output, s3_endpoint) == list(range(ROWS))


def test_a_host_cut_off_from_the_tier_stops_and_the_host_that_took_over_finishes(
    tmp_path: Path, s3_endpoint: str, ray_address: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    with fleet(tmp_path, s3_endpoint) as (service, server, output, env):
        with cut_proxy(server.port) as proxy:
            cut_url = f"redis://127.0.0.1:{proxy.port}/0"
            a = host(tmp_path, "a", service.base_url, cut_url, output, "parquet")
            b = host(tmp_path, "b", service.base_url, server.url, output, "parquet")
            first = start(a, API_KEY, ray_address, env)
            paid(service, first)
            proxy.cut()
            service.set_limits(rpm=LIFTED["rpm"])  # the rest goes quickly
            lapsed(server, output)  # a's lease lapsed in Redis: b takes the output
            here(b, monkeypatch, **env)  # it exits 0, while a is still cut off
            rc, events = ended(first)
            assert rc == 9 and lost(events), events
            proxy.mend()
        here(b, monkeypatch, **env)  # the last resume
    assert output_ids(output, s3_endpoint) == list(range(ROWS))
