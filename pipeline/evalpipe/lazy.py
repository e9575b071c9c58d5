"""Subpackage surfaces whose heavy modules load on first use (PEP 562), for Ray's workers.

A Ray worker process imports the module of the one actor class it runs, and with it every
subpackage `__init__` on the way. An `__init__` that imported all of its modules would make each
worker pay, in CPU seconds at its start, for what it never touches: the config's pydantic model
and YAML loader, pyarrow under the planner's and the stores' Parquet code. So a subpackage
imports its light names as usual and names the rest here with the module each lives in:

    from evalpipe.lazy import lazy_exports
    if TYPE_CHECKING:                       # what mypy and readers see
        from evalpipe.config.model import JobConfig
    __getattr__ = lazy_exports(__name__, {"evalpipe.config.model": ("JobConfig",)})

`from evalpipe.config import JobConfig` then imports `evalpipe.config.model` when it runs, once.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Iterable, Mapping
from typing import Any


def lazy_exports(package: str, where: Mapping[str, Iterable[str]]) -> Callable[[str], Any]:
    """A module `__getattr__` for `package`: each name in `where` is taken from its module,
    imported on the first look-up, and kept in the package (later look-ups skip this)."""
    home = {name: module for module, names in where.items() for name in names}

    def __getattr__(name: str) -> Any:
        module = home.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        setattr(sys.modules[package], name, value)
        return value

    return __getattr__
