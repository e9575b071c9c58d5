"""evalpipe: score a Parquet corpus with an evaluation service, as fast as the account's limits
allow and never faster, one output row per input row, exactly once.

`import evalpipe as ep` gives the Python API (`ep.score`, `ep.plan`, `ep.read`, `ep.Job`,
`ep.estimate`, `ep.calibrate`, `ep.label_sample` and `ep.infer`, the
question types `ep.Noul`, `ep.Choice`, `ep.Score`, `ep.Service`, `ep.EvalpipeWarning`,
and `ep.ProgressSnapshot`, what a progress callback receives), imported on first use so that
`import evalpipe` and the CLI stay quick; `ep.errors` is the exception tree.
"""

from __future__ import annotations

import importlib
from typing import Any

_API = (
    "Choice",
    "EvalpipeWarning",
    "Job",
    "Noul",
    "ProgressSnapshot",
    "Score",
    "Service",
    "ascore",
    "calibrate",
    "infer",
    "label_sample",
    "plan",
    "estimate",
    "read",
    "score",
)
__all__ = [*_API, "errors"]


def __getattr__(name: str) -> Any:  # PEP 562: the API is imported when first used
    if name in _API:
        return getattr(importlib.import_module("evalpipe.api"), name)
    if name == "errors":
        return importlib.import_module("evalpipe.errors")
    raise AttributeError(f"module 'evalpipe' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(__all__)
