"""Exactly once across hosts when the tier or a host stalls (issue 56), with faults made for real:
two `evalpipe run` hosts (a home and a cache folder each) on one object-store output in moto's
S3, sharing a real redis-server: the Redis process frozen (SIGSTOP) past the lease, a host's
process group frozen past its lease while the other runs, a host's connection to Redis cut by a
proxy that stops forwarding (nothing refused, nothing passes).

Each ends with every id in the output exactly once after a last resume, every run ended 0 or 9
(which schedulers retry), and the stalled host committed nothing after its lease lapsed. The
leases are short (`shared.lease_seconds`), so the tests are quick; the fleet's figures at the
issue's scale are bench/fleet_stalls.py's.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from conftest import API_KEY, Redis, _s3_env, _s3_environment, embedded, free_port, job_config
from test_tier_hosts import corpus, ended, start

pytestmark = [pytest.mark.subprocess, pytest.mark.ray]
LEASE = 3.0  # `shared.lease_seconds` of these hosts
ROWS = 240


def host(tmp: Path, name: str, base_url: str, tier: str, output: str, format: str) -> Path:
    folder = tmp / name
    (folder / "cache").mkdir(parents=True, exist_ok=True)
    config = job_config(tmp, base_url, shared={"url": tier, "lease_seconds": LEASE})
    config["output"] = {"path": output, "format": format}
    (folder / "job.yaml").write_text(yaml.safe_dump(config))
    return folder


def output_ids(output: str, endpoint: str) -> list[int]:
    from evalpipe.reading import open_output

    with _s3_env(endpoint):
        return sorted(open_output(output).rows["id"].to_list())


def wait_for(what: Any, process: Any) -> None:
    while not what():
        assert process.poll() is None, ended(process)
        time.sleep(0.05)


class Proxy:
    """A TCP proxy to `port` on loopback (asyncio, in a thread of its own) that can stop
    forwarding: `cut` keeps every connection open and passes nothing either way, as a network
    partition does (nothing refused, nothing answered); `mend` forwards again."""

    def __init__(self, port: int) -> None:
        self.target, self.port = port, free_port()
        self.flowing = threading.Event()
        self.flowing.set()
        self.loop = asyncio.new_event_loop()
        ready = threading.Event()
        self.thread = threading.Thread(target=self._run, args=(ready,), daemon=True)
        self.thread.start()
        ready.wait()

    def _run(self, ready: threading.Event) -> None:
        asyncio.set_event_loop(self.loop)
        server = self.loop.run_until_complete(
            asyncio.start_server(self._serve, "127.0.0.1", self.port)
        )
        ready.set()
        self.loop.run_forever()
        server.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.target)

        async def pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
            with contextlib.suppress(ConnectionError, asyncio.CancelledError):
                while data := await src.read(65536):
                    while not self.flowing.is_set():  # cut: held, never passed on
                        await asyncio.sleep(0.05)
                    dst.write(data)
                    await dst.drain()
            dst.close()

        await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))

    def cut(self) -> None:
        self.flowing.clear()

    def mend(self) -> None:
        self.flowing.set()

    def close(self) -> None:
        async def down() -> None:
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

        asyncio.run_coroutine_threadsafe(down(), self.loop).result(timeout=5)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=5)


@contextlib.contextmanager
def fleet(tmp: Path, s3_endpoint: str) -> Iterator[tuple[Any, Redis, str, dict[str, str]]]:
    """A service (about 12 s of sending for the corpus), a redis-server of the test's own, an
    output URI in moto's S3 and the hosts' S3 environment."""
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


def last_resume(folder: Path, ray: str, env: dict[str, str]) -> None:
    rc, events = ended(start(folder, API_KEY, ray, env))
    assert rc == 0, events


def lost(events: list[dict[str, Any]]) -> bool:
    return any(e.get("error_type") == "LeaseLost" for e in events if e["event"] == "error")


@pytest.mark.parametrize("format", ["parquet", "delta"])
def test_a_host_frozen_past_its_lease_commits_nothing_once_thawed(
    tmp_path: Path, s3_endpoint: str, ray_address: str, format: str
) -> None:
    with fleet(tmp_path, s3_endpoint) as (service, server, output, env):
        a = host(tmp_path, "a", service.base_url, server.url, output, format)
        b = host(tmp_path, "b", service.base_url, server.url, output, format)
        first = start(a, API_KEY, ray_address, env)
        wait_for(lambda: service.stats()["requests_accepted"] >= 40, first)
        os.killpg(first.pid, signal.SIGSTOP)  # the host's driver, frozen
        try:
            time.sleep(LEASE + 1)  # its lease lapsed
            rc, events = ended(start(b, API_KEY, ray_address, env))
            assert rc == 0, events
        finally:
            os.killpg(first.pid, signal.SIGCONT)
        rc, events = ended(first)
        assert rc == 9 and lost(events), events
        assert output_ids(output, s3_endpoint) == list(range(ROWS))  # b's whole: a added none
        last_resume(a, ray_address, env)
    assert output_ids(output, s3_endpoint) == list(range(ROWS))


def test_a_tier_frozen_past_the_lease_stops_the_host_then_a_second_one_finishes(
    tmp_path: Path, s3_endpoint: str, ray_address: str
) -> None:
    with fleet(tmp_path, s3_endpoint) as (service, server, output, env):
        assert server.process is not None
        a = host(tmp_path, "a", service.base_url, server.url, output, "delta")
        b = host(tmp_path, "b", service.base_url, server.url, output, "delta")
        first = start(a, API_KEY, ray_address, env)
        wait_for(lambda: service.stats()["requests_accepted"] >= 40, first)
        os.kill(server.process.pid, signal.SIGSTOP)
        try:
            rc, events = ended(first)  # it cannot confirm its lease: it stops
        finally:
            os.kill(server.process.pid, signal.SIGCONT)
        assert rc == 9 and lost(events), events
        rc, events = ended(start(b, API_KEY, ray_address, env))
        assert rc == 0, events
        last_resume(a, ray_address, env)
    assert output_ids(output, s3_endpoint) == list(range(ROWS))


def test_a_host_cut_off_from_the_tier_stops_and_the_host_that_took_over_finishes(
    tmp_path: Path, s3_endpoint: str, ray_address: str
) -> None:
    with fleet(tmp_path, s3_endpoint) as (service, server, output, env):
        proxy = Proxy(server.port)
        try:
            cut_url = f"redis://127.0.0.1:{proxy.port}/0"
            a = host(tmp_path, "a", service.base_url, cut_url, output, "parquet")
            b = host(tmp_path, "b", service.base_url, server.url, output, "parquet")
            first = start(a, API_KEY, ray_address, env)
            wait_for(lambda: service.stats()["requests_accepted"] >= 40, first)
            proxy.cut()
            time.sleep(LEASE + 1)  # a's lease lapsed in Redis: b takes the output
            second = start(b, API_KEY, ray_address, env)
            rc, events = ended(first)
            assert rc == 9 and lost(events), events
            proxy.mend()
            rc, events = ended(second)
            assert rc == 0, events
        finally:
            proxy.mend()
            proxy.close()
        last_resume(b, ray_address, env)
    assert output_ids(output, s3_endpoint) == list(range(ROWS))
