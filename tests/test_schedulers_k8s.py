"""The schedulers' shared rules, without a scheduler: which ends a retry mends, how a scheduled
run's partition and guard rails become overrides, and the Kubernetes CronJob of the how-to
(docs/how-to/cronjob.yaml), checked offline against the Kubernetes API's schema
(`kubernetes-validate` bundles it) and against the exit codes it must fail on.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from conftest import job_config
from evalpipe.config import load_config
from evalpipe.errors import (
    NO_RETRY_EXIT_CODES,
    AuthError,
    CanaryFailed,
    ConfigError,
    CostCapReached,
    DeadlineReached,
    OutputLocked,
    TooManyErrors,
    retry_mends,
)
from evalpipe.session import Scheduled

ROOT = Path(__file__).resolve().parents[1]
CRONJOB = ROOT / "docs" / "how-to" / "cronjob.yaml"
# The fleet's (docs/how-to/fleet.md); tests/test_docs_facts.py checks every manifest of the docs
# against the schema and the exit codes, this module the single pod's in depth.
FLEET = ROOT / "docs" / "how-to" / "fleet-cronjob.yaml"
# The oldest Kubernetes whose Job has podFailurePolicy and CronJob timeZone as GA fields, and
# the newest whose schema the package bundles.
KUBERNETES = ("1.31.0", "1.37.0")


def cronjob() -> dict[str, Any]:
    loaded = yaml.safe_load(CRONJOB.read_text())
    assert isinstance(loaded, dict)
    return loaded


# --------------------------------------------------------------------------- retries


@pytest.mark.parametrize(
    ("code", "error", "retry"),
    [
        (0, None, False),
        (2, ConfigError("input.path: no such file"), False),
        (2, OutputLocked("held by pid 7 on host-a"), True),  # the other run lets go
        (3, AuthError("the key was refused"), False),
        (4, TooManyErrors("6% of rows in error"), False),  # written: the failure is the alert
        (6, CostCapReached("spent $25 of the $25 cap"), False),  # a retry would spend it again
        (7, DeadlineReached("the deadline came"), True),
        (8, CanaryFailed("the canary moved: helpful agreed 0.81 < 0.95"), False),
        (143, None, True),
        (130, None, True),
        (5, None, True),
        (1, None, True),
    ],
)
def test_a_retry_is_made_only_where_it_mends(code: int, error: Any, retry: bool) -> None:
    assert retry_mends(code, error) is retry


def test_the_no_retry_codes_are_bad_input_the_key_the_error_rate_the_cap_and_the_canary() -> None:
    assert sorted(NO_RETRY_EXIT_CODES) == [2, 3, 4, 6, 8]
    assert CostCapReached.exit_code in NO_RETRY_EXIT_CODES
    assert CanaryFailed.exit_code in NO_RETRY_EXIT_CODES
    assert DeadlineReached.exit_code not in NO_RETRY_EXIT_CODES


# --------------------------------------------------------------------------- partitions


def write_job(tmp_path: Path, **changes: Any) -> Path:
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(job_config(tmp_path, "embedded", **changes)))
    return path


def test_a_delta_tables_partition_is_its_output_partition(tmp_path: Path) -> None:
    path = write_job(tmp_path, output={"format": "delta"}, pricing={"default": 0.042})
    job = Scheduled(path, ("model=model-1.13.0",), {"dt": "2026-11-27"}, max_cost=25.0,
                    deadline="06:00")  # fmt: skip
    config = load_config(path, job.all_overrides())
    assert config.output.partition == {"dt": "2026-11-27"}
    assert Path(config.output.path) == tmp_path / "out"  # the table's root, for every night
    assert config.limits.max_cost_usd == 25.0
    assert config.limits.deadline is not None


def test_a_parquet_outputs_partition_is_a_folder_of_its_own(tmp_path: Path) -> None:
    path = write_job(tmp_path)
    job = Scheduled(path, partition={"dt": "2026-11-27"}, max_duration="4h")
    config = load_config(path, job.all_overrides())
    assert Path(config.output.path) == tmp_path / "out" / "dt=2026-11-27"
    assert config.output.partition == {}
    assert config.limits.max_duration is not None


def test_a_bad_config_is_the_run_s_one_line_with_exit_2_and_no_retry(tmp_path: Path) -> None:
    from evalpipe.session import run_scheduled

    ran = run_scheduled(Scheduled(tmp_path / "missing.yaml", partition={"dt": "2026-11-27"}))
    assert ran.exit_code == 2 and not ran.retry
    assert ran.summary is None and ran.message.startswith("ConfigError: ")


# --------------------------------------------------------------------------- the CronJob


@pytest.mark.parametrize("version", KUBERNETES)
def test_the_cronjob_is_valid_against_the_kubernetes_schema(version: str) -> None:
    import kubernetes_validate

    kubernetes_validate.validate(cronjob(), version, strict=True)


def test_the_validation_is_strict_enough_to_catch_a_misspelt_field() -> None:
    import kubernetes_validate

    broken = cronjob()
    job = broken["spec"]["jobTemplate"]["spec"]
    job["podFailurePolicy"]["rules"][0]["onExitCode"] = job["podFailurePolicy"]["rules"][0].pop(
        "onExitCodes"
    )
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(broken, KUBERNETES[-1], strict=True)


def test_the_cronjob_fails_the_job_on_exactly_the_codes_no_retry_mends() -> None:
    spec = cronjob()["spec"]
    assert spec["concurrencyPolicy"] == "Forbid"
    job = spec["jobTemplate"]["spec"]
    pod = job["template"]["spec"]
    assert pod["restartPolicy"] == "Never"  # podFailurePolicy needs it
    [fail] = [r for r in job["podFailurePolicy"]["rules"] if r["action"] == "FailJob"]
    [container] = pod["containers"]
    assert fail["onExitCodes"]["operator"] == "In"
    assert fail["onExitCodes"]["containerName"] == container["name"]
    assert set(fail["onExitCodes"]["values"]) == NO_RETRY_EXIT_CODES
    assert job["backoffLimit"] >= 1  # the other ends are retried


def test_the_key_comes_from_a_secret_in_the_variable_the_config_names() -> None:
    [container] = cronjob()["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"]
    env = {e["name"]: e for e in container["env"]}
    key = load_config(ROOT / "configs" / "demo.yaml").service.api_key_env
    assert set(env[key]["valueFrom"]) == {"secretKeyRef"}
    assert "value" not in env[key]
    command = " ".join(container["command"] + container["args"])
    assert "exec evalpipe run" in command and "--restart" not in command


def test_the_how_to_shows_the_checked_manifest_itself() -> None:
    page = (ROOT / "docs" / "how-to" / "schedulers.md").read_text()
    assert '--8<-- "docs/how-to/cronjob.yaml"' in page


@pytest.mark.subprocess
@pytest.mark.parametrize("manifest", [CRONJOB, FLEET], ids=["cronjob", "fleet"])
def test_every_retry_of_a_job_takes_the_night_from_its_scheduled_time(manifest: Path) -> None:
    """The pod's shell line with the Job's name as the CronJob makes it (its scheduled time in
    minutes since the epoch): 2026-11-27 02:00 UTC, whatever the pod's clock says. The fleet's
    CronJob (docs/how-to/fleet.md) does the same."""
    [*_, loaded] = yaml.safe_load_all(manifest.read_text())
    [container] = loaded["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"]
    script = container["args"][0].split("&&")[0] + ' && echo "$NIGHT"'
    minutes = 1_795_744_800 // 60  # 2026-11-27T02:00:00Z
    env = {**os.environ, "JOB_NAME": f"evalpipe-nightly-{minutes}"}
    done = subprocess.run(["sh", "-c", script], env=env, capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "2026-11-27"
