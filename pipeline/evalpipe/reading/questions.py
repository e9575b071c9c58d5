"""An output's questions and their columns, for any schema version: resolved here once, so that
no reader (the statistics, the report, a sampled estimate) builds a column name itself.

Version 2 tables name their questions in the schema metadata (`evalpipe.layout`: key, type,
probability keys, the columns' name parts) and their labels in the field metadata
(`evalpipe.label`); version 1 tables wrote a layout without name parts, or none, and named a
yes/no question's column `K__noul` (`K__p_true` since). A layout that is absent or does not match
the columns gives way to the column names (`K__noul`, `K__p_true`, `K__choice`, `K__score`, and
their `K__p__*` columns in table order), with a note saying so.
"""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa

from evalpipe.output import describe, schema_layout, schema_version

KINDS = ("noul", "choice", "score")
NO_LAYOUT = (
    "The parts carry no usable question layout (schema metadata 'evalpipe.layout'); "
    "the questions were found by their column names."
)


@dataclass(frozen=True, slots=True)
class Question:
    """One question of an output and its columns. `head`: the answer column (p(yes), the
    chosen option or the expected level); `probs`: the probability keys in criteria order
    (options, or level indices); `names`: their columns' name parts (empty: the keys
    themselves); `labels`: how the table names each (an option, a level's label)."""

    key: str
    kind: str
    head: str
    probs: tuple[str, ...] = ()
    names: tuple[str, ...] = ()
    labels: tuple[str, ...] = ()

    def label(self, prob: str) -> str:
        """How the table names probability key `prob`: its label, else the key itself."""
        if len(self.labels) == len(self.probs) and prob in self.probs:
            return self.labels[self.probs.index(prob)] or prob
        return prob

    @property
    def confidence(self) -> str:
        """The confidence column (choice and score questions only)."""
        return f"{self.key}__confidence"

    def prob(self, name: str) -> str:
        """The column of probability key `name` (an option, or a level index)."""
        if self.names:
            name = self.names[self.probs.index(name)]
        return f"{self.key}__p__{name}"

    @property
    def prob_columns(self) -> tuple[str, ...]:
        """The probability columns, in criteria order."""
        return tuple(self.prob(p) for p in self.probs)

    @property
    def columns(self) -> list[str]:
        """Every column of the question, in table order."""
        head = [self.head] if self.kind == "noul" else [self.head, self.confidence]
        return head + list(self.prob_columns)


def head_column(key: str, kind: str, version: int = 2) -> str:
    """The answer column of question `key`: p(yes), the chosen option or the expected level
    (schema version 1 named a yes/no question's `K__noul`)."""
    if kind == "noul" and version >= 2:
        return f"{key}__p_true"
    return f"{key}__{kind}"


def questions_of(schema: pa.Schema) -> tuple[Question, ...]:
    """The questions of a table, from its layout or its column names (module docstring)."""
    return read_questions(schema)[0]


def read_questions(schema: pa.Schema) -> tuple[tuple[Question, ...], tuple[str, ...]]:
    """The questions of a table, and a note when its layout gave way to the column names."""
    stored = _from_layout(schema)
    if stored is not None:
        return stored, ()
    return _from_names(schema.names), (NO_LAYOUT,)


def _from_layout(schema: pa.Schema) -> tuple[Question, ...] | None:
    """The layout the writer stored; None when it is absent or does not match the columns."""
    try:
        layout = schema_layout(schema)
        version = schema_version(schema)
        found = [
            (str(key), str(kind), tuple(map(str, probs)), tuple(map(str, names)))
            for key, kind, probs, names in layout
        ]
    except (TypeError, ValueError, IndexError):
        return None
    labels = {c["column"]: c["label"] or "" for c in describe(schema)}
    names = set(schema.names)
    out = []
    for key, kind, probs, parts in found:
        q = Question(key, kind, head_column(key, kind, version), probs, parts)
        if kind not in KINDS or not names.issuperset(q.columns):
            return None
        shown = tuple(labels[c] or p for c, p in zip(q.prob_columns, probs, strict=True))
        out.append(Question(key, kind, q.head, probs, parts, shown))
    return tuple(out)


def _from_names(names: list[str]) -> tuple[Question, ...]:
    """Older outputs: `K__noul`, `K__p_true`, `K__choice` or `K__score` name a question; its
    probabilities are the `K__p__*` columns, in table order."""
    questions = []
    for name in names:
        if name.endswith("__p_true") and len(name) > 8:
            questions.append(Question(name[:-8], "noul", name))
        for kind in KINDS:
            if name.endswith(f"__{kind}") and len(name) > len(kind) + 2:
                key = name[: -len(kind) - 2]
                prefix = f"{key}__p__"
                probs = tuple(n[len(prefix) :] for n in names if n.startswith(prefix))
                probs = probs if kind != "noul" else ()
                questions.append(Question(key, kind, name, probs, (), probs))
    return tuple(questions)
