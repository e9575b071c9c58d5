"""The docs site builds with `mkdocs build --strict`, and its references cover the code.

One build for the module (a few seconds), into a temporary folder: every command and option of
`evalpipe --help` is in the CLI reference, every key of the job config in the config reference,
every error class in the errors page, every column of the output schema in the output page; and
no page, nor the README, points a user at an issue or a section of a spec they cannot see.
"""

from __future__ import annotations

import ast
import html
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import click
import pytest
from pydantic import BaseModel

from evalpipe.cli.main import main
from evalpipe.config import JobConfig
from evalpipe.errors import EvalpipeError

pytestmark = [pytest.mark.subprocess, pytest.mark.patient]

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "pipeline" / "evalpipe"
README_MAX_LINES = 150
# "issue 13", "issue #13", "spec section 8", "spec 2.2", "(spec sections 2.2-2.5)", "section
# 4.1": pointers into the project's tracker or the service's spec, which users cannot see.
HIDDEN_REFERENCE = re.compile(
    r"\bissues?\s+#?\d+|\bspec(?:'s)?\s+(?:sections?\s+)?\d|\bsections?\s+\d+\.\d+",
    re.IGNORECASE,
)


# The site is built as `make docs` builds it on a fresh clone: with only evalpipe and `.[docs]`
# importable (tests/docs_only.py hides the test tools and the extras the suite has installed).
DOCS_ONLY = [sys.executable, str(ROOT / "tests" / "docs_only.py")]


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("site")
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    build = [*DOCS_ONLY, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)]
    done = subprocess.run(build, cwd=ROOT, env=env, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, f"mkdocs build --strict failed:\n{done.stderr[-4000:]}"
    return out


def test_the_build_sees_only_what_make_docs_installs() -> None:
    # what the suite has and `make docs` does not install is hidden from the build, so that a
    # hook importing an extra fails here as it fails on a fresh clone
    from docs_only import hidden, needed

    assert {"mkdocs", "mkdocs-material", "mkdocstrings", "pydantic", "ray"} <= needed()
    assert {"duckdb", "airflow", "dagster", "opentelemetry", "pytest", "jupyter_core"} <= hidden()
    probe = "import evalpipe.duckdb"
    done = subprocess.run([*DOCS_ONLY, "-c", probe], cwd=ROOT, capture_output=True, text=True)
    assert done.returncode != 0 and "No module named 'duckdb'" in done.stderr
    done = subprocess.run([*DOCS_ONLY, "-c", "import mkdocs, evalpipe.config"], cwd=ROOT)
    assert done.returncode == 0


def page(site: Path, name: str) -> str:
    return (site / name / "index.html").read_text(encoding="utf-8")


def text(markup: str) -> str:
    """The page's words, without tags: what a reader sees."""
    return html.unescape(re.sub(r"<[^>]+>", " ", markup))


def commands(
    command: click.Command, ctx: click.Context, path: str
) -> Iterator[tuple[str, click.Context]]:
    """(`evalpipe cache prune`, its context) for the root and every subcommand, lazy ones too."""
    yield path, ctx
    if isinstance(command, click.Group):
        for name in command.list_commands(ctx):
            sub = command.get_command(ctx, name)
            assert sub is not None, f"{path} {name} cannot be loaded"
            yield from commands(
                sub, click.Context(sub, info_name=name, parent=ctx), f"{path} {name}"
            )


def section(markup: str, anchor: str) -> str:
    """The HTML from the heading with id `anchor` to the next heading of any level."""
    start = markup.index(f'id="{anchor}"')
    following = re.compile(r"<h[1-6][\s>]").search(markup, start)
    return markup[start : following.start() if following else len(markup)]


def test_every_command_and_option_is_in_the_cli_reference(site: Path) -> None:
    cli = page(site, "reference/cli")
    seen = 0
    for path, ctx in commands(main, click.Context(main, info_name="evalpipe"), "evalpipe"):
        anchor = path.replace(" ", "-")
        assert f'id="{anchor}"' in cli, f"{path} has no section in the CLI reference"
        words = text(section(cli, anchor))
        for param in ctx.command.get_params(ctx):
            if isinstance(param, click.Option) and not param.hidden:
                for opt in [*param.opts, *param.secondary_opts]:
                    assert re.search(rf"(?<![\w-]){re.escape(opt)}(?![\w-])", words), (
                        f"{path} {opt} is not in its section of the CLI reference"
                    )
                    seen += 1
    assert seen > 30  # the walk found the commands' options, not just --help


def config_keys(model: type[BaseModel], prefix: str = "") -> Iterator[str]:
    for name, field in model.model_fields.items():
        yield prefix + name
        if isinstance(field.annotation, type) and issubclass(field.annotation, BaseModel):
            yield from config_keys(field.annotation, f"{prefix}{name}.")


def test_every_config_key_is_in_the_config_reference(site: Path) -> None:
    config = page(site, "reference/config")
    words = text(config)
    keys = list(config_keys(JobConfig))
    assert "limits.requests_per_minute" in keys
    for key in keys:
        assert f'id="{key}"' in config, f"{key} has no anchor in the config reference"
        assert key in words, f"{key} is not named in the config reference"


def error_classes(cls: type[EvalpipeError]) -> Iterator[type[EvalpipeError]]:
    yield cls
    for sub in cls.__subclasses__():
        if sub.__module__ == "evalpipe.errors":
            yield from error_classes(sub)


def test_every_error_class_and_exit_code_is_in_the_errors_page(site: Path) -> None:
    errors = page(site, "reference/errors")
    words = text(errors)
    classes = list(error_classes(EvalpipeError))
    assert len(classes) > 10
    for cls in classes:
        assert re.search(rf"\b{cls.__name__}\b", words), f"{cls.__name__} is not in the page"
    for code in {cls.exit_code for cls in classes} | {0, 130, 143}:
        assert f"<td>{code}</td>" in errors, f"exit code {code} is not in the table"


def test_every_error_class_says_in_its_own_docstring_when_it_happens() -> None:
    # The errors page shows each class's own docstring: a row's `_error_type` needs more than
    # its name (when it happens, what to do), and a subclass must not borrow its parent's.
    from evalpipe.errors import CallError

    for cls in error_classes(EvalpipeError):
        own = cls.__dict__.get("__doc__") or ""
        assert len(own.split()) >= 8, f"{cls.__name__} has no docstring of its own"
    for cls in list(error_classes(CallError))[1:]:  # its subclasses: the row error types
        words = " ".join(cls.__dict__["__doc__"].split())
        assert re.search(r"\b(run|check|fix|shorten)\b", words, re.IGNORECASE), (
            f"{cls.__name__}'s docstring does not say what to do"
        )


def test_every_column_of_the_schema_is_in_the_output_page(site: Path) -> None:
    from evalpipe.output.table import META_FIELDS

    words = text(page(site, "reference/output"))
    for name, _ in META_FIELDS:
        assert name in words, f"column {name} is not in the output reference"


def test_no_page_nor_the_readme_points_at_an_issue_or_a_spec_section(site: Path) -> None:
    pages = sorted(site.rglob("*.html"))
    assert len(pages) > 20
    for file in [ROOT / "README.md", *pages]:
        found = HIDDEN_REFERENCE.search(text(file.read_text(encoding="utf-8")))
        assert found is None, f"{file}: {found[0]!r}"


def test_the_readme_is_short_and_names_both_commands() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    lines = readme.count("\n")
    assert lines <= README_MAX_LINES, f"README.md has {lines} lines (at most {README_MAX_LINES})"
    for command in ("make demo", "make test"):
        assert command in readme, f"README.md does not name `{command}`"


def package_strings() -> Iterator[tuple[str, str]]:
    """(where, text) for every string literal of the package: docstrings and messages."""
    for file in sorted(PACKAGE.rglob("*.py")):
        tree = ast.parse(file.read_text(encoding="utf-8"), filename=str(file))
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                yield f"{file.relative_to(ROOT)}:{node.lineno}", node.value


def command_help() -> Iterator[tuple[str, str]]:
    """(`evalpipe cache prune --help`, its text) for every command."""
    for path, ctx in commands(main, click.Context(main, info_name="evalpipe"), "evalpipe"):
        yield f"{path} --help", ctx.get_help()


def source_texts() -> Iterator[tuple[str, str]]:
    """What a user reads before any build: README.md, docs/, the shipped configs and notebooks,
    and the package's own words."""
    yield "README.md", (ROOT / "README.md").read_text(encoding="utf-8")
    for folder in ("docs", "configs", "notebooks"):
        for file in sorted((ROOT / folder).rglob("*")):
            if file.suffix in {".md", ".yaml", ".yml", ".py", ".ipynb"}:
                yield str(file.relative_to(ROOT)), file.read_text(encoding="utf-8")
    yield from package_strings()
    yield from command_help()


def test_no_source_points_at_an_issue_or_a_spec_section() -> None:
    texts = list(source_texts())
    assert len(texts) > 100  # the walk found the package's strings, not just the README
    found = [
        f"{where}: {hit[0]!r}" for where, text in texts if (hit := HIDDEN_REFERENCE.search(text))
    ]
    assert not found, "pointers a user cannot follow:\n" + "\n".join(found)


@pytest.mark.parametrize(
    "sentence",
    [
        "as agreed in issue 13",
        "see issue #28",
        "(spec section 8)",
        "the API's questions map (spec 2.2-2.5)",
        "the checks of section 4.1",
    ],
)
def test_the_check_catches_hidden_references(sentence: str) -> None:
    assert HIDDEN_REFERENCE.search(sentence)


@pytest.mark.parametrize(
    "sentence",
    ["the issue is 3 rows short", "a Vega-Lite spec in-process", "an ISO 8601 date"],
)
def test_the_check_lets_plain_words_through(sentence: str) -> None:
    assert not HIDDEN_REFERENCE.search(sentence)


def test_the_newcomers_pages_are_built_and_troubleshooting_covers_every_error(site: Path) -> None:
    from evalpipe.errors import exit_codes

    for name in ("install", "troubleshooting", "how-to/fleet", "how-to/airflow-redis", "glossary"):
        assert (site / name / "index.html").is_file(), f"{name} is not built"
    words = text(page(site, "troubleshooting"))
    for cls in error_classes(EvalpipeError):
        if cls.__name__ not in ("EvalpipeError", "CallError"):  # the bases
            assert re.search(rf"\b{cls.__name__}\b", words), f"{cls.__name__}: no troubleshooting"
    for code, _ in exit_codes():
        if code != "0":
            assert f"Exit {code}" in words, f"exit {code} has no section in troubleshooting"
    glossary = text(page(site, "glossary"))
    for term in ("Shared tier", "Lease", "Journal", "Packing", "Partition", "Token ratio",
                 "Budget", "Fencing token", "Held output"):  # fmt: skip
        assert re.search(rf"\b{term}\b", glossary), f"the glossary has no {term}"
