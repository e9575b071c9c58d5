"""`evalpipe diff A B`: what changed between two runs, and whether it is more than noise.

Two outputs are joined on their id column. For each question both answer, over the rows both
answered: the change in mean (p(yes), the expected level, the share of each option) with a 95%
paired bootstrap interval (`intervals`), and the flips, rows whose answer changed: a choice
changed, p(yes) crossed 0.5 (yes is p > 0.5), or the most probable level changed. Ids on one
side only are counted and listed; the versioned models of each side are named and flagged when
they differ. Outputs that share nothing are refused; questions or ids that differ are left out,
and the result says so (`notes`).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import polars as pl

from evalpipe.analysis.intervals import mean_change
from evalpipe.analysis.sampling import sampled_changes
from evalpipe.errors import InputError
from evalpipe.reading import Output, Question

SHOWN_IDS = 10  # ids listed in the text view (JSON and --out list all)


@dataclass
class Diff:
    """The comparison of output `a` (before) with `b` (after)."""

    a: dict[str, Any]
    b: dict[str, Any]
    id_column: str
    shared: int
    only_in_a: list[Any]
    only_in_b: list[Any]
    questions: list[dict[str, Any]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    estimates: list[dict[str, Any]] | None = None  # both sides sampled: `sampled_changes`

    @property
    def models_differ(self) -> bool:
        return set(self.a["models"]) != set(self.b["models"])

    def as_json(self) -> dict[str, Any]:
        return {
            "a": self.a,
            "b": self.b,
            "models_differ": self.models_differ,
            "id_column": self.id_column,
            "shared_ids": self.shared,
            "only_in_a": {"count": len(self.only_in_a), "ids": self.only_in_a},
            "only_in_b": {"count": len(self.only_in_b), "ids": self.only_in_b},
            "questions": self.questions,
            "notes": self.notes,
            **({"estimates": self.estimates} if self.estimates is not None else {}),
        }


def _side(table: Output) -> dict[str, Any]:
    models = table.rows.filter(pl.col("_model").is_not_null())["_model"].value_counts(sort=True)
    return {
        "output": table.shown,
        "rows": table.rows.height,
        "schema_version": table.version,
        "models": dict(zip(models["_model"].to_list(), models["count"].to_list(), strict=True)),
    }


def _check_ids(a: Output, b: Output) -> None:
    if a.id_column != b.id_column:
        raise InputError(
            f"id columns differ: '{a.id_column}' in {a.shown}, '{b.id_column}' in {b.shown}; "
            "diff compares outputs of one corpus"
        )
    ta, tb = a.rows.schema[a.id_column], b.rows.schema[b.id_column]
    if ta != tb and not (ta.is_numeric() and tb.is_numeric()):
        raise InputError(f"id column '{a.id_column}' is {ta} in {a.shown} but {tb} in {b.shown}")


def _same(qa: Question, qb: Question) -> bool:
    """Asked alike: same type and options; a score's levels may be known by index only on a
    side written with schema version 1 (`K__p__0`), then the number of levels must agree."""
    if qa.kind != qb.kind:
        return False
    if qa.kind == "score" and len(qa.labels) == len(qb.labels):
        indices = tuple(map(str, range(len(qa.labels))))
        return qa.labels == qb.labels or indices in (qa.labels, qb.labels)
    return qa.kind == "noul" or qa.labels == qb.labels


def shared_questions(a: Output, b: Output, notes: list[str]) -> list[tuple[Question, Question]]:
    """The questions both outputs ask alike (same key, type, options or levels); the others
    are named in `notes`. InputError when none is shared."""
    pairs = []
    for qa in a.questions:
        qb = b.question(qa.key)
        if qb is None:
            notes.append(f"question '{qa.key}' is only in A: left out")
        elif not _same(qa, qb):
            notes.append(f"question '{qa.key}' differs (type, options or levels): left out")
        else:
            pairs.append((qa, qb))
    notes.extend(
        f"question '{qb.key}' is only in B: left out"
        for qb in b.questions
        if a.question(qb.key) is None
    )
    if not pairs:
        raise InputError(f"outputs {a.shown} and {b.shown} share no question; nothing to compare")
    return pairs


def _columns(q: Question, side: str) -> dict[str, pl.Expr]:
    """One side's answer to `q` (and for a score, the most probable level's index)."""
    exprs = {f"{q.key}\x00{side}": pl.col(q.head)}
    if q.kind == "score":
        probs = pl.concat_list([pl.col(c) for c in q.prob_columns])
        exprs[f"{q.key}\x00{side}\x00level"] = probs.list.arg_max()
    return exprs


def _side_rows(t: Output, side: str, questions: list[Question]) -> pl.DataFrame:
    """A side's answers, null where that side's row ended in error."""
    answered = pl.col("_error_type").is_null()
    exprs = {name: e for q in questions for name, e in _columns(q, side).items()}
    kept = [pl.when(answered).then(e).otherwise(None).alias(n) for n, e in exprs.items()]
    return t.rows.select(pl.col(t.id_column), *kept)


def _joined(a: Output, b: Output, pairs: list[tuple[Question, Question]]) -> pl.DataFrame:
    """One row per shared id, with both sides' answers."""
    left = _side_rows(a, "a", [qa for qa, _ in pairs])
    right = _side_rows(b, "b", [qb for _, qb in pairs])
    idc = a.id_column
    if left.schema[idc] != right.schema[idc]:
        right = right.with_columns(pl.col(idc).cast(left.schema[idc]))
    return left.join(right, on=idc, how="inner", maintain_order="left")


def _flips(
    ids: pl.Series, before: pl.Series, after: pl.Series, changed: pl.Series
) -> dict[str, Any]:
    rows = pl.DataFrame({"id": ids, "a": before, "b": after}).filter(changed).sort("id")
    return {
        "count": rows.height,
        "share": rows.height / len(ids) if len(ids) else None,
        "rows": rows.to_dicts(),
    }


def _change(what: str, a: np.ndarray, b: np.ndarray) -> dict[str, Any]:
    change, ci = mean_change(a, b)
    return {
        "what": what,
        "a": float(a.mean()),
        "b": float(b.mean()),
        "change": change,
        "low": None if ci is None else ci[0],
        "high": None if ci is None else ci[1],
    }


def _labelled(qa: Question, qb: Question) -> Question:
    """`qa`, with `qb`'s level labels when `qa` knows its levels by index only (version 1)."""
    indices = tuple(map(str, range(len(qa.labels))))
    if qa.kind == "score" and qa.labels == indices:
        return replace(qa, labels=qb.labels)
    return qa


def _question(q: Question, rows: pl.DataFrame, idc: str) -> dict[str, Any]:
    a, b = f"{q.key}\x00a", f"{q.key}\x00b"
    both = rows.filter(pl.col(a).is_not_null() & pl.col(b).is_not_null())
    out: dict[str, Any] = {"key": q.key, "kind": q.kind, "n": both.height, "changes": []}
    if both.height == 0:
        out["flips"] = {"count": 0, "share": None, "rows": []}
        return out
    ids, va, vb = both[idc], both[a], both[b]
    if q.kind == "noul":
        out["changes"].append(_change("mean p(yes)", va.to_numpy(), vb.to_numpy()))
        out["flips"] = _flips(ids, va, vb, (va > 0.5) != (vb > 0.5))
    elif q.kind == "score":
        out["changes"].append(_change("mean expected level", va.to_numpy(), vb.to_numpy()))
        la, lb = both[f"{a}\x00level"], both[f"{b}\x00level"]
        labels = pl.Series(list(q.labels))
        out["flips"] = _flips(ids, labels.gather(la), labels.gather(lb), la != lb)
    else:
        for label in q.labels:
            ia = (va == label).cast(pl.Float64).to_numpy()
            ib = (vb == label).cast(pl.Float64).to_numpy()
            out["changes"].append(_change(f"share '{label}'", ia, ib))
        out["flips"] = _flips(ids, va, vb, va != vb)
    return out


def _differences(q: Question, rows: pl.DataFrame) -> list[pl.Expr]:
    """The row-level columns of `--out` for one question."""
    a, b, k = pl.col(f"{q.key}\x00a"), pl.col(f"{q.key}\x00b"), q.key
    if q.kind == "noul":
        flip = (a > 0.5) != (b > 0.5)
    elif q.kind == "score":
        flip = pl.col(f"{k}\x00a\x00level") != pl.col(f"{k}\x00b\x00level")
    else:
        flip = a != b
    exprs = [a.alias(f"{k}__a"), b.alias(f"{k}__b")]
    if q.kind != "choice":
        exprs.append((b - a).alias(f"{k}__change"))
    return [*exprs, flip.alias(f"{k}__flip")]


def compare(a: Output, b: Output) -> tuple[Diff, pl.DataFrame]:
    """The comparison of `a` with `b`, and its row-level differences (one row per id)."""
    _check_ids(a, b)
    notes: list[str] = []
    pairs = shared_questions(a, b, notes)
    idc = a.id_column
    rows = _joined(a, b, pairs)
    ids_a, ids_b = a.rows[idc], b.rows[idc].cast(a.rows.schema[idc], strict=False)
    only_a = ids_a.filter(~ids_a.is_in(ids_b.implode())).sort().to_list()
    only_b = ids_b.filter(~ids_b.is_in(ids_a.implode())).sort().to_list()
    if rows.height == 0:
        raise InputError(f"outputs {a.shown} and {b.shown} share no id; nothing to compare")
    if only_a or only_b:
        notes.append(
            f"{len(only_a)} ids only in A and {len(only_b)} only in B: compared on the "
            f"{rows.height} shared ids"
        )
    diff = Diff(_side(a), _side(b), idc, rows.height, only_a, only_b, notes=notes)
    diff.questions = [_question(_labelled(qa, qb), rows, idc) for qa, qb in pairs]
    if a.sample and b.sample and "estimates" in a.sample and "estimates" in b.sample:
        diff.estimates = sampled_changes(a.sample, b.sample)
        notes.append(
            "both outputs hold a sample (evalpipe estimate): 'estimates' compares their "
            "estimates, the interval of a change from both standard errors as independent "
            "samples (wider than need be when the samples share rows)"
        )
    if diff.models_differ:
        notes.insert(
            0, f"models differ: A {sorted(diff.a['models'])}, B {sorted(diff.b['models'])}"
        )
    table = rows.select(pl.col(idc), *[e for qa, _ in pairs for e in _differences(qa, rows)])
    return diff, table


def side_only(diff: Diff) -> pl.DataFrame:
    """The ids on one side only, as rows of `--out` (`_only_in` says which)."""
    return pl.DataFrame(
        {
            diff.id_column: diff.only_in_a + diff.only_in_b,
            "_only_in": ["a"] * len(diff.only_in_a) + ["b"] * len(diff.only_in_b),
        }
    )
