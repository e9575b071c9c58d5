"""The service's token count per token of ours, kept per service and model between runs.

evalpipe counts tokens with its own tokenizer; the service bills with one of its own. The
ratio of the two, once measured (by `plan --calibrate N`, or by a run from what it was billed),
is kept here so that the next `plan` and the next `run` both plan with it from their first row:
then the plan's requests are the run's, request for request, instead of a run learning by
refusal what the plan already knew. One small JSON file beside the answer cache:

    $XDG_CACHE_HOME/evalpipe/token_ratios.json   {"<service> <model>": {"ratio": ...}, ...}

It is advice, never a reason to fail: a file that cannot be read or written is no ratio.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from evalpipe.planning.kept import kept
from evalpipe.tier import TierAddress

FILE_NAME = "token_ratios.json"


@dataclass(frozen=True)
class KnownRatio:
    """A measured ratio and how it was measured ("plan --calibrate 20", "run <id>")."""

    ratio: float
    source: str
    measured_at: str

    def describe(self) -> str:
        return f"{self.ratio:.4f}, measured by {self.source} at {self.measured_at}"


def known_ratio(
    service: str, model: str, root: Path | None = None, tier: TierAddress | None = None
) -> KnownRatio | None:
    """The ratio kept for (service, model), if any (in the shared `tier` when there is one)."""
    entry = kept(FILE_NAME, root, tier).entry(service, model)
    if entry is None:
        return None
    ratio = entry.get("ratio")
    if not isinstance(ratio, int | float) or ratio <= 0:
        return None
    return KnownRatio(float(ratio), str(entry.get("source", "")), str(entry.get("at", "")))


def keep_ratio(
    service: str,
    model: str,
    ratio: float,
    source: str,
    root: Path | None = None,
    tier: TierAddress | None = None,
) -> None:
    """Keep `ratio` for (service, model), replacing the one before; written whole (a temporary
    file renamed), so a reader never sees half of it. Failing to write is silent."""
    entry = {"ratio": round(ratio, 6), "source": source}
    kept(FILE_NAME, root, tier).keep(service, model, entry)
