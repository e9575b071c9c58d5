"""The models the embedded reference service knows: the aliases it lists and the versions it takes.

The real service's model list holds aliases only; versioned IDs are accepted whether listed or
not, and a response always names the versioned ID that answered. Every description says plainly
that this is the reference evaluator for offline runs, so nobody mistakes its answers for the
real model's.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

CURRENT_VERSION = "model-1.13.0"
# A newer version, taken when asked for by name: it answers like the current one except for a
# known share of states (`REVISED`), whose every answer it turns around (evaluator.revised), so
# comparing two runs (`evalpipe diff`) has a known truth to find.
NEXT_VERSION = "model-1.14.0"
VERSIONS: tuple[str, ...] = (CURRENT_VERSION, NEXT_VERSION)
REVISED: dict[str, float] = {NEXT_VERSION: 0.25}  # version -> share of states it answers anew
ALIASES: dict[str, str] = {"model-latest": CURRENT_VERSION, "model-preview": CURRENT_VERSION}
KNOWN: tuple[str, ...] = (*ALIASES, *VERSIONS)

_REFERENCE = (
    "Reference evaluator for offline runs (evalpipe's embedded service), "
    "not the production model: deterministic word-overlap answers for testing pipelines."
)


@dataclass(frozen=True)
class ListedModel:
    """One entry of `GET /v1/models` (name, release date, description)."""

    name: str
    description: str
    release_date: str  # YYYY-MM-DD


LISTED: tuple[ListedModel, ...] = (
    ListedModel(
        "model-latest",
        f"{_REFERENCE} Alias of the most recent stable release, now {CURRENT_VERSION}.",
        "2025-06-02",
    ),
    ListedModel(
        "model-preview",
        f"{_REFERENCE} Alias of the most recent release, official or not, now {CURRENT_VERSION}.",
        "2025-06-02",
    ),
)


def resolve(name: str) -> str | None:
    """The versioned ID behind a model name, or None when the name is unknown."""
    if name in ALIASES:
        return ALIASES[name]
    return name if name in VERSIONS else None


def model_list() -> dict[str, Any]:
    """The body of `GET /v1/models`."""
    return {"models": [asdict(entry) for entry in LISTED]}
