"""`evalpipe.dagster` in a real Dagster: `materialize()` of a daily-partitioned asset over a job
config, in this process, on the session's Ray and service.

A partition materialized twice pays nothing the second time, and each materialization's
metadata carries rows, tokens and cost; the error-rate check runs; a cost cap ends the
materialization without a retry, though the asset's retry policy would allow some; a stop a
retry mends (SIGTERM) is retried by that policy, and the retry resumes.
"""

from __future__ import annotations

import importlib.util
import os
import signal
import threading
import time
from pathlib import Path
from types import ModuleType
from typing import Any

import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

from conftest import job_config
from evalpipe.service import EmbeddedService

# Whether Dagster is installed, not imported: its import (~0.6 s) would cost every collection.
pytestmark = [
    pytest.mark.skipif(
        importlib.util.find_spec("dagster") is None,
        reason="the scheduler extras: `make test` installs them",
    ),
    pytest.mark.schedulers, pytest.mark.ray,
]  # fmt: skip

ROWS = 40
NIGHT = "2026-11-20"  # a day whose partition exists (a daily one ends at midnight)
PRICE = 100.0  # dollars per million tokens: a request of ~100 tokens costs about a cent


@pytest.fixture(scope="module")
def dg() -> ModuleType:
    """Dagster, imported by the first test that uses it."""
    import dagster

    return dagster


def write_job(tmp_path: Path, base_url: str, **changes: Any) -> Path:
    rows = [{"id": i, "text": f"Review {i}: it {'works' if i % 3 else 'broke'}."}
            for i in range(ROWS)]  # fmt: skip
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "in.parquet")
    # One worker: several are not these tests' point (each one more Ray process to start).
    changes["concurrency"] = {"actors": 1, **changes.get("concurrency", {})}
    config = job_config(tmp_path, base_url, output={"format": "delta"},
                        pricing={"default": PRICE}, **changes)  # fmt: skip
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def accepted(service: EmbeddedService) -> int:
    return int(service.stats()["requests_accepted"])


def values(result: Any) -> dict[str, Any]:
    """The metadata of the run's one materialization, as plain values."""
    [materialization] = result.asset_materializations_for_node("reviews_scored")
    return {k: getattr(v, "value", v) for k, v in materialization.metadata.items()}


def test_a_partition_materialized_twice_pays_nothing_the_second_time(
    dg: ModuleType, ray_runtime: None, service: EmbeddedService, tmp_path: Path
) -> None:
    from evalpipe.dagster import evalpipe_asset

    path = write_job(tmp_path, service.base_url)
    asset = evalpipe_asset(path, name="reviews_scored", start_date="2026-11-01",
                           max_error_rate=0.05)  # fmt: skip
    before = accepted(service)
    first = dg.materialize([asset], partition_key=NIGHT)
    paid = accepted(service) - before
    second = dg.materialize([asset], partition_key=NIGHT)

    assert first.success and second.success
    assert paid == ROWS  # one request a row, the first time
    assert accepted(service) - before == paid  # and none the second
    one, two = values(first), values(second)
    assert one["rows_answered"] == ROWS and one["rows_in_error"] == 0
    assert one["dagster/row_count"] == ROWS == two["dagster/row_count"]
    assert one["input_tokens"] > 0 and one["cost_usd"] == pytest.approx(
        one["input_tokens"] * PRICE / 1e6
    )
    assert two["input_tokens"] == 0 and two["cost_usd"] == 0 and two["requests"] == 0
    assert two["rows_skipped_committed_earlier"] == ROWS and two["rows_answered"] == 0
    assert one["rows_by_outcome"]["answered"] == ROWS
    assert one["partition"] == {"dt": NIGHT}
    assert one["table_uri"] == str(tmp_path / "out")
    assert two["delta_version"] > one["delta_version"] >= 0  # the second run's record, no rows
    assert "rows" in one["summary"]
    [check] = first.get_asset_check_evaluations()
    assert check.check_name == "error_rate" and check.passed

    table = pl.read_delta(str(tmp_path / "out")).filter(pl.col("dt") == NIGHT)
    assert sorted(table["id"].to_list()) == list(range(ROWS))  # every row once


def test_a_cost_cap_ends_the_materialization_without_a_retry(
    dg: ModuleType, ray_runtime: None, service: EmbeddedService, tmp_path: Path
) -> None:
    from evalpipe.dagster import evalpipe_asset

    path = write_job(tmp_path, service.base_url)
    asset = evalpipe_asset(path, name="reviews_scored", start_date="2026-11-01",
                           max_cost=0.05, retry_policy=dg.RetryPolicy(max_retries=3))  # fmt: skip
    before = accepted(service)
    result = dg.materialize([asset], partition_key=NIGHT, raise_on_error=False)
    spent = accepted(service) - before

    assert not result.success
    events = result.all_events
    kinds = [e.event_type_value for e in events]
    assert "STEP_UP_FOR_RETRY" not in kinds  # the retry policy was not used
    [failure] = [e for e in events if e.event_type_value == "STEP_FAILURE"]
    data = failure.event_specific_data
    assert "CostCapReached" in data.error.message
    assert 0 < spent < ROWS  # it stopped at the cap, once


def _stop_once_paid(service: EmbeddedService, paid: int) -> None:
    """SIGTERM to this process (the step's, as a drained node's) once `paid` requests were
    accepted, while the run is still sending: evalpipe's own handler is the one installed."""
    while accepted(service) < paid:
        time.sleep(0.01)
    os.kill(os.getpid(), signal.SIGTERM)


def test_a_stopped_materialization_is_retried_and_the_retry_resumes(
    dg: ModuleType, ray_runtime: None, tmp_path: Path
) -> None:
    """A stop that a retry mends (SIGTERM, exit 143) fails the step with retries allowed; the
    asset's retry policy runs it again, and the retry resumes: nothing is paid twice (a clean
    stop lets the requests in flight finish and keeps them) and no answer comes from the cache
    (it is off: what the retry skipped, the journal and the table held)."""
    from conftest import embedded
    from evalpipe.dagster import evalpipe_asset

    with embedded(latency=0.2) as slow:  # 0.2 s a request, 8 in flight
        path = write_job(tmp_path, slow.base_url, concurrency={"max_in_flight": 8},
                         cache={"enabled": False})  # fmt: skip
        asset = evalpipe_asset(path, name="reviews_scored", start_date="2026-11-01",
                               retry_policy=dg.RetryPolicy(max_retries=1))  # fmt: skip
        stopper = threading.Thread(target=_stop_once_paid, args=(slow, ROWS // 4), daemon=True)
        stopper.start()
        result = dg.materialize([asset], partition_key=NIGHT)
        stopper.join()
        paid = accepted(slow)

    assert result.success
    kinds = [e.event_type_value for e in result.all_events]
    assert kinds.count("STEP_UP_FOR_RETRY") == 1  # the first try's Failure allowed it
    assert paid == ROWS  # every row paid once, across the two tries
    retried = values(result)  # the retry's materialization
    skipped = retried["rows_skipped_committed_earlier"]
    assert ROWS // 4 <= skipped < ROWS and retried["rows_answered"] == ROWS - skipped
    assert retried["requests"] == ROWS - skipped
    table = pl.read_delta(str(tmp_path / "out")).filter(pl.col("dt") == NIGHT)
    assert sorted(table["id"].to_list()) == list(range(ROWS))


def test_the_error_rate_check_fails_when_more_rows_end_in_error(
    dg: ModuleType, ray_runtime: None, tmp_path: Path
) -> None:
    """Against a service that drops most requests (rows in error, retryable), the rows are
    written and the materialization stands; the check says the rate passed the threshold."""
    from conftest import embedded
    from evalpipe.dagster import evalpipe_asset

    with embedded(fault_seed=3, fault_500=1.0) as faulty:
        path = write_job(tmp_path, faulty.base_url, retries={"max_attempts": 1})
        asset = evalpipe_asset(path, name="reviews_scored", start_date="2026-11-01",
                               max_error_rate=0.05)  # fmt: skip
        result = dg.materialize([asset], partition_key=NIGHT)
    assert result.success
    metadata = values(result)
    assert metadata["rows_in_error"] == ROWS
    [check] = result.get_asset_check_evaluations()
    assert check.check_name == "error_rate" and not check.passed
    assert check.metadata["error_rate"].value == 1.0


def test_a_canary_is_a_check_of_its_own(
    dg: ModuleType, ray_runtime: None, service: EmbeddedService, tmp_path: Path
) -> None:
    """A job with a canary (`canary.labels`) gets a `canary` check beside the error rate's,
    passed from the run's summary; a job without one has the error rate's alone."""
    from evalpipe.dagster import evalpipe_asset

    canary = [{"id": 1000 + i, "text": f"Canary {i}: it {'works' if i % 2 else 'broke'}.",
               "helpful": bool(i % 2), "sentiment": "positive", "quality": 1}
              for i in range(20)]  # fmt: skip
    pq.write_table(pa.Table.from_pylist(canary), tmp_path / "canary.parquet")
    path = write_job(
        tmp_path, service.base_url, canary={"labels": str(tmp_path / "canary.parquet")}
    )
    asset = evalpipe_asset(path, name="reviews_scored", start_date="2026-11-01")
    result = dg.materialize([asset], partition_key=NIGHT)
    assert result.success
    checks = {c.check_name: c for c in result.get_asset_check_evaluations()}
    assert set(checks) == {"error_rate", "canary"}
    assert checks["canary"].passed  # the first night: nothing to compare with, no floor set
    (tmp_path / "plain").mkdir()
    plain = write_job(tmp_path / "plain", service.base_url)
    assert [c.name for c in evalpipe_asset(plain, name="plain").check_specs] == ["error_rate"]


def test_every_name_of_the_surface_resolves() -> None:
    """(test_layout leaves the extras' subpackages to their own tier.)"""
    import evalpipe.dagster

    assert all(hasattr(evalpipe.dagster, name) for name in evalpipe.dagster.__all__)
