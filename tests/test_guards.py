"""The guard rails: a cost cap (`--max-cost`, exit 6) and a time limit (`--max-duration`,
`--deadline`, exit 7), and the one table of exit codes.

Quick tests check the parsing, the admission arithmetic, `plan`'s answers and the table; the
runs join the session's Ray against embedded services of their own, whose counters say what
was billed: a cap at 40% of the plan's cost stops just under it and the resume pays each row
once; a time limit on a slowed service stops the run and the resume finishes it.
"""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml
from click.testing import CliRunner

from conftest import LIFTED, cli_run, embedded, job_config
from evalpipe.cli.guards import exit_code_epilog
from evalpipe.cli.main import main
from evalpipe.config import deadline_at, load_config, parse_config, with_limits
from evalpipe.config.guards import parse_deadline, parse_duration
from evalpipe.engine.guards import CostCap, time_limit
from evalpipe.engine.stopping import EXIT_CODES
from evalpipe.errors import (
    ConfigError,
    CostCapReached,
    DeadlineReached,
    EvalpipeError,
    exit_codes,
)
from evalpipe.planning import Request, prepare
from evalpipe.preflight import plan_figures

PRICE = 2.0  # dollars per million input tokens
ONE_ACTOR = {"actors": 1}  # the runs' one worker: how many is not what these tests test


def write_corpus(path: Path, n: int) -> None:
    rows = [{"id": i, "text": f"Review {i}: it {'works' if i % 3 else 'broke'} on day {i}, "
             + "and then " * (i % 5)} for i in range(n)]  # fmt: skip
    pq.write_table(pa.Table.from_pylist(rows), path)


def write_yaml(tmp: Path, config: dict[str, Any]) -> Path:
    path = tmp / "job.yaml"
    path.write_text(yaml.safe_dump(config), encoding="utf-8")
    return path


def invoke(*args: str) -> Any:
    return CliRunner().invoke(main, [*args])


def last_line(result: Any) -> str:
    return result.output.strip().splitlines()[-1]


# --------------------------------------------------------------------------- parsing


@pytest.mark.parametrize(
    ("given", "seconds"),
    [("90s", 90), ("30m", 1800), ("6h", 21600), ("1h30m", 5400), ("2d", 172800),
     (" 1.5h ", 5400), ("45", 45), (12, 12), (0.5, 0.5), ("1H 2M 3S", 3723)],
)  # fmt: skip
def test_durations_are_seconds_or_units(given: Any, seconds: float) -> None:
    assert parse_duration(given) == seconds


@pytest.mark.parametrize("given", ["6x", "h", "", "1h 30", "soon", True, [1]])
def test_a_bad_duration_says_the_forms(given: Any) -> None:
    with pytest.raises(ValueError, match="90s, 30m, 6h"):
        parse_duration(given)


def test_a_clock_deadline_is_the_next_such_local_time() -> None:
    now = datetime(2026, 11, 27, 5, 59, tzinfo=UTC).astimezone()
    at = deadline_at(parse_deadline(f"{now + timedelta(minutes=1):%H:%M}"), now)
    assert timedelta(0) < at - now <= timedelta(minutes=1)
    again = deadline_at(f"{now:%H:%M}", now)  # now itself: tomorrow's
    assert timedelta(hours=23) <= again - now <= timedelta(hours=25)


def test_an_iso_deadline_is_kept_and_local_when_it_has_no_zone() -> None:
    assert parse_deadline(datetime(2026, 11, 28, 6, 0)) == "2026-11-28T06:00:00"
    at = deadline_at(parse_deadline("2026-11-28T06:00"))
    assert at.tzinfo is not None
    assert at == datetime(2026, 11, 28, 6, 0).astimezone()
    zoned = deadline_at("2026-11-28T06:00+02:00")
    assert zoned == datetime(2026, 11, 28, 4, 0, tzinfo=UTC)


def test_an_unquoted_yaml_time_is_refused_with_how_to_write_it(tmp_path: Path) -> None:
    config = job_config(tmp_path, "embedded")
    path = write_yaml(tmp_path, config)
    text = path.read_text().replace("limits:\n", "limits:\n  deadline: 12:30\n", 1)
    path.write_text(text, encoding="utf-8")  # YAML 1.1 reads 12:30 as 12 * 60 + 30
    with pytest.raises(ConfigError, match=r"^limits\.deadline: 750 is a number: quote"):
        load_config(path)
    path.write_text(text.replace("12:30", "'12:30'"), encoding="utf-8")
    assert load_config(path).limits.deadline == "12:30"
    with pytest.raises(ConfigError, match=r"^limits\.deadline: 'tomorrow' is not a deadline"):
        parse_config(job_config(tmp_path, "embedded", limits={"deadline": "tomorrow"}))


def test_a_cost_cap_without_a_price_is_a_config_error_naming_the_key(tmp_path: Path) -> None:
    config = job_config(tmp_path, "embedded", limits={"max_cost_usd": 1.0})
    with pytest.raises(ConfigError, match=r"^limits\.max_cost_usd: a cost cap needs .*price"):
        parse_config(config)
    priced = parse_config({**config, "pricing": {"models": {"model-1.13.0": 0.5}}})
    assert priced.limits.max_cost_usd == 1.0
    plain = parse_config(job_config(tmp_path, "embedded"))
    with pytest.raises(ConfigError, match=r"^limits\.max_cost_usd: a cost cap needs"):
        with_limits(plain, max_cost_usd=2.0)
    with pytest.raises(ConfigError, match=r"^limits\.max_duration: '6 hours' is not a dur"):
        with_limits(plain, max_duration="6 hours")
    assert with_limits(plain, max_duration="6h", deadline=None).limits.max_duration == 21600


def test_the_flags_are_checked_before_anything_is_read(tmp_path: Path) -> None:
    write_corpus(tmp_path / "in.parquet", 10)
    path = write_yaml(tmp_path, job_config(tmp_path, "embedded"))
    zero = invoke("run", str(path), "--max-duration", "0s")
    assert zero.exit_code == 2 and "--max-duration" in zero.output
    bad = invoke("plan", str(path), "--deadline", "at six")
    assert bad.exit_code == 2 and "is not a deadline" in bad.output
    unpriced = invoke("plan", str(path), "--max-cost", "1")
    assert unpriced.exit_code == 2
    assert last_line(unpriced).startswith("ConfigError: limits.max_cost_usd: a cost cap needs")
    assert not (tmp_path / "out").exists()


# --------------------------------------------------------------------------- admission


def job(tokens: int, requests: int = 1) -> tuple[Request, ...]:
    """A job's requests of `tokens` in all (evalpipe's count), state 10 tokens each."""
    return tuple(Request(("q",), tokens // requests, 10) for _ in range(requests))


def test_a_job_is_admitted_only_while_in_flight_stays_within_half_of_what_is_left() -> None:
    cap = CostCap(usd=1.0, per_million=PRICE, measured=True)  # 500,000 tokens
    assert cap.tokens == 500_000
    assert cap.admit(0, job(200_000)) and cap.admit(1, job(50_000, requests=2))  # 250,000
    assert not cap.admit(2, job(1))  # half of what is left is in flight already
    assert not cap.refused and cap.next_tokens == 1  # it waits for those in flight
    cap.settle(0, 210_000)  # billed more than estimated: spent counts the service's
    assert cap.billed == 210_000 and cap.in_flight == 50_000
    assert cap.admit(2, job(95_000))  # 145,000 in flight: half of the 290,000 left
    assert not cap.admit(3, job(1)) and not cap.over()
    cap.billed += 300_000  # as if billed far above the estimates
    assert cap.over()  # 510,000 and 145,000 in flight: past it
    assert cap.spent == pytest.approx(1.02)
    assert not cap.admit(4, job(1))  # nothing fits while past the cap
    cap.settle(1, 0)  # back to the queue (its worker died): no longer in flight
    assert cap.in_flight == 95_000
    cap.settle(3, 0)  # never admitted: nothing to take back
    assert cap.in_flight == 95_000


def test_the_cap_is_reached_when_a_job_does_not_fit_with_nothing_in_flight() -> None:
    cap = CostCap(usd=1.0, per_million=PRICE, measured=True)
    assert cap.admit(0, job(300_000)) and not cap.admit(1, job(250_000))
    assert not cap.refused  # 300,000 are in flight: their bills may be lower
    cap.settle(0, 240_000)
    assert cap.admit(1, job(250_000))  # nothing in flight: up to all that is left
    cap.settle(1, 255_000)
    assert not cap.admit(2, job(10_000)) and cap.refused  # 495,000 + 10,000: reached
    assert cap.spent == pytest.approx(0.99)


def test_until_the_services_count_is_measured_a_quarter_of_what_is_left_is_in_flight() -> None:
    cap = CostCap(usd=1.0, per_million=PRICE)  # no kept ratio: ours assumed, not measured
    assert cap.admit(0, job(100_000)) and cap.admit(1, job(25_000))  # a quarter of 500,000
    assert not cap.admit(2, job(1)) and not cap.refused
    cap.measure(1.5, samples=3)  # measured high, from too few answers to trust: a quarter
    assert cap.over() is False and not cap.admit(2, job(1))
    cap.measure(1.0, samples=10)
    assert cap.measured and cap.admit(2, job(125_000))  # half of what is left from now on
    lone = CostCap(usd=1.0, per_million=PRICE)
    assert lone.admit(0, job(400_000))  # nothing in flight: a job up to the whole cap


def test_the_estimate_follows_the_services_count_per_token_of_ours() -> None:
    cap = CostCap(usd=1.0, per_million=PRICE, ratio=1.25, measured=True)
    assert cap.admit(0, job(100_000))  # 125,000 of the service's tokens
    assert not cap.admit(1, job(100_001))  # 250,001.25 in flight passes half the cap
    assert cap.admit(1, job(100_000))  # 250,000: exactly half
    assert not cap.over()
    cap.measure(1.3, samples=50)  # the count moved 4%: 260,000 in flight, far within
    assert not cap.over()
    cap.measure(5.5, samples=50)  # far higher: what was admitted is now past the cap
    assert cap.over()
    cap.settle(0, 450_000)
    cap.settle(1, 150_000)
    assert cap.in_flight == 0 and cap.billed == 600_000


@pytest.mark.parametrize("usd", [0.01, 1.0, 6.0, 1000.0])
def test_a_cap_of_any_size_is_spent_to_within_one_job_of_itself(usd: float) -> None:
    """Waves of 1,000-token jobs, each billed 3% above its estimate: the run stops only
    when a job does not fit with nothing in flight, within one job of the cap."""
    cap = CostCap(usd=usd, per_million=PRICE, measured=True)
    index = 0
    while not cap.refused:
        admitted = []
        while cap.admit(index, job(1_000)):
            admitted.append(index)
            index += 1
        assert not cap.over()  # a count 3% above ours never stops it early
        for i in admitted:
            cap.settle(i, 1_030)
        cap.measure(1.03, samples=50)
        if not admitted:
            break
    assert cap.refused and cap.tokens - 1_030 <= cap.billed <= cap.tokens


def test_no_cap_admits_everything_and_keeps_no_account() -> None:
    cap = CostCap()
    assert all(cap.admit(i, job(10**9)) for i in range(1000))
    assert not cap.refused and not cap.jobs and not cap.over()


def test_the_rest_of_a_cap_is_estimated_from_the_rows_paid_for_not_those_the_cache_gave() -> None:
    from evalpipe.engine.guards import cap_reached
    from evalpipe.engine.progress import Counters

    cap = CostCap(usd=6.0, per_million=PRICE, measured=True)
    cap.billed = 950_000  # $1.90
    counters = Counters(rows_total=900, rows_done=583, rows_by_request=200)  # 383 from cache
    counters.rows_from_cache = 383
    line = str(cap_reached(cap, counters, 583))
    # 317 rows left at $1.90 / 200 paid rows each: about $3.01, not $1.90 / 583 * 317 = $1.03
    assert "spent $1.900000 of the $6 cap" in line and "317 rows left" in line
    assert "about $3.011500 more" in line


def test_the_earlier_of_duration_and_deadline_is_the_time_limit(tmp_path: Path) -> None:
    config = parse_config(job_config(tmp_path, "embedded", limits={"max_duration": "2h"}))
    limit = time_limit(config, started=100.0)
    assert limit is not None and limit.at == 100.0 + 7200 and "2.0 h" in limit.what
    now = datetime.now().astimezone()
    soon = (now + timedelta(minutes=30)).isoformat()
    both = with_limits(config, deadline=soon)
    # started now: the deadline (30 min) comes before the duration (2 h), whatever the
    # monotonic clock reads (it counts from the machine's boot)
    limit = time_limit(both, started=time.monotonic(), now=now)
    assert limit is not None and limit.what.startswith("--deadline")
    assert time_limit(parse_config(job_config(tmp_path, "embedded")), 0.0) is None


# --------------------------------------------------------------------------- plan


def test_plan_says_when_the_corpus_passes_the_cap_or_the_time(tmp_path: Path) -> None:
    write_corpus(tmp_path / "in.parquet", 200)
    config = job_config(tmp_path, "embedded", pricing={"default": PRICE},
                        limits={"requests_per_minute": 600})  # fmt: skip
    path = write_yaml(tmp_path, config)
    figures = json.loads(invoke("plan", str(path), "--json").stdout)
    cost = figures["estimated_cost_usd"]
    assert figures["over_cost_cap"] is None and figures["fits_in_time"] is None
    over = json.loads(invoke("plan", str(path), "--json", "--max-cost", str(cost * 0.4)).stdout)
    assert over["over_cost_cap"] is True and over["max_cost_usd"] == pytest.approx(cost * 0.4)
    under = json.loads(invoke("plan", str(path), "--json", "--max-cost", str(cost * 2)).stdout)
    assert under["over_cost_cap"] is False
    # 200 requests at 600 RPM: at least 20 s.
    short = json.loads(invoke("plan", str(path), "--json", "--max-duration", "10s").stdout)
    assert short["fits_in_time"] is False and short["seconds_available"] == 10
    long = json.loads(invoke("plan", str(path), "--json", "--max-duration", "1m").stdout)
    assert long["fits_in_time"] is True
    text = invoke("plan", str(path), "--max-cost", str(cost * 0.4), "--max-duration", "10s")
    assert text.exit_code == 0
    assert "the corpus would cost more" in text.output and "exit 6" in text.output
    assert "the corpus does not fit" in text.output and "exit 7" in text.output


# --------------------------------------------------------------------------- exit codes


def test_one_table_of_exit_codes_in_help_and_for_every_error_class() -> None:
    table = dict(exit_codes())
    classes = [EvalpipeError, *EvalpipeError.__subclasses__()]
    assert {str(cls.exit_code) for cls in classes} <= set(table)
    assert {"0", "6", "7"} <= set(table)
    assert CostCapReached.exit_code == 6 and DeadlineReached.exit_code == 7
    assert {str(code) for code in EXIT_CODES.values()} <= set(table)  # 130, 143
    for args in (["--help"], ["run", "--help"]):
        shown = " ".join(invoke(*args).output.split())
        assert " ".join(exit_code_epilog().replace("\b", "").split()) in shown
        for code, meaning in table.items():
            assert f"{code} {meaning.split()[0]}" in shown


# --------------------------------------------------------------------------- runs


@pytest.mark.parametrize(
    ("rule", "factor"),
    [("words", 1.0), ("subword", 1.3)],  # the service counts as we do; ~1.6 times more
    ids=["our-count", "its-own-count"],
)
def test_a_cost_cap_at_40_percent_stops_within_5_percent_and_the_resume_pays_once(
    ray_runtime: None, tmp_path: Path, rule: str, factor: float
) -> None:
    rows = 300
    write_corpus(tmp_path / "in.parquet", rows)
    with embedded(token_rule=rule, token_factor=factor) as service:
        config = job_config(
            tmp_path, service.base_url, pricing={"default": PRICE}, concurrency=ONE_ACTOR
        )
        path = write_yaml(tmp_path, config)
        plan = plan_figures(prepare(load_config(path)))
        cap = plan["estimated_cost_usd"] * 0.4
        stopped = invoke("run", str(path), "--max-cost", f"{cap:.6f}", "--progress-interval", "60")
        assert stopped.exit_code == 6, stopped.output[-2000:]
        line = last_line(stopped)
        assert line.startswith("CostCapReached: spent $") and "would cost about $" in line
        billed = service.stats()["tokens_accepted"] * PRICE / 1_000_000
        assert abs(billed - cap) <= 0.05 * cap  # by the service's own count
        assert billed <= cap or rule != "words"  # an exact estimate never passes it
        first = pl.read_parquet(tmp_path / "out" / "*.parquet")
        assert 0 < first.height < rows

        cli_run(path)  # the resume, without a cap
        stats = service.stats()
    table = pl.read_parquet(tmp_path / "out" / "*.parquet")
    assert table.height == rows and table["id"].n_unique() == rows
    assert table["_error_type"].null_count() == rows
    assert stats["requests_answered"] == stats["requests_accepted"] == rows  # each paid once
    if rule == "words":
        assert stats["tokens_accepted"] == plan["estimated_input_tokens"]


def test_max_duration_stops_a_slow_run_with_exit_7_and_the_resume_finishes(
    ray_runtime: None, tmp_path: Path
) -> None:
    rows, rpm = 100, 600  # 10 s at the service's limit
    write_corpus(tmp_path / "in.parquet", rows)
    with embedded(rpm=rpm) as service:
        limits = {"requests_per_minute": rpm}
        config = job_config(tmp_path, service.base_url, limits=limits, concurrency=ONE_ACTOR)
        path = write_yaml(tmp_path, config)
        stopped = invoke("run", str(path), "--max-duration", "2s", "--log-format", "json")
        assert stopped.exit_code == 7, stopped.output[-2000:]
        events = {e["event"]: e for e in map(json.loads, stopped.stderr.splitlines())}
        assert events["stopped"]["reason"] == "deadline" and events["stopped"]["exit_code"] == 7
        assert events["error"]["error_type"] == "DeadlineReached"
        assert events["error"]["message"].startswith("the run's time ran out (--max-duration 2 s)")
        parts = (tmp_path / "out").glob("*.parquet")  # none, if the time ran out before a row
        assert sum(pq.read_metadata(part).num_rows for part in parts) < rows

        service.set_limits(rpm=LIFTED["rpm"])
        cli_run(path, "--set", "limits.requests_per_minute=60000")
        stats = service.stats()
    table = pl.read_parquet(tmp_path / "out" / "*.parquet")
    assert table.height == rows and table["id"].n_unique() == rows
    assert table["_error_type"].null_count() == rows
    assert stats["requests_answered"] == rows  # what was in flight at the stop was kept


def test_the_python_api_raises_the_cap_once_the_rows_are_written(
    ray_runtime: None, tmp_path: Path
) -> None:
    import evalpipe as ep

    write_corpus(tmp_path / "in.parquet", 50)
    with embedded() as service:
        config = job_config(
            tmp_path, service.base_url, pricing={"default": PRICE}, concurrency=ONE_ACTOR
        )
        job = ep.Job(parse_config(config))
        with pytest.raises(CostCapReached, match=r"spent \$0\.000000 of the"):
            job.run(max_cost=1e-9, progress=False)  # not one request fits
        assert service.stats()["requests_accepted"] == 0
        summary = job.run(progress=False)
    assert summary["rows_answered"] == 50
