"""What is learned of one service and model, kept between runs: one door for all of it.

A run and `plan --calibrate N` learn three things of a service that the next `plan` and `run`
should start from: its token count per token of ours (`evalpipe.planning.ratios`), the most
questions it accepts in one request, and the last packing measurement
(`evalpipe.planning.packing`); and a run with a canary keeps the canary's answers
(`evalpipe.preflight.canary`), which the next night's are compared with. Each is kept per
service and model beside the answer cache; `Learned` is the one place they are read and kept,
so that where they are kept is one decision: with a shared tier (`shared.url`), in the tier, so
a fresh pod's `plan`, `run` and canary start where the last host's ended
(`evalpipe.planning.kept.TierKept`); without one, in the cache folder.

    learned = Learned.of(prepared)      # its service, model and tier (`PreparedJob.tier`)
    learned.ratio()                     # a KnownRatio, or None
    learned.keep_ratio(1.27, "run x", samples=40)
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from evalpipe.planning.kept import kept
from evalpipe.planning.packing import KnownPacking, keep_packing, known_packing
from evalpipe.planning.ratios import KnownRatio, keep_ratio, known_ratio
from evalpipe.tier import TierAddress

if TYPE_CHECKING:
    from evalpipe.planning.prepared import PreparedJob

MIN_REQUESTS = 10  # a run keeps the ratio it measured from at least this many answers
CANARY_FILE = "canary.json"
MAX_CANARY_SETS = 20  # canary sets kept per service and model (the oldest dropped)


class Learned:
    """What is kept for (`service`, `model`); `root` is the folder (default: the cache home),
    `tier` the shared tier that keeps it instead."""

    def __init__(
        self, service: str, model: str, root: Path | None = None, tier: TierAddress | None = None
    ) -> None:
        self.service, self.model, self.root, self.tier = service, model, root, tier

    @classmethod
    def of(cls, prepared: PreparedJob) -> Learned:
        """What is kept for a prepared job's service and model, in its tier if it has one."""
        config = prepared.config
        return cls(config.service.identity, config.model, tier=prepared.tier)

    def ratio(self) -> KnownRatio | None:
        """The service's token count per token of ours, if measured."""
        return known_ratio(self.service, self.model, self.root, self.tier)

    def keep_ratio(self, ratio: float, source: str, samples: int | None = None) -> None:
        """Keep a measured ratio; a run's (`samples` answers) only from enough answers."""
        if samples is None or samples >= MIN_REQUESTS:
            keep_ratio(self.service, self.model, ratio, source, self.root, self.tier)

    def packing(self) -> KnownPacking | None:
        """The questions cap and the last packing measurement, if any."""
        return known_packing(self.service, self.model, self.root, self.tier)

    def cap(self) -> int | None:
        """The most questions per request the service accepts, once learned."""
        known = self.packing()
        return known.max_questions if known is not None else None

    def keep_cap(self, learned: int | None, source: str) -> None:
        """Keep the questions cap a run or a measurement learned, when it changed."""
        if learned is not None and learned != self.cap():
            keep_packing(self.service, self.model, source, max_questions=learned,
                         root=self.root, tier=self.tier)  # fmt: skip

    def keep_measurement(self, measurement: dict[str, Any], source: str) -> None:
        keep_packing(self.service, self.model, source, measurement=measurement,
                     root=self.root, tier=self.tier)  # fmt: skip

    def canary(self, digest: str) -> dict[str, Any] | None:
        """The last passing canary's answers of the canary set `digest` (its rows and
        questions), if any."""
        entry = kept(CANARY_FILE, self.root, self.tier).entry(self.service, self.model) or {}
        found = (entry.get("sets") or {}).get(digest)
        return found if isinstance(found, dict) else None

    def keep_canary(self, digest: str, answers: dict[str, Any]) -> None:
        """Keep a canary's answers as the ones the next run on this model is compared with."""
        where = kept(CANARY_FILE, self.root, self.tier)
        sets = dict((where.entry(self.service, self.model) or {}).get("sets") or {})
        sets.pop(digest, None)
        sets[digest] = answers
        while len(sets) > MAX_CANARY_SETS:
            sets.pop(next(iter(sets)))
        where.keep(self.service, self.model, {"sets": sets})
