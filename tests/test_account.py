"""The account's Budget on a real Ray cluster: found by every job of the account, placed on the
driver's node, the lowest configured limits hold (with a warning), and it ends once idle.

A second driver is a real second process joined to this cluster (`ray.init(address=...)`).
When it ends itself is shown on a virtual clock, its actor's own end stood in for."""

from __future__ import annotations

import asyncio
import io
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import polars as pl
import pytest

from conftest import embedded, job_config, run_config
from evalpipe.limits.account import NAMESPACE, AccountBudget, account_budget, account_name
from evalpipe.limits.lease import Report
from test_budget import run_virtual

ROOT = Path(__file__).resolve().parent.parent
URL = "http://127.0.0.1:9"
KEY = "sk-account-test-0123456789abcdef"
LIMITS = (1200.0, 250_000.0, 0.995)


def gone(name: str) -> bool:
    import ray

    try:
        ray.get_actor(name, namespace=NAMESPACE)
    except ValueError:
        return True
    return False


def end(handle: Any) -> None:
    import ray

    ray.kill(handle)


def test_the_name_is_a_digest_of_url_and_key_never_the_key() -> None:
    name = account_name(URL, KEY)
    assert KEY not in name and KEY[-8:] not in name
    assert name == account_name(URL + "/", KEY)  # one account however the URL is written
    assert name != account_name(URL, KEY + "x")
    assert name != account_name("http://127.0.0.1:10", KEY)


def test_two_jobs_share_one_budget_and_the_lowest_limits_hold(ray_address: str) -> None:
    import ray

    first, warnings = account_budget(URL, KEY, "job-a", LIMITS)
    assert warnings == []
    second, warnings = account_budget(URL, KEY, "job-b", (600.0, 250_000.0, 0.995))
    assert first._actor_id == second._actor_id
    assert warnings == [
        "limits.requests_per_minute: 600 is lower than the 1200 other jobs on this account set; "
        "it now holds for all of them"
    ]
    third, warnings = account_budget(URL, KEY, "job-c", LIMITS)
    assert len(warnings) == 1 and "another job on this account set 600" in warnings[0]
    stats = ray.get(third.stats.remote())
    assert stats["jobs"] == 3 and stats["rps"] == pytest.approx(10 * 0.995)
    assert stats["node"] == ray.get_runtime_context().get_node_id()
    ray.get(first.unregister.remote("job-b"))  # the low job is done: the others' limits hold
    assert ray.get(first.stats.remote())["rps"] == pytest.approx(20 * 0.995)
    grant = ray.get(first.lease.remote(1, 10, Report(accepted=1)))
    assert grant.requests == 1 and grant.tokens == 10
    end(first)


def test_another_driver_finds_the_budget(ray_address: str) -> None:
    import ray

    handle, _ = account_budget(URL, KEY + "-2", "here", LIMITS)
    script = textwrap.dedent(
        f"""
        import ray
        from evalpipe.limits.account import account_budget
        ray.init(address={ray_address!r}, logging_level="ERROR", log_to_driver=False)
        handle, warnings = account_budget({URL!r}, {KEY + "-2"!r}, "there", {LIMITS!r})
        print(ray.get(handle.stats.remote())["jobs"], warnings)
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, check=True
    )
    assert done.stdout.strip().splitlines()[-1] == "2 []"
    assert ray.get(handle.stats.remote())["jobs"] == 2
    end(handle)


def test_it_ends_once_no_job_has_leased_for_a_while(ray_address: str) -> None:
    import ray

    handle, _ = account_budget(URL, KEY + "-idle", "job", LIMITS, idle_seconds=0.5)
    name = account_name(URL, KEY + "-idle")
    ray.get(handle.lease.remote(1, 1))
    deadline = time.monotonic() + 60
    while not gone(name) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert gone(name)
    again, warnings = account_budget(URL, KEY + "-idle", "next", LIMITS)  # made anew
    assert warnings == [] and ray.get(again.stats.remote())["jobs"] == 1
    end(again)


def test_leases_keep_it_alive_and_it_ends_idle_seconds_after_the_last() -> None:
    ended: list[float] = []

    class Watched(AccountBudget):
        def _end(self) -> None:  # the Ray actor's own end, which needs a Ray actor
            ended.append(self._clock())

    async def scenario(loop: asyncio.AbstractEventLoop) -> None:
        budget = Watched(1200, 250_000, 0.995, idle_seconds=10.0, clock=loop.time)
        await budget.register("job", 1200, 250_000, 0.995)
        for _ in range(5):  # a lease every 8 s: never 10 s without one
            await asyncio.sleep(8)
            leased.append(loop.time())
            await budget.lease(1, 1)
        assert ended == []
        await asyncio.sleep(30)

    leased: list[float] = []
    run_virtual(scenario)
    assert ended == [pytest.approx(leased[-1] + 10.0, abs=1e-3)]


def test_a_running_jobs_keepalive_keeps_it_without_leases() -> None:
    ended: list[float] = []

    class Watched(AccountBudget):
        def _end(self) -> None:
            ended.append(self._clock())

    async def scenario(loop: asyncio.AbstractEventLoop) -> None:
        budget = Watched(1200, 250_000, 0.995, idle_seconds=10.0, clock=loop.time)
        await budget.register("job", 1200, 250_000, 0.995)
        await budget.lease(1, 1)
        for _ in range(20):  # 40 s of a job that sends without leasing again
            await asyncio.sleep(2)
            budget.keepalive()
        last.append(loop.time())
        assert ended == []
        await asyncio.sleep(30)

    last: list[float] = []
    run_virtual(scenario)
    assert ended == [pytest.approx(last[0] + 10.0, abs=1e-3)]


def test_a_job_that_leases_once_runs_past_idle_seconds(
    ray_address: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Under very high limits one lease covers all a worker sends: the job keeps the Budget
    alive by its keepalive calls, runs well past `idle_seconds` and ends exactly-once (it
    died with the Budget when only leases counted: bench e, 1M rows, 2026-11-23), on the
    Budget it started with (none died and was replaced)."""
    import evalpipe.send.fleet
    from evalpipe.engine import EventLog

    def short_lived(*args: Any, **options: Any) -> Any:
        return account_budget(*args, **options, idle_seconds=1.0)

    monkeypatch.setattr(evalpipe.send.fleet, "account_budget", short_lived)
    monkeypatch.setattr(evalpipe.send.fleet, "KEEPALIVE_SECONDS", 1 / 3)  # a third of idle
    rows = 24
    pl.DataFrame({"id": range(rows), "text": [f"state {i}" for i in range(rows)]}).write_parquet(
        tmp_path / "in.parquet"
    )
    lifted = {"requests_per_minute": 1e9, "tokens_per_second": 1e12}
    said = io.StringIO()
    with embedded(latency=0.2) as service:  # 24 rows, 2 at a time: about 2.5 s
        config = job_config(
            tmp_path, service.base_url, limits=lifted, concurrency={"max_in_flight": 2}
        )
        summary = run_config(config, log=EventLog(stream=said))
    assert summary["rows_answered"] == rows
    assert summary["wall_seconds"] > 1.0  # the job did outlive idle_seconds
    assert "budget actor died" not in said.getvalue()  # kept alive, not replaced
    out = pl.read_parquet(tmp_path / "out" / "*.parquet")
    assert out.height == rows and out["id"].n_unique() == rows


@pytest.mark.ray
def test_a_budget_found_by_name_is_trusted_only_once_it_answers(
    ray_runtime: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`get_if_exists` may hand back an actor that has died (its name not yet released): it is
    looked up again until one answers its register call."""
    import ray

    from evalpipe.limits import account

    real = account._find_or_make
    dead = real(account_name(URL, KEY + "-dead"), LIMITS, 60.0, "")
    ray.get(dead.keepalive.remote())
    ray.kill(dead)
    deadline = time.monotonic() + 30  # ray.kill is asynchronous: until a call fails, it lives
    with pytest.raises(ray.exceptions.RayActorError):
        while time.monotonic() < deadline:
            ray.get(dead.keepalive.remote(), timeout=10)
            time.sleep(0.05)
    found: list[Any] = []

    def dead_first(*args: Any) -> Any:
        found.append(dead if not found else real(*args))
        return found[-1]

    monkeypatch.setattr(account, "_find_or_make", dead_first)
    handle, _ = account_budget(URL, KEY + "-found", "job-a", LIMITS, wait=60)
    assert len(found) == 2 and found[1] is handle
    assert ray.get(handle.stats.remote())["jobs"] == 1
    assert ray.get(handle.unregister.remote("job-a", True))  # the last job: it ends now
    deadline = time.monotonic() + 30
    while not gone(account_name(URL, KEY + "-found")):
        assert time.monotonic() < deadline
        time.sleep(0.1)


@pytest.mark.ray
def test_a_budget_that_does_not_answer_gives_way_to_one_of_the_jobs_own(
    ray_runtime: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    import ray
    from ray.exceptions import GetTimeoutError

    import evalpipe.send.fleet as fleet

    def hung(*args: Any, **options: Any) -> Any:
        raise GetTimeoutError("Get timed out: some object(s) not ready.")

    monkeypatch.setattr(fleet, "account_budget", hung)
    budget, warnings = fleet._account_budget(URL, KEY, "job-b", LIMITS)
    assert "does not answer" in warnings[0] and "budget of its own" in warnings[0]
    deadline = time.monotonic() + 30  # its register call is not waited for
    while ray.get(budget.stats.remote())["jobs"] != 1:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    end(budget)


def test_a_job_killed_without_a_word_stops_holding_its_limits_once_its_keepalive_is_silent() -> (
    None
):
    """A run killed with -9 never unregisters: its low limits would hold its rerun (and every
    job of the account) for as long as the Budget lives. Once its keepalive has been silent for
    `STALE_SECONDS` the running jobs' lowest holds; a driver that was only stopped and calls
    again holds its limits again."""
    from evalpipe.limits.account import STALE_SECONDS

    class Watched(AccountBudget):
        def _end(self) -> None:  # the Ray actor's own end, which needs a Ray actor
            pass

    async def scenario(loop: asyncio.AbstractEventLoop) -> list[float]:
        budget = Watched(1200, 250_000, 0.995, idle_seconds=30.0, clock=loop.time)
        await budget.register("killed", 600, 250_000, 0.995)
        await budget.register("rerun", 6000, 250_000, 0.995)
        held = [budget._held[0]]
        for _ in range(int(STALE_SECONDS) + 2):  # the rerun's keepalive, the killed one silent
            await asyncio.sleep(1)
            budget.keepalive("rerun")
        held.append(budget._held[0])
        budget.keepalive("killed")  # it was only stopped: it holds again
        held.append(budget._held[0])
        await asyncio.sleep(31)  # both silent: the Budget ends (its watchdog done)
        return held

    assert run_virtual(scenario) == [600, 6000, 600]


def test_a_job_alone_on_the_budget_is_warned_of_no_other_job() -> None:
    """Once the jobs that set other limits are done (or silent: killed), a job registering is
    told of nobody's limits, and its own hold."""
    from evalpipe.limits.account import STALE_SECONDS

    class Watched(AccountBudget):
        def _end(self) -> None:
            pass

    async def scenario(loop: asyncio.AbstractEventLoop) -> list[Any]:
        budget = Watched(1200, 250_000, 0.995, idle_seconds=60.0, clock=loop.time)
        said = [await budget.register("first", 600, 250_000, 0.995)]
        budget.unregister("first")
        said.append(await budget.register("second", 1200, 250_000, 0.995))
        said.append(budget._held[0])
        await asyncio.sleep(STALE_SECONDS + 1)  # "second" killed: silent since
        said.append(await budget.register("third", 3000, 250_000, 0.995))
        said.append(await budget.register("fourth", 6000, 250_000, 0.995))  # "third" runs
        said.append(budget._held[0])
        await asyncio.sleep(61)  # all silent: the Budget ends (its watchdog done)
        return said

    first, second, held, third, fourth, last = run_virtual(scenario)
    assert first == second == third == [] and held == 1200
    assert len(fourth) == 1 and "another job on this account set 3000" in fourth[0]
    assert last == 3000
