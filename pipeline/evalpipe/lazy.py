"""Subpackage surfaces whose heavy modules load on first use (PEP 562), for Ray's workers.

A Ray worker process imports the module of the one actor class it runs, and with it every
subpackage `__init__` on the way. An `__init__` that imported all of its modules would make each
worker pay, in CPU seconds at its start, for what it never touches: the config's pydantic model
and YAML loader, pyarrow under the planner's and the stores' Parquet code. So a subpackage
imports its light names as usual, names the rest under `if TYPE_CHECKING:` (what mypy and readers
see), and lets this module make its surface from those imports, each name written once:

    from typing import TYPE_CHECKING
    from evalpipe.lazy import lazy_exports
    from evalpipe.config.retry import RetryPolicy as RetryPolicy     # light: imported now
    if TYPE_CHECKING:
        from evalpipe.config.model import JobConfig as JobConfig     # heavy: on first use
    __all__, __getattr__ = lazy_exports(__name__)

`__all__` is every name the `__init__` imports in the `X as X` form (PEP 484's re-export, which
mypy reads too); `from evalpipe.config import JobConfig` imports `evalpipe.config.model` when it
runs, once.
"""

from __future__ import annotations

import ast
import importlib
import sys
from collections.abc import Callable
from typing import Any


def lazy_exports(package: str) -> tuple[list[str], Callable[[str], Any]]:
    """`__all__` and a module `__getattr__` for `package`, read from its own `__init__`: each
    name imported under `if TYPE_CHECKING:` is taken from its module on the first look-up and
    kept in the package (later look-ups skip this)."""
    eager, home = _imports(package)

    def __getattr__(name: str) -> Any:
        module = home.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        setattr(sys.modules[package], name, value)
        return value

    return sorted([*eager, *home]), __getattr__


def _imports(package: str) -> tuple[list[str], dict[str, str]]:
    """The names `package`'s `__init__` re-exports (`X as X`): those imported at once, and
    those under `if TYPE_CHECKING:` with the module each lives in."""
    source = sys.modules[package].__spec__.loader.get_source(package)  # type: ignore[union-attr]
    if source is None:
        raise ImportError(f"{package}: its __init__'s source is needed for its surface")
    eager: list[str] = []
    home: dict[str, str] = {}
    for node in ast.parse(source).body:
        if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING":
            for inner in node.body:
                for module, name in _reexported(inner):
                    home[name] = module
        eager += [name for _, name in _reexported(node)]
    return eager, home


def _reexported(node: ast.stmt) -> list[tuple[str, str]]:
    """(module, name) of each name `node` imports as itself (`from m import X as X`)."""
    if not isinstance(node, ast.ImportFrom):
        return []
    return [(str(node.module), a.name) for a in node.names if a.asname == a.name]
