"""Every shipped config in configs/ loads, prepares and plans, with figures that add up.

Nothing is sent: `prepare` checks the config, the columns and the ids, and `estimate` is what
`evalpipe plan` prints. Paths in a config are relative to the repository root, where `make`
runs, and the corpora they name are committed.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from evalpipe.config import JobConfig, load_config
from evalpipe.output.table import output_schema
from evalpipe.planning import minimum_seconds, price_of
from evalpipe.planning.prepared import EMBEDDED_NOTE, prepare
from evalpipe.preflight import plan_figures

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = sorted((ROOT / "configs").glob("*.y*ml"))


@pytest.fixture(autouse=True)
def _at_root(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)


def _invalid_states(config: JobConfig) -> int:
    """Rows whose state is null or blank in every state column, counted with pyarrow."""
    table = pq.read_table(config.input.path, columns=list(config.state_columns))
    blank = None
    for name in config.state_columns:
        column = table.column(name)
        if pa.types.is_string(column.type) or pa.types.is_large_string(column.type):
            empty = pc.or_(pc.equal(pc.utf8_length(column), 0), pc.utf8_is_space(column))
            here = pc.fill_null(empty, True)
        else:
            here = pc.is_null(column)
        blank = here if blank is None else pc.and_(blank, here)
    return pc.sum(blank).as_py() or 0


def test_configs_are_shipped() -> None:
    names = {path.name for path in CONFIGS}
    assert {"demo.yaml", "demo_object.yaml"} <= names


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.name)
def test_config_plans(path: Path) -> None:
    config = load_config(path.relative_to(ROOT))
    assert config.input.path.exists(), f"{path.name}: input.path {config.input.path} is missing"
    assert not config.model_is_alias, f"{path.name}: ship configs with a versioned model"
    prepared = prepare(config)
    assert prepared.warnings == [EMBEDDED_NOTE]  # the demo configs run on the embedded service
    output_schema(config.input.id_column, prepared.source.id_type, config.parsed_questions)

    figures: dict[str, Any] = plan_figures(prepared)
    rows = pq.ParquetDataset(config.input.path).read(columns=[config.input.id_column]).num_rows
    assert figures["rows"] == rows == prepared.source.num_rows
    assert figures["invalid_state_rows"] == _invalid_states(config)
    sent = figures["distinct_states_to_send"]
    accounted = (
        sent
        + figures["rows_answered_from_identical_state"]
        + figures["invalid_state_rows"]
        + figures["context_limit_rows"]
    )
    assert accounted == rows
    assert 0 < sent <= figures["requests"]
    assert figures["rows_split_into_several_requests"] <= sent
    assert figures["estimated_input_tokens"] > figures["requests"]
    price = price_of(config)
    assert price.per_million is not None  # the shipped configs say their price
    assert figures["estimated_cost_usd"] == price.cost(figures["estimated_input_tokens"])
    assert figures["price_source"] == price.source
    floor = minimum_seconds(
        figures["requests"],
        figures["estimated_input_tokens"],
        config.limits.requests_per_minute,
        config.limits.tokens_per_second,
    )
    assert figures["minimum_seconds"] == round(floor, 1) > 0
    assert figures["model"] == config.model


def test_demo_corpus_edge_rows_are_planned() -> None:
    """The demo corpus plants blank texts, repeated texts and one text over the limit."""
    figures = plan_figures(prepare(load_config("configs/demo.yaml")))
    assert figures["invalid_state_rows"] > 0
    assert figures["rows_answered_from_identical_state"] > 0
    assert figures["context_limit_rows"] == 1
