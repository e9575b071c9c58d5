"""The docs' examples run as written, and print what the pages say they print.

A page marks an example runnable with a comment line just above its fenced block (invisible on
the site and on the repository's web view):

    <!-- runnable -->            the next block runs: `sh` and `console` blocks as commands from
                                 the repository's root (a `console` block's `$ ` lines are the
                                 commands, the lines under each what it prints), `python`
                                 blocks in one namespace per page, `sql` blocks in DuckDB (on
                                 the page's `con` when a Python block made one)
    <!-- runnable: exit N -->    the same, for commands that end with exit code N
    <!-- output -->             the next block is what the runnable block above it prints
    <!-- output: make demo -->   the next block is what `make demo` prints

Printed output is compared line by line, blanks at line ends ignored: `...` in a line stands
for any text, and a line that is only `...` for any number of lines. Every page under docs/
and the README is read, so a page added later is run too.

They run against one checkout made for the module, as a newcomer's is after `make demo`: the
shipped configs, the demo corpus, and `out/demo` scored by the commands of the Makefile's
`demo` target, with an answer cache of its own. Every `evalpipe run` there and on the pages
runs with the account's limits lifted: the figures are the same, only the pace is not.
Commands run in this process on the session's Ray (`evalpipe ...` and `.venv/bin/evalpipe ...`
alike through click's runner; their words are expanded by bash first, so `$(date -u +%F)` and
quotes mean what they mean in a shell).
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import shlex
import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from evalpipe.cli.main import main

ROOT = Path(__file__).resolve().parents[1]
PAGES = sorted([ROOT / "README.md", *(ROOT / "docs").rglob("*.md")])
MARK = re.compile(r"^<!-- (runnable|output)(?::\s*(.*?))? -->$")
FENCE = re.compile(r"^(\s*)(```+)\s*([\w-]*)")
LIFTED = ("--set", "limits.requests_per_minute=600000", "--set", "limits.tokens_per_second=1e9")

pytestmark = [pytest.mark.subprocess, pytest.mark.patient, pytest.mark.timeout(600)]


@dataclass
class Block:
    """A fenced block a marker names: its language, its text, and the marker's kind and note."""

    page: Path
    line: int
    kind: str  # runnable | output
    note: str
    language: str
    text: str

    @property
    def where(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"


def blocks(page: Path) -> list[Block]:
    """The marked blocks of `page`, in order."""
    lines = page.read_text(encoding="utf-8").splitlines()
    found: list[Block] = []
    for number, line in enumerate(lines):
        mark = MARK.match(line.strip())
        if mark is None:
            continue
        fence = FENCE.match(lines[number + 1]) if number + 1 < len(lines) else None
        assert fence, f"{page.relative_to(ROOT)}:{number + 1}: a marker not right above a block"
        indent, ticks, language = fence.groups()
        body: list[str] = []
        for inner in lines[number + 2 :]:
            if inner.strip() == ticks:
                break
            body.append(inner[len(indent) :] if inner.startswith(indent) else inner.lstrip())
        found.append(Block(page, number + 1, mark[1], mark[2] or "", language, "\n".join(body)))
    return found


MARKED = [page for page in PAGES if any(b.kind == "runnable" for b in blocks(page))]


# --------------------------------------------------------------------------- the checkout


@dataclass
class Checkout:
    """A newcomer's checkout after `make demo`: where the examples run."""

    root: Path
    cache: Path
    demo_printed: str
    env: dict[str, str] = field(default_factory=dict)


@pytest.fixture(scope="module")
def checkout(tmp_path_factory: pytest.TempPathFactory, ray_address: str) -> Iterator[Checkout]:
    root = tmp_path_factory.mktemp("checkout")
    shutil.copytree(ROOT / "configs", root / "configs")  # copies: `init --out` may write here
    (root / "data" / "demo").mkdir(parents=True)
    (root / "data" / "demo" / "reviews.parquet").symlink_to(ROOT / "data/demo/reviews.parquet")
    cache = root / ".cache"
    with _at(root, {"XDG_CACHE_HOME": str(cache)}):
        printed = []
        for command in _demo_commands():
            lifted = LIFTED if command[:1] == ["run"] else ()
            done = CliRunner().invoke(main, [*command, *lifted])
            assert done.exit_code == 0, done.output[-3000:]
            printed.append(f"{' '.join(['.venv/bin/evalpipe', *command])}\n{done.output}")
    yield Checkout(root, cache, "".join(printed))


def _demo_commands() -> list[list[str]]:
    """The evalpipe commands of the Makefile's `demo` target, as make runs them."""
    recipe = (ROOT / "Makefile").read_text(encoding="utf-8").split("\ndemo:", 1)[1]
    commands = []
    for line in recipe.splitlines()[1:]:
        if not line.startswith("\t"):
            break
        words = shlex.split(line.strip())
        assert words[0] == "$(BIN)/evalpipe", line
        commands.append(words[1:])
    return commands


@contextlib.contextmanager
def _at(root: Path, env: dict[str, str]) -> Iterator[None]:
    with contextlib.chdir(root), pytest.MonkeyPatch.context() as patch:
        for name, value in env.items():
            patch.setenv(name, value)
        yield


# --------------------------------------------------------------------------- running


def expand(line: str, env: dict[str, str]) -> list[str]:
    """The words of a shell command line as bash makes them (quotes, `$(...)`, variables)."""
    script = 'for word in "$@"; do printf "%s\\0" "$word"; done'
    done = subprocess.run(
        ["bash", "-c", f"set -- {line}\n{script}"],
        capture_output=True, text=True, check=True, env={**os.environ, **env}, timeout=30,
    )  # fmt: skip
    return done.stdout.split("\0")[:-1]


def commands(text: str) -> list[str]:
    """A shell block's command lines: continuations joined, blank and comment lines dropped."""
    joined = re.sub(r"\\\n\s*", " ", text)
    return [
        line for line in joined.splitlines() if line.strip() and not line.lstrip().startswith("#")
    ]


def run_command(line: str, page: Page) -> tuple[int, str]:
    """One command line, in this process: `export V=x`, or `[V=x ...] [.venv/bin/]evalpipe ...`."""
    words = expand(line, page.env)
    if words[:1] == ["export"]:
        for assignment in words[1:]:
            name, _, value = assignment.partition("=")
            page.env[name] = value
        return 0, ""
    env = dict(page.env)
    while words and re.match(r"^[A-Za-z_][A-Za-z0-9_]*=", words[0]):
        name, _, value = words.pop(0).partition("=")
        env[name] = value
    assert words and words[0] in ("evalpipe", ".venv/bin/evalpipe"), (
        f"not an evalpipe command: {line}"
    )
    lifted = LIFTED if words[1:2] == ["run"] else ()
    with _at(page.checkout.root, env):
        done = CliRunner().invoke(main, [*words[1:], *lifted])
    if done.exception is not None and not isinstance(done.exception, SystemExit):
        raise done.exception
    return done.exit_code, done.output


def matches(expected: str, printed: str) -> bool:
    """`printed` is what `expected` shows: `...` for any text in a line, a `...` line for lines."""
    parts = []
    for line in expected.rstrip().splitlines():
        if line.strip() == "...":
            parts.append(r"(?:[^\n]*\n)*?")
            continue
        parts.append(re.escape(line.rstrip()).replace(r"\.\.\.", "[^\n]*?") + "\n")
    printed = "\n".join(row.rstrip() for row in printed.rstrip().splitlines()) + "\n"
    return re.fullmatch("".join(parts), printed) is not None


@dataclass
class Page:
    """One page's run: its namespace, its exported variables, what the last block printed."""

    checkout: Checkout
    namespace: dict[str, Any] = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)
    printed: str | None = None

    def run(self, block: Block) -> None:
        code = int(block.note.removeprefix("exit").strip() or 0) if block.note else 0
        if block.language == "python":
            self.printed = self.python(block)
        elif block.language == "sql":
            self.printed = self.sql(block)
        elif block.language == "console":
            self.console(block, code)
        elif block.language in ("sh", "bash"):
            self.printed = ""
            for line in commands(block.text):
                exit_code, printed = run_command(line, self)
                assert exit_code == code, (
                    f"{block.where}: `{line}` exited {exit_code}\n{printed[-3000:]}"
                )
                self.printed += printed
        else:
            raise AssertionError(f"{block.where}: cannot run a {block.language!r} block")

    def python(self, block: Block) -> str:
        out = io.StringIO()
        with _at(self.checkout.root, self.env), contextlib.redirect_stdout(out):
            exec(compile(block.text, block.where, "exec"), self.namespace)
        return out.getvalue()

    def sql(self, block: Block) -> str:
        import duckdb

        con = self.namespace.setdefault("con", duckdb.connect())
        out = io.StringIO()
        with _at(self.checkout.root, self.env), contextlib.redirect_stdout(out):
            for statement in (s for s in block.text.split(";") if s.strip()):
                found = con.sql(statement)
                if found is not None:
                    found.show()
        return out.getvalue()

    def console(self, block: Block, code: int) -> None:
        steps = re.split(r"^\$ ", block.text, flags=re.MULTILINE)[1:]
        assert steps, f"{block.where}: a console block without a `$ ` command"
        for step in steps:
            line, _, expected = step.partition("\n")
            while line.endswith("\\"):
                more, _, expected = expected.partition("\n")
                line = line[:-1] + " " + more.strip()
            exit_code, printed = run_command(line, self)
            assert exit_code == code, (
                f"{block.where}: `{line}` exited {exit_code}\n{printed[-3000:]}"
            )
            assert matches(expected, printed), f"{block.where}: `{line}` printed\n{printed}"
        self.printed = None


@pytest.mark.parametrize("path", MARKED, ids=lambda p: str(p.relative_to(ROOT)))
def test_the_examples_run_as_written(
    path: Path, checkout: Checkout, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(checkout.cache))  # the checkout's answer cache
    page = Page(checkout)
    for block in blocks(path):
        if block.kind == "runnable":
            page.run(block)
            continue
        printed = checkout.demo_printed if block.note == "make demo" else page.printed
        assert printed is not None, f"{block.where}: an output block after no runnable block"
        assert matches(block.text, printed), f"{block.where}: it printed\n{printed}"


def test_every_marker_names_a_block_it_can_run() -> None:
    for page in PAGES:
        for block in blocks(page):
            if block.kind == "runnable":
                assert block.language in ("python", "sql", "console", "sh", "bash"), block.where
            else:
                assert block.note in ("", "make demo"), block.where


def test_every_config_the_docs_name_is_shipped() -> None:
    """`configs/X.yaml` in a page, the README or a notebook is a shipped config (each of which
    tests/test_configs.py plans)."""
    named = set()
    for file in [*PAGES, *(ROOT / "notebooks").glob("*.ipynb")]:
        named |= set(re.findall(r"configs/[\w.-]+\.ya?ml", file.read_text(encoding="utf-8")))
    assert {"configs/demo.yaml", "configs/nightly.yaml"} <= named
    missing = sorted(name for name in named if not (ROOT / name).is_file())
    assert not missing, f"named by the docs, not shipped: {missing}"


def test_the_matcher() -> None:
    assert matches("rows 3000\n...\ncost $...\n", "rows 3000\nx\ny\ncost $0.05\n")
    assert not matches("rows 3000\n", "rows 2999\n")
    assert matches("a\n...\n", "a\n")
