"""The references that are made from the code at build time (an mkdocs hook, see mkdocs.yml).

A page asks for one with a marker line, `<!-- reference: NAME -->`, which the hook replaces
with Markdown made from the code (with the lines after it up to `<!-- /reference -->`, if the
page has one: what a reader of the repository's web view sees instead, where nothing is built):

    config-keys   every key of the job config: the pydantic model's fields, their types,
                  defaults and descriptions (evalpipe.config)
    errors        the exit-code table (evalpipe.errors.exit_codes, which `--help` prints too),
                  then the exception tree: each class's exit code and first docstring line
    error-types   the row error types of the `_error_type` column, and which a resume retries
    columns       the output table's columns, from the schema the sink writes
                  (evalpipe.output.output_schema)
    python-api    mkdocstrings blocks for `import evalpipe as ep` and the errors
    subpackages   one mkdocstrings block per other subpackage of evalpipe, found by walking it
    tutorial-notebook
                  notebooks/tutorial.ipynb as a page (its Markdown and code cells)
    metrics       the run's Prometheus / OpenTelemetry metrics (evalpipe.observe.METRICS)
    rooms         the package's layers (import-linter's contract in pyproject.toml): each
                  subpackage, what it owns (its docstring's first sentence), what it may
                  import (the layers below it) and what it imports today

An unknown marker, or code that the text below no longer covers (an output column or a row
error type without a meaning here), fails the build: the reference cannot drift silently.

It also registers the CLI's lazily imported commands on the root group before mkdocs-click
reads it: mkdocs-click takes a group's `commands` when that dict is not empty and then never
calls `list_commands`, so the lazy `serve`, `report`, `cache` and `init` would be missing.
"""

from __future__ import annotations

import inspect
import pkgutil
import re
import types
import typing
from pathlib import Path
from typing import Any

import annotated_types
import click
from mkdocs.config.defaults import MkDocsConfig
from mkdocs.exceptions import PluginError
from mkdocs.structure.files import Files
from mkdocs.structure.pages import Page
from pydantic import BaseModel
from pydantic.fields import FieldInfo

# The marker, and what stands in its place on the repository's web view (which shows the page's
# Markdown as it is): the lines up to `<!-- /reference -->`, replaced with it.
MARKER = re.compile(
    r"^<!-- reference: ([a-z-]+) -->$(?:\n(?:(?!<!-- reference).*\n)*?<!-- /reference -->$)?",
    re.MULTILINE,
)


# --------------------------------------------------------------------------- the CLI


def on_config(config: MkDocsConfig) -> MkDocsConfig:
    """Make every subcommand of `evalpipe` visible to mkdocs-click, in `--help`'s order."""
    from evalpipe.cli.main import main

    with click.Context(main, info_name="evalpipe") as ctx:
        commands = {}
        for name in main.list_commands(ctx):
            command = main.get_command(ctx, name)
            if command is None:
                raise PluginError(f"evalpipe {name}: listed by the CLI but cannot be loaded")
            commands[name] = command
    main.commands = commands
    return config


# --------------------------------------------------------------------------- config keys


def _cell(text: str) -> str:
    """Text made fit for one cell of a Markdown table."""
    return " ".join(text.split()).replace("|", "\\|")


def _constraints(metadata: list[Any]) -> list[str]:
    marks = {
        annotated_types.Gt: ("gt", ">"),
        annotated_types.Ge: ("ge", "≥"),
        annotated_types.Lt: ("lt", "<"),
        annotated_types.Le: ("le", "≤"),
    }
    found = []
    for item in metadata:
        for kind, (attr, sign) in marks.items():
            if isinstance(item, kind):
                found.append(f"{sign} {getattr(item, attr)}")
        if isinstance(item, FieldInfo):
            found.extend(_constraints(item.metadata))
    return found


def _type(annotation: Any, metadata: list[Any] | None = None) -> str:
    """A config value's type in the words of a YAML file, with its bounds."""
    from evalpipe.stores import Location

    metadata = list(metadata or [])
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        base, *extra = typing.get_args(annotation)
        return _type(base, metadata + extra)
    bounds = _constraints(metadata)
    suffix = (" " + ", ".join(bounds)) if bounds else ""
    if annotation == Location:
        return "path or URI"
    if origin in (typing.Union, types.UnionType):
        members = [a for a in typing.get_args(annotation) if a is not type(None)]
        return " or ".join(_type(a) for a in members) + suffix
    if origin is typing.Literal:
        return "one of " + ", ".join(f"`{v}`" for v in typing.get_args(annotation))
    if origin is tuple:
        return "list of " + _type(typing.get_args(annotation)[0]) + "s"
    if origin is dict:
        key, value = typing.get_args(annotation)
        return "mapping" if value is Any else f"mapping of {_type(key)} to {_type(value)}"
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return "section"
    names = {bool: "boolean", int: "integer", float: "number", str: "string", Path: "path"}
    if annotation not in names:
        raise PluginError(f"config reference: no name for the type {annotation!r}")
    return names[annotation] + suffix


def _default(field: FieldInfo) -> str:
    if field.is_required():
        return "**required**"
    value = field.get_default(call_default_factory=True)
    if isinstance(value, BaseModel):
        return "every key has one"
    if value is None:
        return "unset"
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    return f"`{value}`"


def _describe(path: str, field: FieldInfo) -> str:
    if not field.description:
        raise PluginError(f"config reference: {path} has no description (a field docstring)")
    return _cell(field.description)


def config_keys() -> str:
    """One section per key of the job config; a section's keys in one table."""
    from evalpipe.config import JobConfig

    out = []
    for name, field in JobConfig.model_fields.items():
        section = field.annotation
        required = "Required." if field.is_required() else "Optional."
        out += [f"## `{name}`", "", f"{_describe(name, field)} {required}", ""]
        if not (isinstance(section, type) and issubclass(section, BaseModel)):
            out += [
                f"Type: {_type(field.annotation, field.metadata)}. Default: {_default(field)}.",
                "",
            ]
            continue
        out += ["| key | type | default | meaning |", "|---|---|---|---|"]
        for key, sub in section.model_fields.items():
            path = f"{name}.{key}"
            out.append(
                f'| <code id="{path}">{path}</code> | {_type(sub.annotation, sub.metadata)} '
                f"| {_default(sub)} | {_describe(path, sub)} |"
            )
        out.append("")
    return "\n".join(out)


# --------------------------------------------------------------------------- errors


def _tree_lines() -> dict[str, str]:
    """The one-line descriptions drawn beside each class in errors.py's module docstring."""
    import evalpipe.errors as errors

    lines = {}
    for line in (errors.__doc__ or "").splitlines():
        found = re.match(r"^[\s│├└─]*([A-Z]\w+)\s{2,}(.+)$", line)
        if found:
            lines[found[1]] = found[2].strip()
    return lines


def _summary(cls: type, tree: dict[str, str]) -> str:
    """The class's own docstring's first sentence-line, else its line in the module's tree."""
    own = cls.__dict__.get("__doc__")
    if own:
        return _cell(inspect.cleandoc(own).split("\n\n")[0])
    if cls.__name__ in tree:
        return _cell(tree[cls.__name__])
    raise PluginError(f"errors reference: {cls.__name__} has no docstring nor a line in the tree")


def _walk(cls: type, depth: int = 0) -> list[tuple[int, type]]:
    found = [(depth, cls)]
    for sub in cls.__subclasses__():
        if sub.__module__ == cls.__module__:
            found += _walk(sub, depth + 1)
    return found


def errors() -> str:
    """The exit codes (`evalpipe.errors.exit_codes`, the table `--help` prints too), then every
    class of the tree with its own line."""
    from evalpipe.errors import CallError, EvalpipeError, exit_codes, retry_mends

    tree = _tree_lines()
    classes = _walk(EvalpipeError)
    table = exit_codes()
    missing = {cls.exit_code for _, cls in classes} - {int(code) for code, _ in table}
    if missing:
        raise PluginError(f"errors reference: exit codes {sorted(missing)} are not in exit_codes()")
    out = ["| exit code | when | a scheduler retries it |", "|---|---|---|"]
    for code, meaning in table:
        again = (
            "" if code == "0" else ("yes: the retry resumes" if retry_mends(int(code)) else "no")
        )
        out.append(f"| {code} | {_cell(meaning[:1].upper() + meaning[1:])}. | {again} |")
    out += [
        "",
        "## Error types",
        "",
        "Every error is a subclass of `EvalpipeError`; indentation shows the tree. A "
        "`CallError` is one failed request: in a job it becomes the row's `_error_type`, and "
        "never ends the run.",
        "",
        "| error type | exit code | row `_error_type` | what it means |",
        "|---|---|---|---|",
    ]
    for depth, cls in classes:
        name = "&emsp;" * depth + f"`{cls.__name__}`"
        row_type = f"`{cls.error_type}`" if issubclass(cls, CallError) else ""
        code = "" if issubclass(cls, CallError) else str(cls.exit_code)
        out.append(f"| {name} | {code} | {row_type} | {_summary(cls, tree)} |")
    return "\n".join(out)


# Why a row was not answered: the values of `_error_type`, in the words of an analyst.
ERROR_TYPES = {
    "invalid_state": "The state is null, empty or whitespace (for an object state: every "
    "column null or blank). It was never sent.",
    "context_limit": "The state with its longest question is over the service's context "
    "limit. It was never sent, or the service refused even one question at a time for length.",
    "rejected": "The service refused the request (422, or another answer that retrying "
    "cannot fix: 400, 403, 404, 413, ...).",
    "rate_limited": "The service answered 429 until `retries.max_attempts` ran out.",
    "overloaded": "The service answered 529 until the attempts ran out.",
    "server_error": "The service answered 408 or 5xx until the attempts ran out.",
    "network": "Timeouts, refused or dropped connections until the attempts ran out.",
    "invalid_response": "The body was not JSON or broke the API contract, until the attempts "
    "ran out.",
}


def error_types() -> str:
    """The row error types the code can write, with whether a resume sends them again."""
    from evalpipe.errors import CONTEXT_LIMIT, INVALID_STATE, RETRYABLE_ERROR_TYPES, CallError

    written = [INVALID_STATE] + [cls.error_type for _, cls in _walk(CallError)]
    written = list(dict.fromkeys(written))
    if set(written) != set(ERROR_TYPES) or CONTEXT_LIMIT not in written:
        raise PluginError(
            "output reference: the row error types in evalpipe.errors "
            f"({sorted(written)}) and those described in docs/hooks/reference.py "
            f"({sorted(ERROR_TYPES)}) differ"
        )
    out = ["| `_error_type` | meaning | sent again on resume |", "|---|---|---|"]
    for name, meaning in ERROR_TYPES.items():
        again = "yes" if name in RETRYABLE_ERROR_TYPES else "no"
        out.append(f"| `{name}` | {meaning} | {again} |")
    return "\n".join(out)


# --------------------------------------------------------------------------- output columns

# The example job whose schema the page shows: one question of each type.
EXAMPLE_ID = "review_id"
EXAMPLE_QUESTIONS = {
    "helpful": {"type": "noul", "instructions": "...", "criteria": {"true": "...", "false": "..."}},
    "sentiment": {
        "type": "choice",
        "instructions": "...",
        "criteria": {"positive": None, "negative": None, "mixed": "..."},
    },
    "quality": {"type": "score", "instructions": "...", "criteria": ["poor", "fair", "good"]},
}


def _generic(name: str, key: str, kind: str, names: list[str]) -> str:
    """A question column's name with its key as `K` (and its option or level as a pattern)."""
    general = "K" + name[len(key) :]
    for part in ("p", "p_calibrated"):
        if any(general == f"K__{part}__{n}" for n in names):
            return f"K__{part}__<option>" if kind == "choice" else f"K__{part}__<level>"
    return general


def _example_calibration() -> Any:
    """A made-up calibration of the example job (`calibration.file: calibration.json`, with
    `target_agreement: 0.95`), so the page shows the columns a calibration adds."""
    from evalpipe.calibration import CalibratedQuestion, Calibration

    figures = {"ece": {"before": 0.142, "after": 0.031}, "brier": {"before": 0.231, "after": 0.198}}
    abstain = {"target": 0.95, "confidence": 0.9, "threshold": 0.91, "bound": 0.953,
               "kept": 118, "rows": 200}  # fmt: skip
    made = {
        "helpful": CalibratedQuestion("noul", "", "platt", {"a": 0.6, "b": 0.1}, (), 200, figures),
        "sentiment": CalibratedQuestion("choice", "", "temperature", {"t": 1.7}, (), 200, figures),
        "quality": CalibratedQuestion("score", "", "temperature", {"t": 1.4}, (), 200, figures),
    }
    made = {key: q.abstaining(**abstain) for key, q in made.items()}
    return Calibration(
        "embedded", "model-1.13.0", "2026-11-30T09:00:00Z", made, name="calibration.json"
    )


def columns() -> str:
    """The example job's columns in the schema's order, each with the description the writer
    puts in its Parquet field metadata (`evalpipe.output.columns`: the one source)."""
    import pyarrow as pa

    from evalpipe.output import describe, output_schema, schema_layout
    from evalpipe.output.table import with_sample_weight

    # with the columns a calibration adds (`calibration.file`), and the column only an output
    # `evalpipe estimate` sampled has (last, described so)
    calibration = _example_calibration()
    schema = output_schema(EXAMPLE_ID, pa.int64(), EXAMPLE_QUESTIONS, "embedded", calibration)
    schema = with_sample_weight(schema)
    owner = {}
    for key, kind, _, names in schema_layout(schema):
        for field in schema:
            if field.name.startswith(f"{key}__"):
                owner[field.name] = (key, _generic(field.name, key, kind, names))
    out = ["| column | type | pattern | what |", "|---|---|---|---|"]
    for entry in describe(schema):
        name = entry["column"]
        if not entry["description"]:
            raise PluginError(f"output reference: column {name} has no description")
        pattern = f"`{owner[name][1]}`" if name in owner else ""
        what = _cell(entry["description"])
        if entry["role"]:
            what = f"*{entry['role']}*: {what}"
        out.append(f"| `{name}` | {entry['type']} | {pattern} | {what} |")
    out += [
        "",
        f"The example job has the id column `{EXAMPLE_ID}`, a noul question `helpful`, a choice "
        "question `sentiment` (options `positive`, `negative`, `mixed`) and a score question "
        "`quality` (levels `poor`, `fair`, `good`), calibrated by a file `calibration.json` "
        "with `calibration.target_agreement: 0.95` (the columns marked *calibrated* and "
        "*abstain*, whose figures are that example's; a job without `calibration.file` has "
        "none of them). `evalpipe describe OUTPUT` prints the same dictionary for any output, "
        "from its own files.",
    ]
    return "\n".join(out)


# --------------------------------------------------------------------------- Python API

# What `import evalpipe as ep` offers (its docstring; `evalpipe.api` holds the names it lends
# out, loaded on first use), and the exception tree; the other subpackages are internal.
FRONT = ("evalpipe.api", "evalpipe.errors")
# The SQL and DataFrame front ends on the same engine, and the schedulers' (extras of their
# own), each imported by name.
FRONT_ENDS = ("evalpipe.duckdb", "evalpipe.polars", "evalpipe.airflow", "evalpipe.dagster")


def _blocks(names: list[str], **options: object) -> str:
    out = []
    for name in names:
        out += [f"::: {name}", "    options:", "      show_submodules: false"]
        out += [f"      {key}: {str(value).lower()}" for key, value in options.items()]
        out.append("")
    return "\n".join(out)


def python_api() -> str:
    """The package's docstring, then the Python API's names and the errors."""
    front = _blocks(["evalpipe"], members=False) + "\n" + _blocks(list(FRONT))
    return front + "\n" + _blocks(list(FRONT_ENDS))


def subpackages() -> str:
    """An mkdocstrings block for every other subpackage of evalpipe, found by walking it."""
    import evalpipe

    found = sorted(f"evalpipe.{m.name}" for m in pkgutil.iter_modules(evalpipe.__path__))
    shown = (*FRONT, *FRONT_ENDS)
    missing = [name for name in shown if name not in found]
    if missing:
        raise PluginError(f"Python API reference: {missing} no longer exist")
    return _blocks([name for name in found if name not in shown])


# --------------------------------------------------------------------------- the tutorial

NOTEBOOK = Path(__file__).resolve().parents[2] / "notebooks" / "tutorial.ipynb"


def tutorial_notebook() -> str:
    """The tutorial notebook as a page: its Markdown cells as they are, its code cells as
    Python blocks (the notebook is kept without outputs: the test suite executes it)."""
    import json

    cells = json.loads(NOTEBOOK.read_text(encoding="utf-8"))["cells"]
    out = []
    for cell in cells:
        source = "".join(cell["source"]).strip()
        if cell["cell_type"] == "markdown":
            out.append(source)
        elif cell["cell_type"] == "code" and source:
            out.append(f"```python\n{source}\n```")
    return "\n\n".join(out)


# --------------------------------------------------------------------------- metrics


def metrics() -> str:
    """The run's metrics, from their one definition (evalpipe.observe.METRICS)."""
    from evalpipe.observe import METRICS

    rows = [
        "| Metric | Type | Labels | Unit | Meaning |",
        "| --- | --- | --- | --- | --- |",
    ]
    for m in METRICS:
        labels = ", ".join(f"`{label}`" for label in m.labels) or "—"
        rows.append(f"| `{m.name}` | {m.kind} | {labels} | `{_cell(m.unit)}` | {_cell(m.help)} |")
    return "\n".join(rows)


# --------------------------------------------------------------------------- the rooms

ROOT = Path(__file__).resolve().parents[2]


def _layers() -> list[list[str]]:
    """import-linter's layers contract, top first: each layer's rooms (`evalpipe.` dropped)."""
    import tomllib

    settings = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    [layered] = [c for c in settings["contracts"] if c["type"] == "layers"]
    return [
        [r.strip().removeprefix("evalpipe.") for r in layer.split("|")]
        for layer in layered["layers"]
    ]


def _imported(room: str) -> set[str]:
    """The rooms `room`'s modules import today (any import, at any depth of a function)."""
    import ast

    package = ROOT / "pipeline" / "evalpipe"
    files = list((package / room).rglob("*.py")) or [package / f"{room}.py"]
    found: set[str] = set()
    for path in files:
        for node in ast.walk(ast.parse(path.read_text())):
            names = [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            names += [a.name for a in node.names] if isinstance(node, ast.Import) else []
            found |= {n.split(".")[1] for n in names if n.startswith("evalpipe.")}
    return found - {room, "lazy"}


def _owns(room: str) -> str:
    """The first sentence of the room's docstring, read from its source, not imported: a room
    may import an optional extra (`evalpipe.duckdb` imports DuckDB), and the docs build needs
    only what `make docs` installs (tests/test_docs.py builds the site with the extras hidden)."""
    import ast

    package = ROOT / "pipeline" / "evalpipe"
    source = package / room / "__init__.py"
    if not source.exists():
        source = package / f"{room}.py"
    doc = ast.get_docstring(ast.parse(source.read_text(encoding="utf-8"))) or ""
    return _cell(re.split(r"(?<=\.)\s", " ".join(doc.split()), maxsplit=1)[0])


def rooms() -> str:
    """The layers, top first: a row per room, what it owns, may import, and does import."""
    layers = _layers()
    rows = ["| layer | room | what it owns | may touch | touches today |",
            "| --- | --- | --- | --- | --- |"]  # fmt: skip
    for depth, layer in enumerate(layers, start=1):
        below = [r for lower in layers[depth:] for r in lower]
        for room in layer:
            uses = _imported(room)
            wrong = uses - set(below)
            if wrong:
                raise PluginError(f"evalpipe.{room} imports {sorted(wrong)}: not below it")
            may = f"layers {depth + 1}-{len(layers)}" if below else "nothing of evalpipe"
            now = ", ".join(f"`{r}`" for r in sorted(uses, key=below.index)) or "—"
            rows.append(f"| {depth} | `{room}` | {_owns(room)} | {may} | {now} |")
    return "\n".join(rows)


# --------------------------------------------------------------------------- the hook

MAKERS = {
    "config-keys": config_keys,
    "errors": errors,
    "error-types": error_types,
    "columns": columns,
    "python-api": python_api,
    "subpackages": subpackages,
    "tutorial-notebook": tutorial_notebook,
    "metrics": metrics,
    "rooms": rooms,
}


def on_page_markdown(markdown: str, page: Page, config: MkDocsConfig, files: Files) -> str:
    """Replace each marker line with the reference it names."""

    def made(found: re.Match[str]) -> str:
        name = found[1]
        if name not in MAKERS:
            raise PluginError(f"{page.file.src_uri}: no reference named {name!r}")
        return MAKERS[name]()

    return MARKER.sub(made, markdown)
