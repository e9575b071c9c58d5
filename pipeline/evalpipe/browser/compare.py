"""Two runs side by side (`--vs`): the rows whose answers changed, and per question the counts
`evalpipe diff` gives.

Both come from `evalpipe.analysis.compare`, the function `evalpipe diff` calls, so the page's
counts are diff's by construction: shared ids, ids on one side only, per question the rows both
answered, the flips and the changes in mean. The changed rows are diff's row-level table (its
`--out`), kept to the ids where some question flipped, paged as the table is. The comparison
reads both outputs whole (as `diff` does); it is made once, when first asked.
"""

from __future__ import annotations

import threading
from typing import Any

import polars as pl

from evalpipe.analysis import compare
from evalpipe.reading import Output


class Comparison:
    """Output `a` (this one, before) against `b` (`--vs`, after), computed when first asked."""

    def __init__(self, a: Output, b: Output) -> None:
        self.a, self.b = a, b
        self._lock = threading.Lock()
        self._made: tuple[dict[str, Any], pl.DataFrame] | None = None

    def _make(self) -> tuple[dict[str, Any], pl.DataFrame]:
        with self._lock:
            if self._made is None:
                diff, table = compare(self.a, self.b)
                flips = [c for c in table.columns if c.endswith("__flip")]
                changed = table.filter(pl.any_horizontal(pl.col(flips).fill_null(False)))
                self._made = diff.as_json(), changed.sort(diff.id_column)
            return self._made

    def counts(self) -> dict[str, Any]:
        """diff's figures (its JSON document), without the lists of ids and flipped rows."""
        document, changed = self._make()
        questions = [
            {**q, "flips": {k: v for k, v in q["flips"].items() if k != "rows"}}
            for q in document["questions"]
        ]
        return {
            "a": document["a"], "b": document["b"], "models_differ": document["models_differ"],
            "id_column": document["id_column"], "shared_ids": document["shared_ids"],
            "only_in_a": document["only_in_a"]["count"],
            "only_in_b": document["only_in_b"]["count"],
            "questions": questions, "notes": document["notes"], "changed_rows": changed.height,
        }  # fmt: skip

    def changed(self, offset: int, limit: int) -> dict[str, Any]:
        """Rows `offset`.. of those where some question's answer changed: per question A's
        answer, B's and whether it flipped."""
        _, changed = self._make()
        page = changed.slice(max(0, offset), limit)
        return {
            "count": changed.height,
            "offset": max(0, offset),
            "columns": page.columns,
            "rows": [list(r) for r in page.iter_rows()],
        }
