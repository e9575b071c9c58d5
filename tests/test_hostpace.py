"""Jobs on one machine share the account's pace through a file (evalpipe.limits.hostpace).

The schedule's arithmetic runs on a fake clock; the lock is shown by real processes that
reserve at once and lose no reservation; the Budget's use of it by two Budgets that lease
concurrently; and the whole by two real `evalpipe run` jobs, each on a Ray of its own, against
a service with strict limits."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

from conftest import API_KEY, embedded, job_config
from evalpipe.limits.account import AccountBudget, account_name
from evalpipe.limits.budget import Budget
from evalpipe.limits.hostpace import BURST, FOLDER, HostPace, host_file
from evalpipe.limits.local import LocalPacer
from test_budget import ServiceBucket, drive, run_virtual

ROOT = Path(__file__).resolve().parent.parent


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def pace(path: Path, clock: Callable[[], float], rps: float = 10.0, tps: float = 1e9) -> HostPace:
    opened = HostPace.open(path, clock)
    assert opened is not None
    opened.set_limits(rps, tps)
    return opened


def test_two_jobs_reserve_on_one_schedule(tmp_path: Path) -> None:
    clock = Clock()
    path = tmp_path / "account"
    a, b = pace(path, clock), pace(path, clock)
    # Half a second of burst at 10 requests/s: 5 go at once, whoever asks ...
    assert [p.reserve(1, 0) for p in (a, b, a, b, a)] == [0.0] * 5
    # ... then one every 0.1 s, in the order asked, across both.
    delays = [p.reserve(1, 0) for p in (b, a, b, a)]
    assert delays == pytest.approx([0.1, 0.2, 0.3, 0.4])
    clock.now += 10  # a quiet while: the schedule is free again, up to the burst
    assert a.reserve(1, 0) == 0.0


def test_tokens_bind_when_they_run_out_first(tmp_path: Path) -> None:
    clock = Clock()
    p = pace(tmp_path / "account", clock, rps=100.0, tps=1000.0)
    assert p.reserve(1, 500) == 0.0  # 0.5 s of tokens: the whole burst
    assert p.reserve(1, 500) == pytest.approx(0.5)  # requests would allow it after 0.01 s


def test_each_job_spaces_its_reservations_at_its_own_limits(tmp_path: Path) -> None:
    clock = Clock()
    path = tmp_path / "account"
    fast, slow = pace(path, clock, rps=10.0), pace(path, clock, rps=5.0)
    assert fast.reserve(5, 0) == 0.0  # the burst: 0.5 s of the schedule at 10/s
    assert slow.reserve(1, 0) == pytest.approx(0.2)  # takes 0.2 s of it at 5/s
    assert fast.reserve(1, 0) == pytest.approx(0.3)  # and 0.1 s after that


@pytest.mark.parametrize(
    "content",
    [b"", b"garbage", b"evhpace1" + b"\xff" * 16, b"other123" + b"\0" * 16],
    ids=["empty", "short", "nan", "foreign"],
)
def test_a_file_that_is_not_a_schedule_is_a_free_one(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "account"
    path.write_bytes(content)
    assert pace(path, Clock()).reserve(1, 0) == 0.0


def test_a_schedule_far_ahead_is_not_believed(tmp_path: Path) -> None:
    clock = Clock()
    path = tmp_path / "account"
    p = pace(path, clock)
    p.reserve(10, 0)
    clock.now -= 60  # another boot's clock, had the name not told them apart
    assert p.reserve(1, 0) == 0.0


def test_the_file_lives_per_machine_and_boot_and_is_named_by_the_digest(tmp_path: Path) -> None:
    name = account_name("http://127.0.0.1:9", "sk-secret-key")
    path = host_file(name, tmp_path)
    assert path.name == name and "sk-secret-key" not in str(path)
    assert path.parent.parent == tmp_path / FOLDER
    assert host_file(name, tmp_path) == path  # every job on this boot finds the same one


def test_the_first_job_of_a_boot_removes_the_earlier_boots_files(tmp_path: Path) -> None:
    path = host_file("evalpipe-budget-x", tmp_path)
    host = path.parent.name.rsplit("-", 1)[0]
    earlier = tmp_path / FOLDER / f"{host}-0123abcd"
    elsewhere = tmp_path / FOLDER / "another-host-0123abcd"
    for folder in (earlier, elsewhere):
        folder.mkdir(parents=True)
        (folder / "evalpipe-budget-x").write_bytes(b"old")
    assert HostPace.open(path) is not None
    assert not earlier.exists() and (elsewhere / "evalpipe-budget-x").exists()
    assert path.exists()


def test_an_unopenable_schedule_leaves_the_job_pacing_alone(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("a file where the folder should be")
    assert HostPace.open(blocker / "account") is None

    async def register() -> list[str]:
        budget = AccountBudget(1200, 250_000, 0.995, schedule=str(blocker / "account"))
        return await budget.register("job", 1200, 250_000, 0.995)

    (warning,) = asyncio.run(register())
    assert warning.startswith(f"cannot open {blocker / 'account'}: jobs on other Ray clusters")


@pytest.mark.subprocess
def test_processes_reserving_at_once_lose_no_reservation(tmp_path: Path) -> None:
    """Eight processes, 3,000 reservations each, on a clock that stands still: the schedule
    ends exactly 24,000 slots on. A lost update (no lock) would leave it short."""
    path = tmp_path / "account"
    code = textwrap.dedent(f"""
        from pathlib import Path
        from evalpipe.limits.hostpace import HostPace
        pace = HostPace.open(Path({str(path)!r}), clock=lambda: 0.0)
        pace.set_limits(1000.0, 1e9)
        for _ in range(3000):
            pace.reserve(1, 0)
    """)
    procs = [subprocess.Popen([sys.executable, "-c", code], cwd=ROOT) for _ in range(8)]
    assert [p.wait(timeout=600) for p in procs] == [0] * 8  # a guard against a hang
    # 24,000 reservations of 1 ms from 0 s: the schedule is at 24 s; one more ends 1 ms on.
    assert pace(path, lambda: 0.0, rps=1000.0).reserve(1, 0) == pytest.approx(24.001 - BURST)


def test_two_budgets_on_one_schedule_keep_its_pace_together(tmp_path: Path) -> None:
    """Two Budgets at 600 RPM each, leasing as fast as they may: alone each would take 40
    requests in about 3.5 s; sharing the schedule, the 80 take at least 7 s. On the virtual
    clock (the schedule file is real; its clock is the loop's), so the seconds cost nothing."""
    path = tmp_path / "account"

    async def scenario(loop: asyncio.AbstractEventLoop) -> tuple[float, list[float]]:
        clock = loop.time
        budgets = [
            Budget(600, 1e9, headroom=1.0, clock=clock, host=HostPace.open(path, clock))
            for _ in range(2)
        ]
        times: list[float] = []

        async def lease(budget: Budget) -> None:
            for _ in range(40):
                await budget.lease(1, 1)
                times.append(clock())

        start = clock()
        await asyncio.gather(*(lease(b) for b in budgets))
        return start, times

    start, times = run_virtual(scenario)
    assert times[-1] - start >= (80 - 2 * 10 * BURST) / 10 - 0.3
    alone_start, alone = run_virtual(lambda loop: _alone(loop, tmp_path / "other"))
    assert alone[-1] - alone_start < (80 - 2 * 10 * BURST) / 10 - 0.3  # what sharing changed


def test_the_measurements_pacer_and_a_budget_on_one_schedule_keep_its_pace_together(
    tmp_path: Path,
) -> None:
    """`packing.rows: auto` measures on a LocalPacer before the run's Budget sends. On the
    account's schedule the two keep to its limit together, even when the Budget starts while
    the measurement still sends (8 at a time): the service's one-second bucket refuses none
    of their requests. Each pacing alone, the same two overdraw it: what the schedule
    changes. On the virtual clock."""

    def scenario(shared: bool) -> tuple[ServiceBucket, list[float], list[float]]:
        service = ServiceBucket(10)
        measured: list[float] = []
        leased: list[float] = []

        async def run(loop: asyncio.AbstractEventLoop) -> None:
            def schedule() -> HostPace | None:
                return HostPace.open(tmp_path / f"account-{shared}", loop.time) if shared else None

            pacer = LocalPacer(600, 1e9, 1.0, schedule(), clock=loop.time)
            budget = Budget(600, 1e9, headroom=1.0, clock=loop.time, host=schedule())
            left = 40

            async def measuring() -> None:
                nonlocal left
                while left > 0:
                    left -= 1
                    await pacer.acquire(100)
                    measured.append(loop.time())
                    service.take(loop.time())

            def granted(now: float) -> None:
                leased.append(now)
                service.take(now)

            async def running() -> None:
                await asyncio.sleep(2.0)  # the measurement has half its requests to go
                await drive(loop, budget, 2, 4, 100, 10.0, granted)

            async with pacer:
                await asyncio.gather(running(), *(measuring() for _ in range(8)))

        run_virtual(run)
        return service, measured, leased

    service, measured, leased = scenario(shared=True)
    assert service.refused == 0
    assert len(measured) == 40 and len(leased) >= 40  # both sent: the Budget in the gaps
    assert leased[0] < measured[-1]  # they overlapped
    alone, _, _ = scenario(shared=False)
    assert alone.refused > 0  # without the schedule: the overlap overdraws the bucket


async def _alone(loop: asyncio.AbstractEventLoop, path: Path) -> tuple[float, list[float]]:
    """One Budget's 40 leases on a schedule of its own: the pace the pair halves."""
    budget = Budget(600, 1e9, headroom=1.0, clock=loop.time, host=HostPace.open(path, loop.time))
    start, times = loop.time(), []
    for _ in range(40):
        await budget.lease(1, 1)
        times.append(loop.time())
    return start, times


@pytest.mark.subprocess
def test_two_jobs_on_rays_of_their_own_share_the_limit(ray_runtime: None, tmp_path: Path) -> None:
    """Two `evalpipe run`s on two Rays, on one key against a service that enforces 2,400 RPM:
    one a process that starts a Ray of its own, the other in this process on the session's Ray
    (started 2 s later). They send as one, so the second job's arrival costs no burst of 429s
    (without the schedule file it costs 7-12 here at 1,800 RPM)."""
    from click.testing import CliRunner

    from evalpipe.cli.main import main

    rows = [
        {"id": i, "text": f"Review {i}: it {'works' if i % 3 else 'broke'}."} for i in range(120)
    ]
    with embedded(rpm=2400, latency=0.2) as service:
        configs = []
        for name in ("a", "b"):
            folder = tmp_path / name
            folder.mkdir()
            pq.write_table(pa.Table.from_pylist(rows), folder / "in.parquet")
            config = job_config(
                folder, service.base_url, limits={"requests_per_minute": 2400},
                concurrency={"actors": 1},  # one Ray actor a job: several are not the point
            )  # fmt: skip
            config["cache"] = {"enabled": False}
            (folder / "job.yaml").write_text(yaml.safe_dump(config))
            configs.append(folder / "job.yaml")
        env = {**os.environ, "EVAL_API_KEY": API_KEY}
        env.pop("RAY_ADDRESS", None)
        evalpipe = str(Path(sys.executable).with_name("evalpipe"))
        command = [evalpipe, "run", str(configs[0]), "--ray-address", "local"]
        first = subprocess.Popen(
            [*command, "--log-format", "json"], env=env, stderr=subprocess.PIPE, text=True
        )
        time.sleep(2.0)
        second = CliRunner().invoke(main, ["run", str(configs[1]), "--log-format", "json"])
        outputs = [first.communicate(timeout=600)[1], second.stderr]  # a guard against a hang
        assert [first.returncode, second.exit_code] == [0, 0], outputs
        refused = service.stats()["rate_limited"]
    summaries = [
        json.loads(line) for out in outputs for line in out.splitlines() if '"summary"' in line
    ]
    assert [s["rows_answered"] for s in summaries if s["event"] == "summary"] == [120, 120]
    assert refused <= 3  # without the shared schedule: 7 and 12 in two runs (the arrival)


def test_the_measurements_pacer_paces_tokens_as_the_service_counts_them() -> None:
    """Told by `usage` that the service bills 150 tokens for 100 of ours (a pack's JSON), a
    LocalPacer paces 150 a request: 20 requests at 1,000 tokens/s take 3 s, not 2."""

    async def run(loop: asyncio.AbstractEventLoop) -> float:
        async with LocalPacer(60_000, 1_000, 1.0, None, clock=loop.time) as pacer:
            for _ in range(10):
                pacer.on_success(100, 150)
            start = loop.time()
            for _ in range(20):
                await pacer.acquire(100)
            return loop.time() - start

    assert run_virtual(run) == pytest.approx(3.0, abs=0.1)
