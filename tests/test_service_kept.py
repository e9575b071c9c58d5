"""The embedded service kept for the process (`evalpipe.service.kept_service`): what the Python
API's jobs find when they ask for the same settings again, and how long it lives.

Real service processes throughout: the connections of jobs (`evalpipe.send.Connection`, as a
job opens it) on threads of this process, and a script of its own that is interrupted through
its process group (as a Jupyter kernel is) and then killed with SIGKILL.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import psutil
import pytest

from evalpipe.config import LimitsConfig, ServiceConfig
from evalpipe.send import Connection
from evalpipe.service import EmbeddedService, kept_services, stop_kept

pytestmark = pytest.mark.subprocess  # every test starts service processes
ENDED_SECONDS = 30.0  # a guard against a hang, not a speed requirement


def _ended(pid: int, seconds: float = ENDED_SECONDS) -> bool:
    """Whether the process `pid` is gone (or a zombie) within `seconds`."""
    end = time.monotonic() + seconds
    while True:
        try:
            if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
                return True
        except psutil.NoSuchProcess:
            return True
        if time.monotonic() >= end:
            return False
        time.sleep(0.05)


def _kept_at(url: str) -> EmbeddedService:
    [service] = [s for s in kept_services() if s.base_url == url]
    return service


def test_jobs_share_one_key_and_one_kept_service_per_settings_and_a_dead_one_is_replaced(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Four jobs at once on threads, the key's variable unset: one one-off key is made and
    exported, and one service kept for it, which answers after their connections closed. Other
    limits are another service; a job that does not keep (the CLI's) stops its own; a kept
    service that died is replaced by a fresh one for the next job."""
    env = "EVALPIPE_KEPT_TEST_KEY"
    monkeypatch.setenv(env, "set")
    monkeypatch.delenv(env)  # unset, and unset again after the test
    service = ServiceConfig(base_url="embedded", api_key_env=env)
    limits = LimitsConfig(requests_per_minute=6_000, tokens_per_second=1_000_000)

    def connect(limits: LimitsConfig = limits, keep: bool = True) -> str:
        with Connection(service, limits, keep) as connection:
            return connection.ready.result()  # probed: the service took the job's key

    try:
        with ThreadPoolExecutor(4) as pool:
            urls = set(pool.map(lambda _: connect(), range(4)))
        assert len(urls) == 1, urls  # two keys (or two starts) would be two services
        [url] = urls
        kept = _kept_at(url)
        assert kept.settings.api_key == os.environ[env]  # the one-off key, made once
        assert kept.stats()["responses"]["200"] >= 4  # it answers: the four probes, and after

        other = connect(LimitsConfig(requests_per_minute=3_000, tokens_per_second=1_000_000))
        assert other != url and _kept_at(other).pid != kept.pid

        once = connect(keep=False)
        assert once not in (url, other)
        with pytest.raises(httpx.ConnectError):  # stopped with its job
            httpx.get(f"{once}/v1/models")

        dead = kept.pid
        os.kill(dead, signal.SIGKILL)
        assert _ended(dead)
        fresh = connect()
        assert fresh != url and _kept_at(fresh).pid != dead
        assert [s.settings == kept.settings for s in kept_services()].count(True) == 1
    finally:
        running = [s.pid for s in kept_services()]
        stop_kept()
    assert kept_services() == [] and all(_ended(pid, 0) for pid in running)


SCRIPT = """
    import time
    from evalpipe.service import ServiceSettings, kept_service
    settings = ServiceSettings(api_key="kept-key")
    try:
        print(kept_service(settings).pid, flush=True)
        time.sleep(120)  # the test interrupts this process's group here
    except KeyboardInterrupt:
        again = kept_service(settings)
        print(again.pid, again.stats()["requests_accepted"], flush=True)
    time.sleep(120)  # and kills this process here
"""


def _why(script: subprocess.Popen[str]) -> str:
    """What the script said on stderr, once it is killed."""
    script.kill()
    return script.communicate()[1][-3000:]


def test_a_kept_service_outlives_an_interrupt_of_its_group_and_ends_with_a_sigkill() -> None:
    """A kernel's interrupt (SIGINT to its process group) is for the call: the kept service
    answers the next one as it is. A kernel killed with SIGKILL runs no exit handler: its kept
    service ends anyway (its stdin closes)."""
    script = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(SCRIPT)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        start_new_session=True,  # a group of its own, as a kernel's
    )  # fmt: skip
    try:
        assert script.stdout is not None
        first = script.stdout.readline().split()
        assert first, _why(script)
        pid = int(first[0])
        os.killpg(script.pid, signal.SIGINT)
        again = script.stdout.readline().split()
        assert again == [str(pid), "0"], _why(script)  # the same service, answering
        os.kill(script.pid, signal.SIGKILL)
        assert script.wait() == -signal.SIGKILL
        assert _ended(pid), f"the kept service {pid} outlived its process"
    finally:
        if script.poll() is None:
            script.kill()
            script.wait()
