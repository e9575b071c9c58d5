"""The package's shape, as a new user and the next developer meet it: `evalpipe` alone in its
source root, one subpackage per subsystem with a small public surface, rooms of one concern,
and a job that runs from a folder holding a `pipeline.py` of its own.

The arrows between subpackages (layers, and each entered through its `__init__`) are
import-linter's contracts in pyproject.toml, checked by `make lint`.
"""

from __future__ import annotations

import ast
import importlib
import os
import subprocess
import sys
from pathlib import Path

import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

import evalpipe
from conftest import API_KEY, QUESTIONS
from sourcetree import parsed

pytestmark = pytest.mark.patient  # `make test` runs it beside the rest (the Makefile)

SOURCE_ROOT = Path(evalpipe.__file__).resolve().parent.parent
PACKAGE = SOURCE_ROOT / "evalpipe"
SUBPACKAGES = sorted(p.parent.name for p in PACKAGE.glob("*/__init__.py"))
MAX_LINES = 400
# Subpackages whose names live on an extra's package (`evalpipe[airflow]`, `evalpipe[dagster]`):
# importing those starts the scheduler's machinery, so their names are resolved in their own
# tier (tests/test_airflow.py, tests/test_dagster.py), not here.
ON_EXTRAS = frozenset({"airflow", "dagster"})
# A user's module that shadows nothing of ours may still be imported by mistake: make it loud.
USERS_PIPELINE = 'raise SystemExit("the user\'s own pipeline.py was imported")\n'


def test_the_source_root_holds_evalpipe_alone() -> None:
    """An editable install puts the source root itself on sys.path: anything else in it would
    be importable as a top-level module (the old `pipeline` package was)."""
    entries = {
        p.name
        for p in SOURCE_ROOT.iterdir()
        if p.name != "__pycache__" and not p.name.endswith(".egg-info")
    }
    assert entries == {"evalpipe"}
    assert SOURCE_ROOT.name == "pipeline"


def test_there_are_subsystems_each_with_a_small_named_surface() -> None:
    assert len(SUBPACKAGES) >= 6, SUBPACKAGES
    for name in SUBPACKAGES:
        module = importlib.import_module(f"evalpipe.{name}")
        surface = getattr(module, "__all__", None)
        assert surface, f"evalpipe.{name} names no public surface in __all__"
        assert len(surface) <= 25, f"evalpipe.{name} exports {len(surface)} names"
        if name in ON_EXTRAS:
            continue
        missing = [n for n in surface if not hasattr(module, n)]
        assert not missing, f"evalpipe.{name}.__all__ names what it lacks: {missing}"


def test_no_module_of_the_package_shadows_a_name_of_the_api() -> None:
    """`ep.X` is found lazily (PEP 562), and importing a submodule `evalpipe.X` sets the
    package's attribute X to that module for good: a room named as an API function would
    turn `ep.X(...)` into "'module' object is not callable" once the room is imported (as
    `evalpipe.browse` did to `ep.browse` after its first call)."""
    import pkgutil

    import evalpipe

    rooms = {m.name for m in pkgutil.iter_modules(evalpipe.__path__)}
    assert not rooms & (set(evalpipe.__all__) - {"errors"})  # ep.errors is the module itself
    import evalpipe.browser  # the results browser's room, imported

    assert callable(evalpipe.browse) and evalpipe.browse.__module__ == "evalpipe.api.browse"


@pytest.mark.parametrize("path", sorted(PACKAGE.rglob("*.py")), ids=lambda p: p.stem)
def test_every_module_is_one_room_with_a_reason_to_exist(path: Path) -> None:
    source = path.read_text()
    assert ast.get_docstring(parsed(path)), f"{path.name}: no module docstring"
    lines = source.count("\n")
    assert lines <= MAX_LINES, f"{path.relative_to(SOURCE_ROOT)}: {lines} lines"


@pytest.mark.subprocess
def test_import_evalpipe_from_a_folder_with_its_own_pipeline_py(tmp_path: Path) -> None:
    (tmp_path / "pipeline.py").write_text("WHO = 'the user'\n")
    code = "import evalpipe, pipeline; print(evalpipe.__file__); print(pipeline.WHO)"
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, check=True
    )
    package_file, users = done.stdout.splitlines()
    assert Path(package_file).resolve() == PACKAGE / "__init__.py"
    assert users == "the user"


@pytest.mark.subprocess
def test_nothing_but_evalpipe_is_importable_from_the_source_root(tmp_path: Path) -> None:
    code = "import importlib.util as u; print(u.find_spec('pipeline'))"
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, check=True
    )
    assert done.stdout.strip() == "None"


@pytest.mark.subprocess
def test_a_job_runs_from_a_folder_with_its_own_pipeline_py(
    ray_address: str, tmp_path: Path
) -> None:
    """`evalpipe run` there, joining a Ray (as on a cluster): the embedded service's process,
    the Ray Worker and the account's Budget actor all start with that folder on their
    sys.path (Ray puts the driver's there for its workers), and none of them imports the
    user's file."""
    (tmp_path / "pipeline.py").write_text(USERS_PIPELINE)
    rows = [{"id": i, "text": f"Review {i}: it works."} for i in range(12)]
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "in.parquet")
    config = {
        "input": {"path": "in.parquet", "id_column": "id", "state": "text"},
        "output": {"path": "out"},
        "service": {"base_url": "embedded", "api_key_env": "EVAL_API_KEY"},
        "model": "model-1.13.0",
        "questions": QUESTIONS,
        "concurrency": {"actors": 1},  # one Worker proves what a Worker's sys.path holds
    }
    (tmp_path / "job.yaml").write_text(yaml.safe_dump(config))
    # The key the session's Ray workers hold (a joined Ray's workers have their own env).
    env = {**{k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}, "EVAL_API_KEY": API_KEY}
    evalpipe_command = str(Path(sys.executable).with_name("evalpipe"))
    command = [evalpipe_command, "run", "job.yaml", "--progress-interval", "60"]
    done = subprocess.run(
        [*command, "--ray-address", ray_address],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "pipeline.py was imported" not in done.stderr
    table = pl.read_parquet(tmp_path / "out" / "part-*.parquet")
    assert sorted(table["id"].to_list()) == list(range(12))
    assert table["_error_type"].null_count() == 12


def test_the_modules_with_a_ray_of_their_own_are_the_ones_the_suite_runs_first() -> None:
    """conftest puts the modules that stop the session's Ray for one of their own (`own_ray`)
    first, one to each worker, so that it never has to start again after them: a module that
    calls `own_ray` and is not in its list would cost a Ray stop and start again."""
    from conftest import OWN_RAY_MODULES

    def calls_own_ray(path: Path) -> bool:
        tree = ast.parse(path.read_text(encoding="utf-8"))
        return any(
            isinstance(node, ast.Call) and getattr(node.func, "id", None) == "own_ray"
            for node in ast.walk(tree)
        )

    tests = Path(__file__).resolve().parent
    found = sorted(p.stem for p in tests.glob("test_*.py") if calls_own_ray(p))
    assert found == sorted(OWN_RAY_MODULES)
    assert len(OWN_RAY_MODULES) <= 2  # `make test` runs two workers: one module each
