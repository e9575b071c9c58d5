"""Facts the code holds, written into the pages by the code (an mkdocs hook, see mkdocs.yml).

A page names a fact inline, or as a block on lines of its own:

    a scheduler fails at once on <!-- fact: no-retry-codes -->2, 3, 4, 6 and 8<!-- /fact -->

    <!-- fact: exit-table -->
    | exit | what happened | a scheduler retries it |
    ...
    <!-- /fact -->

Between the markers is the text the repository's web view shows (where nothing is built); the
site shows the code's value in its place. tests/test_docs_facts.py fails when the text between
the markers is not the code's value, and `python docs/hooks/facts.py` writes the code's values
into every page (README.md and docs/**/*.md), so a fact is never typed by hand:

    no-retry-codes    the exit codes no scheduler retries (evalpipe.errors.NO_RETRY_EXIT_CODES)
    retried-codes     every other exit code of `evalpipe run` but 0 (evalpipe.errors.retry_mends)
    exit-CLASS        the exit code of the error class CLASS of evalpipe.errors (`exit-AuthError`)
    lease-seconds     how long an output's lease in the shared tier outlives its last renewal
                      (evalpipe.tier.lease.LEASE_SECONDS, the default)
    stale-seconds     how long a job's keepalive may be silent before the account's Budget stops
                      holding its limits (evalpipe.limits.account.STALE_SECONDS)
    claim-seconds     how long a claim of a state to pay lasts unrenewed, at most
                      (evalpipe.cache.shared.CLAIM_SECONDS)
    store-patience-seconds  how long an object store that went away mid-run is waited for
                      (evalpipe.stores.patience.PATIENCE_SECONDS)
    store-attempts    how many attempts pyarrow's S3 client makes at a request meanwhile
                      (evalpipe.stores.patience.STORE_ATTEMPTS)
    json-events       the `event` names of `--log-format json`, read from the code's emit calls
    exit-table        every exit code, what it means, and whether a scheduler retries it
    troubleshooting   every exit code with the errors that end a run with it (their docstrings:
                      what happened, what to do), then the row error types
    make-test-installs  what `make test` installs: Python extras and Debian packages (Makefile)
    make-test-workers  how many pytest workers `make test` runs the suite on (Makefile's XDIST)
    configs           the job configs shipped in configs/
    extras-table      pyproject.toml's extras: what each is for and installs
    python-requires   the oldest Python evalpipe runs on; version: the package's version
"""

from __future__ import annotations

import ast
import functools
import inspect
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "pipeline" / "evalpipe"
FACT = re.compile(r"<!-- fact: ([A-Za-z0-9-]+) -->(.*?)<!-- /fact -->", re.DOTALL)


def _said(codes: list[int]) -> str:
    """`[2, 3, 6]` as `2, 3 and 6`."""
    words = [str(code) for code in sorted(codes)]
    return words[0] if len(words) == 1 else ", ".join(words[:-1]) + " and " + words[-1]


def _codes() -> list[int]:
    """Every exit code `evalpipe run` ends with, 0 included (evalpipe.errors.exit_codes)."""
    from evalpipe.errors import exit_codes

    return sorted(int(code) for code, _ in exit_codes())


def no_retry_codes() -> str:
    from evalpipe.errors import NO_RETRY_EXIT_CODES

    return _said(list(NO_RETRY_EXIT_CODES))


def retried_codes() -> str:
    from evalpipe.errors import retry_mends

    return _said([code for code in _codes() if retry_mends(code)])


def exit_code(name: str) -> str:
    import evalpipe.errors as errors

    cls = getattr(errors, name, None)
    if not (isinstance(cls, type) and issubclass(cls, errors.EvalpipeError)):
        raise LookupError(f"exit-{name}: no error class {name} in evalpipe.errors")
    return str(cls.exit_code)


def lease_seconds() -> str:
    from evalpipe.tier.lease import LEASE_SECONDS

    return f"{LEASE_SECONDS:g}"


def stale_seconds() -> str:
    from evalpipe.limits.account import STALE_SECONDS

    return f"{STALE_SECONDS:g}"


def claim_seconds() -> str:
    from evalpipe.cache.shared import CLAIM_SECONDS

    return f"{CLAIM_SECONDS:g}"


def store_patience_seconds() -> str:
    from evalpipe.stores.patience import PATIENCE_SECONDS

    return f"{PATIENCE_SECONDS:g}"


def store_attempts() -> str:
    from evalpipe.stores.patience import STORE_ATTEMPTS

    return f"{STORE_ATTEMPTS}"


@functools.cache
def events() -> list[str]:
    """The JSON log's event names: the first argument of every `.emit("name", ...)` call of the
    package (the event log's one way out, `evalpipe.engine.events.EventLog.emit`)."""
    found = set()
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr == "emit"
                and node.args
                and isinstance(node.args[0], ast.Constant)
                and isinstance(node.args[0].value, str)
            ):
                found.add(node.args[0].value)
    return sorted(found)


def json_events() -> str:
    names = [f"`{name}`" for name in events()]
    return ", ".join(names[:-1]) + " and " + names[-1]


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def _meaning(text: str) -> str:
    return text[:1].upper() + text[1:] + "."


def exit_table() -> str:
    from evalpipe.errors import exit_codes, retry_mends

    out = ["| exit | what happened | a scheduler retries it |", "|---|---|---|"]
    for code, meaning in sorted(exit_codes(), key=lambda row: int(row[0])):
        number = int(code)
        again = (
            "" if number == 0 else ("yes: the retry resumes" if retry_mends(number) else "**no**")
        )
        out.append(f"| {code} | {_cell(_meaning(meaning))} | {again} |")
    return "\n".join(out)


def _classes() -> list[type]:
    """Every error class of evalpipe.errors, parents first."""
    import evalpipe.errors as errors

    def walk(cls: type) -> list[type]:
        return [cls] + [c for sub in cls.__subclasses__()
                        if sub.__module__ == errors.__name__ for c in walk(sub)]  # fmt: skip

    return walk(errors.EvalpipeError)


def _doc(cls: type) -> str:
    own = cls.__dict__.get("__doc__") or ""
    return " ".join(inspect.cleandoc(own).split("\n\n")[0].split())


def troubleshooting() -> str:
    """Per exit code, what it means, whether a scheduler retries it, and each error class that
    ends a run with it, in its own docstring's words; then the row error types."""
    from evalpipe.errors import CallError, exit_codes, retry_mends

    classes = [cls for cls in _classes() if not issubclass(cls, CallError)]
    out: list[str] = []
    for code, meaning in sorted(exit_codes(), key=lambda row: int(row[0])):
        number = int(code)
        if number == 0:
            continue
        again = (
            "a scheduler retries it, and the retry resumes"
            if retry_mends(number)
            else ("a scheduler does not retry it (`evalpipe.errors.NO_RETRY_EXIT_CODES`)")
        )
        out += [f"## Exit {code}", "", f"{_meaning(meaning)} {again[:1].upper()}{again[1:]}.", ""]
        for cls in classes:
            if cls.exit_code == number and cls.__name__ != "EvalpipeError":
                out += [f"- **`{cls.__name__}`**: {_doc(cls)}"]
        out.append("")
    out += [
        "## A row in error (no exit code)",
        "",
        "A failed request never ends the run: its rows get an `_error_type` and the job goes "
        "on (the summary counts them; `--max-error-rate` makes too many of them exit "
        f"{exit_code('TooManyErrors')}).",
        "",
    ]
    for cls in _classes():
        if issubclass(cls, CallError) and cls is not CallError:
            out.append(f"- **`{cls.__name__}`** (`{cls.error_type}`): {_doc(cls)}")  # type: ignore[attr-defined]
    return "\n".join(out)


# --------------------------------------------------------------------------- the Makefile

MAKEFILE = ROOT / "Makefile"


def _rules() -> tuple[dict[str, list[str]], dict[str, list[str]]]:
    """The Makefile's rules: target -> prerequisites, target -> recipe lines (variables made
    of other variables expanded, as make does for `$(BIN)`, `$(DEVTOOLS)`)."""
    text = MAKEFILE.read_text(encoding="utf-8").replace("\\\n", " ")
    variables = dict(re.findall(r"^([A-Z_]+)\s*[:?]?=\s*(.*)$", text, re.MULTILINE))

    def expand(words: str) -> str:
        for _ in range(5):
            words = re.sub(r"\$\(([A-Z_]+)\)", lambda m: variables.get(m[1], m[0]), words)
        return words

    prerequisites: dict[str, list[str]] = {}
    recipes: dict[str, list[str]] = {}
    target = None
    for line in text.splitlines():
        rule = re.match(r"^([^\s:=#][^:=]*):(?!=)(.*)$", line)
        if rule and not line.startswith("\t"):
            target = expand(rule[1]).strip()
            prerequisites[target] = expand(rule[2]).split()
            recipes.setdefault(target, [])
        elif line.startswith("\t") and target is not None:
            recipes[target].append(expand(line.strip()))
    return prerequisites, recipes


def make_test_installs() -> str:
    """What `make test` installs on the way: the Python extras and the Debian packages of every
    rule it depends on."""
    prerequisites, recipes = _rules()
    seen: list[str] = []
    todo = ["test"]
    while todo:
        target = todo.pop(0)
        if target in seen:
            continue
        seen.append(target)
        todo += prerequisites.get(target, [])
    extras: list[str] = []
    debian: list[str] = []
    for target in seen:
        for line in recipes.get(target, []):
            extras += re.findall(r"pip install [^']*'\.\[([\w,]+)\]'", line)
            for found in re.findall(r"apt-get install -y -qq ([\w .-]+?)\s*(?:;|\}|$)", line):
                debian += found.split()
    python = _said_words([f"`.[{e}]`" for e in sorted(dict.fromkeys(extras), reverse=True)])
    apt = _said_words([f"`{d}`" for d in debian])
    return (
        f"evalpipe with {python} into `.venv`, and Debian's {apt} with apt where they are missing"
    )


NUMBERS = ("one", "two", "three", "four", "five", "six")


def make_test_workers() -> str:
    """How many workers `make test` runs the suite on, in words (the `-n` of XDIST)."""
    text = MAKEFILE.read_text(encoding="utf-8")
    found = re.search(r"^XDIST\s*:?=.*?-n (\d+)\b", text, re.MULTILINE)
    if found is None:
        raise LookupError("the Makefile's XDIST has no `-n N`")
    return NUMBERS[int(found[1]) - 1]


def _said_words(words: list[str]) -> str:
    return words[0] if len(words) == 1 else ", ".join(words[:-1]) + " and " + words[-1]


def make_targets() -> list[str]:
    """The Makefile's `.PHONY` targets: what a reader may type after `make`."""
    text = MAKEFILE.read_text(encoding="utf-8")
    return sorted({t for line in re.findall(r"^\.PHONY:(.*)$", text, re.MULTILINE)
                   for t in line.split()})  # fmt: skip


def shipped_configs() -> str:
    return _said_words([f"`{p.name}`" for p in sorted((ROOT / "configs").glob("*.yaml"))])


# --------------------------------------------------------------------------- the extras

# What each extra of pyproject.toml is for, in a reader's words; an extra added without a line
# here fails the build (and tests/test_docs_facts.py). The test, lint and docs groups are the
# checkout's tools, not the product's.
EXTRAS = {
    "duckdb": "the SQL functions on a DuckDB connection (`evalpipe.duckdb`)",
    "otel": "OpenTelemetry export of the run's metrics and traces (OTLP)",
    "airflow": "the Airflow 3 operator (`evalpipe.airflow`), with Airflow's OpenLineage provider",
    "dagster": "the Dagster asset factory (`evalpipe.dagster`)",
    "notebook": "JupyterLab, ipywidgets (`ep.score`'s progress as a widget) and DuckDB: notebooks/",
    "iceberg": "`output.format: iceberg`: pyiceberg, its SQL catalog on SQLite or PostgreSQL",
}
TOOLS = ("test", "lint", "docs")


def _pyproject() -> dict[str, Any]:
    import tomllib

    return tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]


def extras_table() -> str:
    """Each extra of pyproject.toml: what it installs and what for."""
    groups = _pyproject()["optional-dependencies"]
    product = [name for name in groups if name not in TOOLS]
    missing = sorted(set(product) - set(EXTRAS))
    if missing:
        raise LookupError(f"extras {missing} of pyproject.toml have no line in facts.EXTRAS")
    out = ["| extra | for | installs |", "|---|---|---|"]
    for name in product:
        installs = ", ".join(f"`{r}`" for r in groups[name])
        out.append(f"| `{name}` | {EXTRAS[name]} | {installs} |")
    return "\n".join(out)


def python_requires() -> str:
    """The oldest Python evalpipe runs on (pyproject's requires-python, `>=3.11`)."""
    found = re.fullmatch(r">=\s*(\d+\.\d+)", _pyproject()["requires-python"].strip())
    if found is None:
        raise LookupError("requires-python is not of the form >=X.Y")
    return f"{found[1]} or newer"


def version() -> str:
    return str(_pyproject()["version"])


FACTS: dict[str, Callable[[], str]] = {
    "extras-table": extras_table,
    "python-requires": python_requires,
    "version": version,
    "make-test-installs": make_test_installs,
    "make-test-workers": make_test_workers,
    "configs": shipped_configs,
    "no-retry-codes": no_retry_codes,
    "retried-codes": retried_codes,
    "lease-seconds": lease_seconds,
    "stale-seconds": stale_seconds,
    "claim-seconds": claim_seconds,
    "store-patience-seconds": store_patience_seconds,
    "store-attempts": store_attempts,
    "json-events": json_events,
    "exit-table": exit_table,
    "troubleshooting": troubleshooting,
}


def value(name: str) -> str:
    """The code's value of the fact `name` (LookupError for an unknown name)."""
    if name.startswith("exit-") and name[5:6].isupper():
        return exit_code(name[5:])
    if name not in FACTS:
        raise LookupError(f"no fact named {name!r} (docs/hooks/facts.py)")
    return FACTS[name]()


def found(text: str) -> list[tuple[str, str]]:
    """(name, the text between its markers) for every fact of a page."""
    return [(m[1], m[2]) for m in FACT.finditer(text)]


def _between(shown: str, made: str) -> str:
    """The code's value as it stands between the markers: on lines of its own for a block."""
    return f"\n{made}\n" if shown.startswith("\n") else made


def written(text: str) -> str:
    """The page with every fact's text the code's value."""
    return FACT.sub(lambda m: f"<!-- fact: {m[1]} -->{_between(m[2], value(m[1]))}<!-- /fact -->",
                    text)  # fmt: skip


def pages() -> list[Path]:
    return sorted([ROOT / "README.md", *(ROOT / "docs").rglob("*.md")])


# --------------------------------------------------------------------------- the hook


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    """Each fact's markers and text replaced with the code's value."""
    from mkdocs.exceptions import PluginError

    def made(m: re.Match[str]) -> str:
        try:
            return value(m[1])
        except LookupError as exc:
            raise PluginError(f"{page.file.src_uri}: {exc}") from None

    return FACT.sub(made, markdown)


if __name__ == "__main__":
    # Write the code's values into every page's facts (the check: tests/test_docs_facts.py).
    sys.path.insert(0, str(ROOT / "pipeline"))
    for path in pages():
        before = path.read_text(encoding="utf-8")
        after = written(before)
        if after != before:
            path.write_text(after, encoding="utf-8")
            print(f"wrote {path.relative_to(ROOT)}")
