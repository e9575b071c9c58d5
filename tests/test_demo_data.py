"""The demo corpus: data/make_demo.py and the committed data/demo/reviews.parquet.

`make demo`, the notebooks and the end-to-end tests rely on this corpus having a fixed shape,
being reproducible from the script, and holding the edge rows planted in it on purpose: null and
blank texts (invalid states), duplicate texts (dedup and cache), and one text over the context
limit.
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from evalpipe.contract.tokens import QUESTION_CONTEXT_LIMIT, count_text

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "data" / "make_demo.py"
COMMITTED = ROOT / "data" / "demo" / "reviews.parquet"
SMALL_ROWS = 400

SCHEMA = pa.schema(
    [
        ("review_id", pa.string()),
        ("product", pa.string()),
        ("category", pa.string()),
        ("rating", pa.int64()),
        ("verified", pa.bool_()),
        ("helpful_votes", pa.int64()),
        ("text", pa.string()),
    ]
)


def generate(out: Path, *args: str) -> str:
    """Run the generator as a user would; returns what it printed."""
    result = subprocess.run(
        [sys.executable, str(SCRIPT), "--out", str(out), *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return result.stdout


def generate_here(out: Path, *args: str) -> str:
    """The generator's `main` in this process (the same script, its own argument parsing):
    where a process of its own is not the point, it spares one (a Python and pyarrow to
    start). Returns what it printed."""
    spec = importlib.util.spec_from_file_location("make_demo", SCRIPT)
    assert spec is not None and spec.loader is not None
    script = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = script  # its dataclasses look their module up while it loads
    try:
        spec.loader.exec_module(script)
    finally:
        del sys.modules[spec.name]
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        script.main(["--out", str(out), *args])
    return printed.getvalue()


def texts(table: pa.Table) -> list[str | None]:
    return table.column("text").to_pylist()


def over_context_limit(table: pa.Table) -> list[str]:
    """Ids of rows whose text alone is over the 32k-token limit (state plus longest question)."""
    ids = table.column("review_id").to_pylist()
    limit = QUESTION_CONTEXT_LIMIT
    return [i for i, t in zip(ids, texts(table), strict=True) if t and count_text(t) > limit]


@pytest.fixture(scope="module")
def small_runs(tmp_path_factory: pytest.TempPathFactory) -> tuple[pa.Table, pa.Table, str]:
    """Two runs with the same arguments, and what the first one printed: the first as a user
    runs the script, the second in another process (this one), so that nothing a process
    draws afresh (a hash seed) can make the data."""
    tmp = tmp_path_factory.mktemp("demo")
    printed = generate(tmp / "a.parquet", "--rows", str(SMALL_ROWS), "--seed", "7")
    generate_here(tmp / "b.parquet", "--rows", str(SMALL_ROWS), "--seed", "7")
    return pq.read_table(tmp / "a.parquet"), pq.read_table(tmp / "b.parquet"), printed


@pytest.fixture(scope="module")
def committed() -> pa.Table:
    if not COMMITTED.exists():
        pytest.fail(f"{COMMITTED} is missing; run: python data/make_demo.py")
    return pq.read_table(COMMITTED)


def test_same_arguments_give_the_same_table(small_runs: tuple[pa.Table, pa.Table, str]) -> None:
    first, second, _ = small_runs
    assert first.num_rows == second.num_rows == SMALL_ROWS
    assert first.equals(second)


def test_the_seed_changes_the_data(
    small_runs: tuple[pa.Table, pa.Table, str], tmp_path: Path
) -> None:
    generate_here(tmp_path / "other.parquet", "--rows", str(SMALL_ROWS), "--seed", "8")
    other = pq.read_table(tmp_path / "other.parquet")
    assert texts(other) != texts(small_runs[0])


def test_generated_schema_and_columns(small_runs: tuple[pa.Table, pa.Table, str]) -> None:
    table = small_runs[0]
    assert table.schema.equals(SCHEMA)
    ids = table.column("review_id").to_pylist()
    assert len(set(ids)) == len(ids)
    for name in ("review_id", "product", "category", "rating", "verified", "helpful_votes"):
        assert table.column(name).null_count == 0, name
    assert set(table.column("rating").to_pylist()) <= {1, 2, 3, 4, 5}
    assert min(table.column("helpful_votes").to_pylist()) >= 0


def test_small_runs_keep_the_edge_rows(small_runs: tuple[pa.Table, pa.Table, str]) -> None:
    values = texts(small_runs[0])
    assert None in values
    assert any(t is not None and not t.strip() for t in values)
    assert max(Counter(t for t in values if t and t.strip()).values()) > 1
    assert len(over_context_limit(small_runs[0])) == 1


def test_prints_one_line_saying_what_it_wrote(small_runs: tuple[pa.Table, pa.Table, str]) -> None:
    lines = small_runs[2].strip().splitlines()
    assert len(lines) == 1
    assert str(SMALL_ROWS) in lines[0] and "a.parquet" in lines[0]


def test_committed_corpus_shape(committed: pa.Table) -> None:
    assert 2_900 <= committed.num_rows <= 3_100
    assert committed.schema.equals(SCHEMA)
    ids = committed.column("review_id").to_pylist()
    assert len(set(ids)) == len(ids)
    assert set(committed.column("category").to_pylist()) >= {"electronics", "kitchen", "books"}


def test_committed_corpus_edge_rows(committed: pa.Table) -> None:
    values = texts(committed)
    assert 5 <= values.count(None) <= 20
    blanks = [t for t in values if t is not None and not t.strip()]
    assert 5 <= len(blanks) <= 20
    assert "" in blanks
    counts = Counter(t for t in values if t and t.strip())
    duplicated_rows = sum(n for n in counts.values() if n > 1)
    assert 20 <= duplicated_rows <= 80
    assert any(t and not t.isascii() for t in values)


def test_committed_corpus_has_exactly_one_text_over_the_context_limit(
    committed: pa.Table,
) -> None:
    assert len(over_context_limit(committed)) == 1


def test_committed_corpus_has_a_long_tail(committed: pa.Table) -> None:
    words = [len(t.split()) for t in texts(committed) if t]
    assert sum(1 for n in words if n <= 10) >= 300
    assert sum(1 for n in words if 300 <= n <= 1_500) >= 150


def test_committed_corpus_is_what_the_script_makes(committed: pa.Table, tmp_path: Path) -> None:
    generate_here(tmp_path / "fresh.parquet")
    assert pq.read_table(tmp_path / "fresh.parquet").equals(committed)
