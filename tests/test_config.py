"""The job config and its `--set` overrides: validated exactly like the file, key paths named."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from evalpipe.cli.main import main
from evalpipe.config.load import apply_overrides, load_config
from evalpipe.errors import ConfigError

ROOT = Path(__file__).resolve().parents[1]
DEMO = ROOT / "configs" / "demo.yaml"


def demo() -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load(DEMO.read_text(encoding="utf-8"))
    return data


def test_values_are_parsed_as_yaml_by_dotted_path() -> None:
    data = apply_overrides(
        demo(),
        [
            "output.path=out/scores/dt=2026-11-23",
            "limits.requests_per_minute=600",
            "concurrency.actors=3",
            "input.state=[text, rating]",
            "retries.base_delay=0.25",
        ],
    )
    assert data["output"]["path"] == "out/scores/dt=2026-11-23"  # only the first '=' splits
    assert data["limits"]["requests_per_minute"] == 600
    assert data["concurrency"] == {"actors": 3}  # a section the file left out
    assert data["input"]["state"] == ["text", "rating"]
    assert data["retries"]["base_delay"] == 0.25


def test_the_merged_config_is_what_is_validated_and_fingerprinted() -> None:
    plain = load_config(DEMO)
    changed = load_config(DEMO, ["limits.requests_per_minute=600", "output.path=out/elsewhere"])
    assert changed.limits.requests_per_minute == 600
    assert str(changed.output.path) == "out/elsewhere"
    assert changed.fingerprint() == plain.fingerprint()  # limits and output change no answer
    other_model = load_config(DEMO, ["model=model-latest"])
    assert other_model.fingerprint() != plain.fingerprint()
    question = load_config(DEMO, ["questions.sentiment.instructions=Is it positive?"])
    assert question.fingerprint() != plain.fingerprint()


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("limits.requests_per_minut=5", "limits.requests_per_minut: unknown key (did you mean"),
        ("limits.requests_per_minute=-1", "limits.requests_per_minute: "),
        ("limits.requests_per_minute=fast", "limits.requests_per_minute: "),
        ("output", "--set 'output': expected KEY=VALUE"),
        ("output..path=x", "expected KEY=VALUE"),
        ("model.version=1", "--set model.version: model is a value, not a section"),
        ("output.path=[unclosed", "--set output.path: the value is not valid YAML"),
    ],
)
def test_a_bad_override_is_a_config_error_naming_its_key(override: str, message: str) -> None:
    with pytest.raises(ConfigError) as info:
        load_config(DEMO, [override])
    assert message in info.value.one_line()


def test_plan_takes_set_and_an_unknown_key_exits_2_with_a_suggestion() -> None:
    corpus = ROOT / "data" / "demo" / "reviews.parquet"
    planned = CliRunner().invoke(
        main,
        ["plan", str(DEMO), "--json", "--set", f"input.path={corpus}",
         "--set", "limits.requests_per_minute=600"],
    )  # fmt: skip
    assert planned.exit_code == 0, planned.output
    assert '"requests_per_minute_limit": 600' in planned.output
    wrong = CliRunner().invoke(main, ["plan", str(DEMO), "--set", "limit.requests_per_minute=1"])
    assert wrong.exit_code == 2
    assert wrong.output.strip() == "ConfigError: limit: unknown key (did you mean 'limits'?)"
