"""Which rows of a corpus a job takes when not all: `--limit N`, `--sample N --seed S`, or the
positions `evalpipe estimate` drew (a stratified sample, drawn by `evalpipe.input.strata`).
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Selection:
    """`--limit N`: the first N rows; `--sample N --seed S`: N rows drawn at random, the same N
    for the same corpus and seed (in file order)."""

    count: int
    sample: bool = False
    seed: int = 0
    # exactly these positions (`evalpipe estimate`'s stratified sample, drawn elsewhere)
    rows: tuple[int, ...] | None = None

    @classmethod
    def of(cls, positions: Sequence[int], seed: int = 0) -> Selection:
        """The rows at `positions` (0-based, in file order), in file order."""
        return cls(len(positions), sample=True, seed=seed, rows=tuple(sorted(positions)))

    def positions(self, total: int) -> list[int] | None:
        """The rows kept, by position in the corpus (sorted); None for the first `count`."""
        if self.rows is not None:
            return [p for p in self.rows if p < total]
        if not self.sample or self.count >= total:
            return None
        return sorted(random.Random(self.seed).sample(range(total), self.count))

    def describe(self) -> str:
        if self.rows is not None:
            return f"a stratified sample of {self.count} rows (seed {self.seed})"
        if self.sample:
            return f"a sample of {self.count} rows (seed {self.seed})"
        return f"the first {self.count} rows"
