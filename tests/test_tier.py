"""The shared tier (evalpipe.tier) against a real redis-server: its check at start, the account's
schedule, the answer cache and its claims, what is learned, the output's lease, and a tier
lost and back.

Each test is an account of its own (its own API key, so its own key prefix) on the session's
redis-server; a test that kills its tier or needs a password starts a redis-server of its own
(about 50 ms)."""

from __future__ import annotations

import asyncio
import secrets
import time
from pathlib import Path
from typing import Any

import pytest

from conftest import QUESTIONS, Redis, free_port, job_config
from evalpipe.cache import open_job_cache
from evalpipe.config import parse_config
from evalpipe.errors import ConfigError, OutputLocked
from evalpipe.output.lease import leased  # the lease alone, without the OS lock
from evalpipe.planning import Learned, Request, state_key
from evalpipe.tier import Tier, TierAddress, TierPace, account_prefix, job_address

pytestmark = pytest.mark.subprocess  # redis-server


def address(url: str, password_env: str = "EVALPIPE_SHARED_PASSWORD") -> TierAddress:
    return TierAddress(url, password_env, account_prefix("embedded", secrets.token_hex(8)))


def config(tmp: Path, url: str, monkeypatch: pytest.MonkeyPatch, **shared: Any) -> Any:
    key = secrets.token_hex(8)  # an account of this test's own
    monkeypatch.setenv("TIER_TEST_KEY", key)
    raw = job_config(tmp, "embedded", shared={"url": url, **shared})
    raw["service"]["api_key_env"] = "TIER_TEST_KEY"
    return parse_config(raw)


# --------------------------------------------------------------------------- the start's check


def test_a_wrong_password_is_one_line_naming_the_setting_and_the_variable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    server = Redis(tmp_path, "right-password").start()
    try:
        monkeypatch.setenv("TIER_PASSWORD", "wrong-password")
        with pytest.raises(ConfigError) as refused:
            Tier.of(address(server.url, "TIER_PASSWORD"))
        message = str(refused.value)
        assert (
            message.startswith("shared.url: ") and "$TIER_PASSWORD holds the wrong one" in message
        )
        assert "wrong-password" not in message and "right-password" not in message
        monkeypatch.delenv("TIER_PASSWORD")
        with pytest.raises(ConfigError, match=r"\$TIER_PASSWORD is not set"):
            Tier.of(address(server.url, "TIER_PASSWORD"))
        monkeypatch.setenv("TIER_PASSWORD", "right-password")
        tier = Tier.of(address(server.url, "TIER_PASSWORD"))
        assert tier.up
        tier.close()
    finally:
        server.stop()


def test_evalpipe_run_with_a_wrong_password_exits_2_having_touched_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq
    import yaml
    from click.testing import CliRunner

    from evalpipe.cli.main import main

    server = Redis(tmp_path, "right-password").start()
    try:
        pq.write_table(pa.table({"id": [1], "text": ["a review"]}), tmp_path / "in.parquet")
        job = job_config(tmp_path, "embedded", shared={"url": server.url})
        (tmp_path / "job.yaml").write_text(yaml.safe_dump(job))
        monkeypatch.setenv("EVALPIPE_SHARED_PASSWORD", "wrong-password")
        result = CliRunner().invoke(main, ["run", str(tmp_path / "job.yaml")])
    finally:
        server.stop()
    assert result.exit_code == 2, result.output
    assert result.stderr.startswith("ConfigError: shared.url: ") and "wrong-password" not in (
        result.output
    )
    assert "$EVALPIPE_SHARED_PASSWORD holds the wrong one" in result.stderr
    assert not (tmp_path / "out").exists()  # no lock, no staging, nothing sent


def test_a_tier_that_is_not_there_is_exit_2_at_start() -> None:
    url = f"redis://127.0.0.1:{free_port()}/0"  # nothing listens
    with pytest.raises(ConfigError, match=r"^shared\.url: .* cannot be reached") as refused:
        Tier.of(address(url))
    assert refused.value.exit_code == 2
    assert "$EVALPIPE_SHARED_PASSWORD" in str(refused.value)


def test_a_tier_that_evicts_keys_is_warned_about_once(tmp_path: Path) -> None:
    server = Redis(tmp_path, None, "--maxmemory", "64mb", "--maxmemory-policy", "allkeys-lru")
    server.start()
    try:
        warnings: list[str] = []
        tier = Tier.of(address(server.url), warnings.append)
        Tier.of(address(server.url), warnings.append)  # the process's, found again: no check
        assert len(warnings) == 1 and "maxmemory-policy allkeys-lru" in warnings[0]
        tier.close()
    finally:
        server.stop()


# --------------------------------------------------------------------------- the account's pace


def test_hosts_reserve_on_one_schedule_in_the_tier(redis_server: Redis) -> None:
    """Three hosts' schedules (one account) at 10 requests/s: half a second of burst goes at
    once, then one slot every 0.1 s whoever asks, so the 30th goes 2.5 s after the first."""

    async def reserve_all() -> list[float]:
        shared = address(redis_server.url)
        hosts = [TierPace(shared) for _ in range(3)]
        for host in hosts:
            host.set_limits(10.0, 1e9)
        go = []  # when each may go, on this machine's clock (the tier's is the same one)
        for i in range(30):
            asked = time.monotonic()
            go.append(asked + await hosts[i % 3].reserve(1, 100))
        return [t - go[0] for t in go]

    going = asyncio.run(reserve_all())
    # Never ahead of one schedule (three of their own would let the 30th go after 0.5 s):
    # the burst, then 0.1 s apart, whoever asks. (A loaded machine asks later: no upper bound.)
    assert all(t >= (i + 1) * 0.1 - 0.5 - 0.01 for i, t in enumerate(going))
    assert going[-1] >= 2.49


def test_tokens_bind_on_the_shared_schedule_too(redis_server: Redis) -> None:
    async def reserve() -> list[float]:
        pace = TierPace(address(redis_server.url))
        pace.set_limits(100.0, 1000.0)
        return [await pace.reserve(1, 500), await pace.reserve(1, 500)]

    first, second = asyncio.run(reserve())
    assert first == 0.0 and second == pytest.approx(0.5, abs=0.02)


def test_an_account_budget_made_without_a_tier_moves_onto_one_a_job_brings(
    redis_server: Redis,
) -> None:
    """A job with `shared.url` joins an account's Budget that a job without it made (one Ray
    cluster): from then on the Budget's grants are reserved on the account's schedule in the
    tier, where the other hosts see them."""
    from evalpipe.limits.account import AccountBudget

    shared = address(redis_server.url)

    async def lease() -> None:
        budget = AccountBudget(1200, 1e9, 0.995)
        await budget.register("untiered", 1200, 1e9, 0.995)
        await budget.register("tiered", 1200, 1e9, 0.995, tier=shared)
        await budget.lease(1, 100)

    asyncio.run(lease())
    client = redis_server.client()
    assert client.exists(shared.key("pace", "requests"), shared.key("pace", "tokens")) == 2


def test_a_budget_that_cannot_reach_the_tier_says_so_to_the_job(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The Budget actor reads the password from its own environment (on a Ray cluster started
    apart, not the driver's): without it, the job is told its pace is not shared."""
    from evalpipe.limits.account import AccountBudget

    server = Redis(tmp_path, "right-password").start()
    monkeypatch.delenv("TIER_PASSWORD", raising=False)
    shared = address(server.url, "TIER_PASSWORD")

    async def register() -> list[str]:
        budget = AccountBudget(1200, 1e9, 0.995, tier=shared)
        return await budget.register("job", 1200, 1e9, 0.995, tier=shared)

    try:
        warnings = asyncio.run(register())
        monkeypatch.setenv("TIER_PASSWORD", "right-password")
        assert asyncio.run(register()) == []
    finally:
        server.stop()
    assert len(warnings) == 1 and warnings[0].startswith("shared.url: the account's budget")
    assert "$TIER_PASSWORD" in warnings[0]


def test_a_schedule_whose_tier_is_lost_falls_back_to_the_hosts_own(tmp_path: Path) -> None:
    server = Redis(tmp_path).start()

    class File:
        reserved = 0

        def set_limits(self, rps: float, tps: float) -> None: ...

        def reserve(self, requests: int, tokens: int) -> float:
            File.reserved += 1
            return 0.25

        def close(self) -> None: ...

    async def reserve() -> tuple[float, float]:
        pace = TierPace(address(server.url), fallback=File())
        pace.set_limits(10.0, 1e9)
        await pace.reserve(1, 1)
        server.stop()
        return await pace.reserve(1, 1), await pace.reserve(1, 1)

    assert asyncio.run(reserve()) == (0.25, 0.25)  # the second without asking the tier again
    assert File.reserved == 2


# --------------------------------------------------------------------------- answers and claims


def _answers() -> dict[str, Any]:
    return {
        "helpful": {"type": "noul", "noul": 0.8},
        "sentiment": {"type": "choice", "choice": "positive", "confidence": 0.5,
                      "probabilities": {"positive": 0.7, "mixed": 0.2, "negative": 0.1}},
        "quality": {"type": "score", "score": 2.0, "confidence": 0.4,
                    "probabilities": {"0": 0.1, "1": 0.2, "2": 0.3, "3": 0.4}},
    }  # fmt: skip


def test_what_one_host_paid_another_reads_and_claims_keep_them_apart(
    tmp_path: Path, redis_server: Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    job = config(tmp_path, redis_server.url, monkeypatch)
    tokens = dict.fromkeys(QUESTIONS, 10)
    a = open_job_cache(job, QUESTIONS, tokens, tier=job_address(job))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "another-host"))  # no disk in common
    b = open_job_cache(job, QUESTIONS, tokens, tier=job_address(job))
    assert a.on and b.on and "shared tier" in a.note
    assert "redis://" not in a.note  # the note goes into the summary, the manifest, the XCom
    paid, other = state_key("paid by a"), state_key("claimed by a")
    assert a.claim([paid, other]) == set()
    assert b.claim([paid, other]) == {paid, other}  # a's to pay: b waits
    assert b.claimed_elsewhere([paid]) == {paid}
    request = Request(tuple(QUESTIONS), 40, 10)
    a.add(paid, _answers(), "model-1.13.0", 90, [request])
    a.commit()
    hits = b.lookup([paid, other])
    assert set(hits) == {paid} and hits[paid].model == "model-1.13.0"
    assert hits[paid].answers["sentiment"]["choice"] == "positive"
    assert a.claim([other]) == set()  # renewed: still a's
    packed = open_job_cache(job, QUESTIONS, tokens, tier=job_address(job), packed=True)
    assert packed.lookup([paid]) == {}  # answers given alone are not served to packs


def test_a_claim_lasts_the_lease_when_that_is_shorter(
    tmp_path: Path, redis_server: Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    from evalpipe.cache.shared import CLAIM_SECONDS

    client, tokens = redis_server.client(), dict.fromkeys(QUESTIONS, 10)
    for lease, lasts in ((3.0, 3.0), (60.0, CLAIM_SECONDS)):
        job = config(tmp_path, redis_server.url, monkeypatch, lease_seconds=lease)
        cache = open_job_cache(job, QUESTIONS, tokens, tier=job_address(job))
        assert cache.claim_seconds == lasts
        assert cache.claim([state_key("claimed")]) == set()
        prefix = job_address(job).prefix  # this account's keys
        ttls = [client.pttl(k) for k in client.keys(prefix.replace("{", "[{]") + ":c:*")]
        assert len(ttls) == 1 and lasts * 1000 - 1000 < ttls[0] <= lasts * 1000


def test_the_age_limit_is_the_keys_time_to_live(
    tmp_path: Path, redis_server: Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    job = config(tmp_path, redis_server.url, monkeypatch)
    job = job.model_copy(update={"cache": job.cache.model_copy(update={"max_age_days": 2})})
    cache = open_job_cache(job, QUESTIONS, dict.fromkeys(QUESTIONS, 10), tier=job_address(job))
    cache.add(state_key("s"), _answers(), "model-1.13.0", 90, [Request(tuple(QUESTIONS), 40, 10)])
    cache.commit()
    client, prefix = redis_server.client(), job_address(job).prefix  # this account's keys
    ttls = [client.ttl(k) for k in client.keys(prefix.replace("{", "[{]") + ":a:*")]
    assert ttls and all(2 * 86_400 - 60 < t <= 2 * 86_400 for t in ttls)


def test_answers_expire_by_default_and_the_age_limit_holds_on_reading(
    tmp_path: Path, redis_server: Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    from evalpipe.cache.shared import SHARED_MAX_AGE_DAYS

    job = config(tmp_path, redis_server.url, monkeypatch)
    assert job.cache.max_age_days is None  # unset: with a tier, answers still expire
    tokens, request = dict.fromkeys(QUESTIONS, 10), Request(tuple(QUESTIONS), 40, 10)
    cache = open_job_cache(job, QUESTIONS, tokens, tier=job_address(job))
    cache.add(state_key("s"), _answers(), "model-1.13.0", 90, [request])
    cache.commit()
    client, prefix = redis_server.client(), job_address(job).prefix
    ttls = [client.ttl(k) for k in client.keys(prefix.replace("{", "[{]") + ":a:*")]
    day = 86_400
    assert ttls and all(
        SHARED_MAX_AGE_DAYS * day - 60 < t <= SHARED_MAX_AGE_DAYS * day for t in ttls
    )
    # Kept by a host with a long limit, read by one with a short limit: too old is a miss.
    old = job.model_copy(update={"cache": job.cache.model_copy(update={"max_age_days": 30})})
    short = job.model_copy(update={"cache": job.cache.model_copy(update={"max_age_days": 1})})
    monkeypatch.setattr(time, "time", lambda: 1_000_000_000.0)  # paid 1e9 s after the epoch
    long_lived = open_job_cache(old, QUESTIONS, tokens, tier=job_address(old))
    long_lived.add(state_key("old"), _answers(), "model-1.13.0", 90, [request])
    long_lived.commit()
    monkeypatch.setattr(time, "time", lambda: 1_000_000_000.0 + 2 * day)  # two days later
    old_cache = open_job_cache(old, QUESTIONS, tokens, tier=job_address(old))
    short_cache = open_job_cache(short, QUESTIONS, tokens, tier=job_address(short))
    assert old_cache.lookup([state_key("old")])
    assert short_cache.lookup([state_key("old")]) == {}


def test_a_value_forged_with_another_key_is_a_miss_with_one_warning(
    tmp_path: Path, redis_server: Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another tenant of the Redis rewrites this account's values with evalpipe's own code but
    its own API key, each state given another state's answer: each is a miss, said once,
    never an answer; so are a forged learned value and canary baseline."""
    import evalpipe.tier.seal as seal
    from evalpipe.planning.kept import TierKept
    from evalpipe.planning.learned import CANARY_FILE
    from evalpipe.planning.ratios import FILE_NAME

    job = config(tmp_path, redis_server.url, monkeypatch)
    tokens, request = dict.fromkeys(QUESTIONS, 10), Request(tuple(QUESTIONS), 40, 10)
    honest = open_job_cache(job, QUESTIONS, tokens, tier=job_address(job))
    states = [state_key(f"s{i}") for i in range(5)]
    for i, state in enumerate(states):
        honest.add(state, {**_answers(), "helpful": {"type": "noul", "noul": i / 10}},
                   "model-1.13.0", 90, [request])  # fmt: skip
        honest.commit()
    assert set(honest.lookup(states)) == set(states)
    victim = job_address(job)
    assert victim is not None
    client = redis_server.client()
    keys = sorted(client.keys(victim.prefix.replace("{", "[{]") + ":a:*"))
    payloads = [client.get(k)[seal.TAG :] for k in keys]
    seal.remember(victim.prefix, job.service.identity, "the-forger's-own-api-key")
    for key, payload in zip(keys, payloads[1:] + payloads[:1], strict=True):
        client.set(key, victim.seal(key, payload))
    TierKept(FILE_NAME, victim).keep(job.service.identity, job.model, {"ratio": 99.0})
    baseline = {"rows": {"1": {"state": "x", "answers": {}}}}
    TierKept(CANARY_FILE, victim).keep(job.service.identity, job.model, {"sets": {"d": baseline}})
    warnings: list[str] = []
    Tier.of(victim, warnings.append)._forged_said = False
    fresh = open_job_cache(job, QUESTIONS, tokens, tier=job_address(job), warn=warnings.append)
    assert fresh.lookup(states) == {}  # a miss: paid again, never another state's answer
    assert fresh.lookup(states) == {}
    learned = Learned(job.service.identity, job.model, tier=victim)
    assert learned.ratio() is None and learned.canary("d") is None
    said = [w for w in warnings if "failed their check" in w]
    assert len(said) == 1 and "never as an answer" in said[0], warnings
    # Values of the wrong shape, sealed with the right key: nothing kept, never a crash.
    kept = Learned(job.service.identity, job.model, tier=victim)
    kept.keep_canary("d", {"rows": ["not", "a", "mapping"]})
    assert kept.canary("d") is None
    kept.keep_canary("e", {"rows": {"1": {"state": 3, "answers": "x"}}})
    assert kept.canary("e") is None


def test_what_is_learned_is_kept_in_the_tier(
    tmp_path: Path, redis_server: Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    job = config(tmp_path, redis_server.url, monkeypatch)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "first-pod"))
    first = Learned(job.service.identity, job.model, tier=job_address(job))
    first.keep_ratio(1.2345, "run a")
    first.keep_cap(7, "run a")
    first.keep_measurement({"rows": 4, "questions": "x"}, "packing measurement")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "fresh-pod"))
    fresh = Learned(job.service.identity, job.model, tier=job_address(job))
    ratio, packing = fresh.ratio(), fresh.packing()
    assert ratio is not None and ratio.ratio == 1.2345 and ratio.source == "run a"
    assert packing is not None and packing.max_questions == 7
    assert packing.measurement == {"rows": 4, "questions": "x"}
    assert not (tmp_path / "fresh-pod").exists() and not (tmp_path / "first-pod").exists()


# --------------------------------------------------------------------------- the output's lease


def test_a_second_host_on_a_leased_output_is_refused_at_once(
    tmp_path: Path, redis_server: Redis
) -> None:
    from evalpipe.tier import lease as lease_module

    tier = address(redis_server.url)
    output = "s3://bucket/nightly/out"
    with leased(output, tier, 2.0):
        held = r"s3://bucket/nightly/out is in use by pid \d+"
        with pytest.raises(OutputLocked, match=held) as refused, leased(output, tier):
            pass
        assert refused.value.exit_code == 9 and redis_server.url not in str(refused.value)
        with leased("s3://bucket/nightly/other", tier):  # another output: free
            pass
    with leased(output, tier):  # released at the end: free again
        pass
    # A host that dies stops renewing: its lease lapses, and the next run takes it.
    dead = lease_module.OutputLease(Tier.of(tier), output, "pid 1 on a-dead-pod", seconds=0.3)
    assert dead.take() is None
    dead._stop.set()  # its renewals end, as with kill -9; the lease is not released
    with pytest.raises(OutputLocked, match="a-dead-pod"), leased(output, tier):
        pass
    asyncio.run(asyncio.sleep(0.5))
    with leased(output, tier):
        pass


def test_a_local_folder_takes_no_lease_its_os_lock_is_enough(
    tmp_path: Path, redis_server: Redis
) -> None:
    from evalpipe.output.lease import held_lease

    with leased(tmp_path / "out", address(redis_server.url)):
        assert held_lease(tmp_path / "out") is None


def test_each_new_holder_gets_a_larger_fencing_token(redis_server: Redis) -> None:
    from evalpipe.tier import OutputLease

    tier = Tier.of(address(redis_server.url))
    output = f"s3://bucket/{secrets.token_hex(4)}"
    tokens = []
    for holder in range(3):
        lease = OutputLease(tier, output, f"holder {holder}", seconds=5.0)
        assert lease.take() is None
        tokens.append(lease.token)
        lease.confirm()
        lease.release()
    assert tokens[0] >= 1 and tokens == sorted(set(tokens))


def test_a_frozen_tier_past_the_lease_ends_it_for_good_though_it_thaws(
    tmp_path: Path,
) -> None:
    import os
    import signal

    from evalpipe.errors import LeaseLost
    from evalpipe.tier import OutputLease

    server = Redis(tmp_path).start()
    assert server.process is not None
    warnings: list[str] = []
    try:
        lease = OutputLease(Tier.of(address(server.url), warnings.append), "s3://b/o", "a", 1.0)
        assert lease.take() is None
        lease.confirm()
        assert lease.steady()
        os.kill(server.process.pid, signal.SIGSTOP)  # nothing refused, nothing answered
        try:
            time.sleep(0.4)  # a quarter lease unconfirmed: nothing new is sent, yet ours
            assert not lease.steady()
            lease.confirm()
            time.sleep(0.8)  # the lease's length: unconfirmed since
            with pytest.raises(LeaseLost, match="could not be confirmed") as lost:
                lease.confirm()
            assert lost.value.exit_code == 9
        finally:
            os.kill(server.process.pid, signal.SIGCONT)
        time.sleep(0.6)  # renewals would answer again: the lease stays lost
        with pytest.raises(LeaseLost):
            lease.confirm()
        assert sum("lease" in w and "lost" in w for w in warnings) == 1, warnings
        lease.release()
    finally:
        server.stop()


def test_a_lease_another_host_took_is_lost_at_its_next_renewal(redis_server: Redis) -> None:
    from evalpipe.errors import LeaseLost
    from evalpipe.tier import OutputLease
    from evalpipe.tier.lease import lease_key

    tier = Tier.of(address(redis_server.url))
    output = f"s3://bucket/{secrets.token_hex(4)}"
    ours = OutputLease(tier, output, "pid 1 on host-a", seconds=2.0)
    assert ours.take() is None
    redis_server.client().delete(lease_key(output))  # lapsed as if this host had stalled
    theirs = OutputLease(tier, output, "pid 2 on host-b", seconds=2.0)
    assert theirs.take() is None and theirs.token > ours.token
    time.sleep(0.7)  # a renewal (every quarter second) finds host-b's
    with pytest.raises(LeaseLost, match="host-b took it"):
        ours.confirm()
    theirs.confirm()
    ours.release()  # not ours: host-b keeps it
    theirs.confirm()
    theirs.release()


# --------------------------------------------------------------------------- lost and back


def test_a_tier_lost_is_one_warning_a_miss_and_nothing_kept_then_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from evalpipe.tier import client as client_module

    server = Redis(tmp_path).start()
    warnings: list[str] = []
    tier = Tier.of(address(server.url), warnings.append)
    key = address(server.url).key("k")
    assert tier.put_many([(key, b"v", None)]) and tier.get_many([key]) == [b"v"]
    server.stop()
    assert tier.get_many([key]) == [None] and not tier.put_many([(key, b"w", None)])
    assert tier.claim([key], b"me", 1.0) is None and tier.holders([key]) is None
    assert len(warnings) == 1 and "lost" in warnings[0] and "goes on" in warnings[0]
    server.start()  # back, empty
    monkeypatch.setattr(client_module, "RETRY_SECONDS", 0.0)
    try:
        tier.get_many([key])  # still within the pause: not asked
        monkeypatch.setattr(tier, "_down_until", 0.0)
        assert tier.get_many([key]) == [None]
        assert tier.up and "is back" in warnings[-1]
    finally:
        tier.close()
        server.stop()


def test_a_job_without_shared_url_has_no_tier(tmp_path: Path) -> None:
    assert job_address(parse_config(job_config(tmp_path, "embedded"))) is None


def test_the_python_api_names_the_tier_with_the_service() -> None:
    import evalpipe as ep

    url = "rediss://tier.example:6380/0"
    assert ep.Service("embedded", "model-1.13.0", shared=url).config()["shared"] == {"url": url}
    section = {"url": url, "password_env": "TEAM_REDIS_PASSWORD"}
    assert ep.Service("embedded", "model-1.13.0", shared=section).config()["shared"] == section


@pytest.mark.parametrize(
    ("url", "why"),
    [
        ("redis://:s3cr3t@tier:6379/0", "holds a user or password"),
        ("redis://tier:6379/0?password=s3cr3t", "holds a credential among its parameters"),
        ("http://tier:6379/0", "must be redis://"),
        ("redis://tier:port/0", "holds a user or password"),  # as a password with a / reads
        ("redis://[tier/0", "not a URL"),
    ],
)
def test_a_tier_url_that_cannot_be_used_is_refused_naming_the_key(
    tmp_path: Path, url: str, why: str
) -> None:
    with pytest.raises(ConfigError, match=rf"^shared\.url: .*{why}") as refused:
        parse_config(job_config(tmp_path, "embedded", shared={"url": url}))
    assert "s3cr3t" not in str(refused.value) and "tier" not in str(refused.value)


# --------------------------------------------------------------------------- fencing


@pytest.mark.parametrize("format", ["parquet", "delta"])
def test_a_commit_from_an_older_holder_is_refused_by_the_output(
    redis_server: Redis, s3_endpoint: str, monkeypatch: pytest.MonkeyPatch, format: str
) -> None:
    """Host a stalls with its lease still counted as its own (the moment a check cannot
    close); host b took the output meanwhile. a's next commit reaches the store and is
    refused there: the output holds b's larger fencing token."""
    from conftest import _s3_env
    from evalpipe.errors import LeaseLost
    from evalpipe.output import lease as output_lease
    from evalpipe.output.sink import Sink
    from evalpipe.reading import open_output
    from evalpipe.tier import OutputLease
    from evalpipe.tier.lease import lease_key
    from sinkdata import SCHEMA, answered

    tier = address(redis_server.url)
    out = f"s3://tables/fence-{secrets.token_hex(4)}/out"
    where = output_lease.place(out)
    options: dict[str, Any] = {"format": format, "part_rows": 2, "write_seconds": 0}
    with _s3_env(s3_endpoint), leased(out, tier, 30.0):
        a = Sink.open(out, SCHEMA, "fp", run_id="a", **options)
        a.resume()
        a.append([answered(0), answered(1)])  # a batch: committed with a's token
        assert a.broken is None and a.lease is not None
        a.lease._stop.set()  # a stalls: no renewal says what follows
        redis_server.client().delete(lease_key(where))  # its lease lapsed
        b_lease = OutputLease(Tier.of(tier), where, "pid 2 on host-b", 30.0)
        assert b_lease.take() is None and b_lease.token > a.lease.token
        monkeypatch.setitem(output_lease._HELD, where, b_lease)
        b = Sink.open(out, SCHEMA, "fp", run_id="b", **options)
        b.resume()
        b.append([answered(2), answered(3)])
        a.append([answered(4), answered(5)])  # a wakes: its lease still reads as its own
        assert isinstance(a.broken, LeaseLost) and "fencing token" in str(a.broken)
        b.finish({}, "finished")
        b_lease.release()
        ids = sorted(open_output(out).rows["review_id"].to_list())
    assert ids == [0, 1, 2, 3]  # a's late batch is not in it


def test_without_a_tier_an_output_records_no_fence(tmp_path: Path) -> None:
    from sinkdata import answered, manifest_of, run

    run(tmp_path / "out", [answered(0)])
    assert "fence" not in manifest_of(tmp_path / "out")
