"""The output's formats behind one door (`evalpipe.output.formats`): one registration per format,
and nothing outside the door chooses by a format's name.

The code is read as Python (its syntax tree), not as text: a comparison with a format's name
(`format == "delta"`, `name in ("parquet", "delta")`, a `match` case) anywhere outside the door
and the format modules is a second place that chooses, which the next format would have to find.
The door is driven for real: a Parquet folder and a Delta table (real deltalake) written by the
sink are found again by what is at their paths, each by its own format.
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import get_args

import pytest

import evalpipe
from evalpipe.config.model import PARTITIONED_FORMATS, OutputConfig, OutputFormat
from evalpipe.errors import ConfigError
from evalpipe.output import Sink, output_format, stored_at
from evalpipe.output.formats import FORMATS
from sinkdata import SCHEMA, answered

PACKAGE = Path(evalpipe.__file__).resolve().parent
# The door and the format modules: the only code that may name a format.
DOOR = (
    "output/formats.py", "output/format.py", "output/parquet.py", "output/delta/",
    "output/iceberg/",
)  # fmt: skip
NAMES = {f.name for f in FORMATS}


def _named(node: ast.AST) -> list[str]:
    """The format names a string constant, or a tuple/list/set of them, holds."""
    if isinstance(node, ast.Constant) and node.value in NAMES:
        return [node.value]
    if isinstance(node, ast.Tuple | ast.List | ast.Set):
        return [name for item in node.elts for name in _named(item)]
    return []


def format_choices(source: str) -> list[tuple[int, str]]:
    """Where `source` chooses by a format's name: (line, name) of every comparison or match
    case against one."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Compare):
            for side in [node.left, *node.comparators]:
                found += [(node.lineno, name) for name in _named(side)]
        elif isinstance(node, ast.match_case) and isinstance(node.pattern, ast.MatchValue):
            found += [(node.pattern.lineno, name) for name in _named(node.pattern.value)]
    return found


def test_format_choices_finds_a_choice_by_name() -> None:
    """The check itself: each way of choosing by name is found, a keyword is not."""
    source = (
        'if config.output.format == "delta": pass\n'
        'if name in ("parquet", "x"): pass\n'
        'match f:\n    case "delta": pass\n'
        'ds.dataset(paths, format="parquet")\n'
    )
    assert format_choices(source) == [(1, "delta"), (2, "parquet"), (4, "delta")]


def test_nothing_outside_the_door_chooses_by_a_format_name() -> None:
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        where = path.relative_to(PACKAGE).as_posix()
        if where.startswith(DOOR):
            continue
        found += [f"{where}:{line} ({name})" for line, name in format_choices(path.read_text())]
    assert not found, "choose through evalpipe.output's door (output_format, stored_at): " + (
        ", ".join(found)
    )


def test_the_door_chooses_by_name_in_one_place() -> None:
    """Inside the door, too, no format module names another; the registry looks names up."""
    door = [PACKAGE / "output/formats.py", PACKAGE / "output/parquet.py"]
    door += sorted((PACKAGE / "output/delta").glob("*.py"))
    door += sorted((PACKAGE / "output/iceberg").glob("*.py"))
    for path in door:
        assert not format_choices(path.read_text()), path.name


def test_each_format_is_registered_once_and_the_config_agrees() -> None:
    names = [f.name for f in FORMATS]
    assert len(names) == len(set(names))
    assert set(get_args(OutputFormat)) == set(names)
    assert set(PARTITIONED_FORMATS) == {f.name for f in FORMATS if f.partitioned}
    for name in names:
        assert output_format(name).name == name
    with pytest.raises(ConfigError, match=r"^output.format: 'orc' is not a format evalpipe"):
        output_format("orc")


def test_the_default_format_takes_any_folder_and_is_last() -> None:
    """`stored_at` asks the formats in order: the one that takes any folder must come last."""
    assert output_format(OutputConfig.model_fields["format"].default) is FORMATS[-1]


def write(out: Path, format: str, partition: dict[str, str] | None = None) -> None:
    sink = Sink.open(out, SCHEMA, "fp", run_id="r", format=format, partition=partition)
    sink.resume()
    sink.append([answered(1), answered(2)])
    sink.finish({})


# pyiceberg's SQL catalog configures SQLAlchemy's mappers on first use: in a process where
# Airflow was imported (the schedulers' tests), Airflow's mapper hooks then start a process.
CATALOGUED = {"iceberg"}


@pytest.mark.parametrize(
    "name",
    [pytest.param(n, marks=pytest.mark.subprocess) if n in CATALOGUED else n
     for n in sorted(NAMES)],
)  # fmt: skip
def test_what_is_written_in_a_format_is_found_in_it(tmp_path: Path, name: str) -> None:
    """A sink writes through the door by name; a reader finds the same format by the path."""
    partition = {"dt": "2026-11-29"} if output_format(name).partitioned else None
    out = tmp_path / name
    write(out, name, partition)
    stored = stored_at(out)
    assert type(stored) is type(output_format(name).find(out))
    assert stored.schema().names[: len(SCHEMA.names)] == SCHEMA.names
    assert stored.rows().num_rows == 2
    version = output_format(name).version(out)
    assert version is None or version >= 0
    for other in FORMATS:
        if other.name != name:
            with pytest.raises(ConfigError, match=rf"holds {output_format(name).what} \("):
                write(out, other.name, {"dt": "x"} if other.partitioned else None)


def test_a_scheduler_partition_needs_a_partitioned_format() -> None:
    plain = [f.name for f in FORMATS if not f.partitioned]
    for name in plain:
        with pytest.raises(ValueError, match=r"output\.partition needs output\.format"):
            OutputConfig(path="out", format=name, partition={"dt": "x"})


def test_the_architecture_page_names_every_format_module() -> None:
    """docs/explanation/architecture.md's table of formats: a row for each one registered."""
    page = (PACKAGE.parents[1] / "docs" / "explanation" / "architecture.md").read_text()
    for fmt in FORMATS:
        module = type(fmt).__module__.removeprefix("evalpipe.").split(".")
        where = "/".join(module[:2])  # `output/parquet`, `output/delta`
        assert f"| `{fmt.name}`" in page, fmt.name
        assert f"`evalpipe/{where}" in page, where


def test_only_the_door_imports_a_format_module() -> None:
    """The sink, the resume and every other room reach a format through `formats` alone (the
    package's `__init__` re-exports `scan_files`, a reader's helper, from the Parquet module)."""
    formats = ("evalpipe.output.parquet", "evalpipe.output.delta", "evalpipe.output.iceberg")
    allowed = ("output/formats.py", "output/__init__.py", "output/parquet.py", "output/delta/",
               "output/iceberg/")  # fmt: skip
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        where = path.relative_to(PACKAGE).as_posix()
        if where.startswith(allowed):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            names = [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            names += [a.name for a in node.names] if isinstance(node, ast.Import) else []
            found += [f"{where}: {n}" for n in names if n.startswith(formats)]
    assert not found, found
