"""Run a command as in a fresh clone after `make docs`: only evalpipe and `.[docs]` importable.

`make docs` installs `.[docs]` into a new `.venv`: evalpipe's own dependencies and the docs
tools, not the test tools nor the extras (DuckDB, Airflow, Dagster, OpenTelemetry, Jupyter).
The suite's environment has them all, so a docs build that imports one of them would pass here
and fail on a fresh clone. Building the site in a fresh virtualenv takes minutes; this hides
instead every module of an installed distribution that `.[docs]` does not pull in (its
requirements read from the installed metadata, markers and extras evaluated), with a meta-path
finder that raises ModuleNotFoundError as a missing package does:

    python tests/docs_only.py -m mkdocs build --strict --site-dir /tmp/site
    python tests/docs_only.py -c "import duckdb"        # ModuleNotFoundError

tests/test_docs.py builds the site so, and checks that the hiding bites.
"""

from __future__ import annotations

import importlib.abc
import runpy
import sys
from importlib import metadata
from types import ModuleType

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

# What a fresh virtualenv has before anything is installed into it.
VENV = {"pip", "setuptools", "wheel"}


def needed(root: str = "evalpipe", extras: frozenset[str] = frozenset({"docs"})) -> set[str]:
    """The distributions `pip install ROOT[EXTRAS]` installs (names canonicalized)."""
    seen: set[tuple[str, frozenset[str]]] = set()
    todo = [(root, extras)]
    while todo:
        name, wanted = todo.pop()
        key = (canonicalize_name(name), wanted)
        if key in seen:
            continue
        seen.add(key)
        try:
            requires = metadata.requires(name) or []
        except metadata.PackageNotFoundError:
            continue
        for line in requires:
            req = Requirement(line)
            if req.marker is None or any(req.marker.evaluate({"extra": e}) for e in {"", *wanted}):
                todo.append((req.name, frozenset(req.extras)))
    return {name for name, _ in seen} | VENV


def hidden() -> set[str]:
    """The top-level modules of every installed distribution that `.[docs]` does not need."""
    keep = needed()
    return {
        module
        for module, dists in metadata.packages_distributions().items()
        if not any(canonicalize_name(d) in keep for d in dists)
    }


class Hide(importlib.abc.MetaPathFinder):
    """Make the modules named absent, as in a virtualenv without them."""

    def __init__(self, modules: set[str]) -> None:
        self.modules = modules

    def find_spec(self, name: str, path: object, target: ModuleType | None = None) -> None:
        if name.partition(".")[0] in self.modules:
            raise ModuleNotFoundError(f"No module named {name!r} (not in `.[docs]`)", name=name)
        return None


def main(argv: list[str]) -> None:
    modules = hidden()
    for name in list(sys.modules):
        if name.partition(".")[0] in modules:
            del sys.modules[name]
    sys.meta_path.insert(0, Hide(modules))
    if argv[:1] == ["-c"]:
        sys.argv = ["-c", *argv[2:]]
        exec(compile(argv[1], "<docs_only -c>", "exec"), {"__name__": "__main__"})
    elif argv[:1] == ["-m"]:
        sys.argv = [argv[1], *argv[2:]]
        runpy.run_module(argv[1], run_name="__main__", alter_sys=True)
    else:
        raise SystemExit("usage: docs_only.py -m MODULE ARGS... | -c CODE")


if __name__ == "__main__":
    main(sys.argv[1:])
