"""The report's "Trust" section: the calibrated columns a calibration added, the rows each
question kept for its promised agreement, and the canary of each run.

What the table says of itself: its calibrated columns are found by their field metadata
(`evalpipe.role`: `calibrated` or `abstain`, `evalpipe.question`), so the section reads the same
in a Parquet output and a Delta table; the promise behind `K__abstain` and the canary's
comparisons come from the runs' summaries in the manifest (`calibration`, `rows_kept`,
`canary`). An output with neither has no such section.
"""

from __future__ import annotations

from typing import Any

import polars as pl

from evalpipe.output import describe
from evalpipe.reading import Output
from evalpipe.report.data import collect
from evalpipe.report.page import Section, Table


def _num(value: Any, digits: int = 3) -> str:
    return "\u2013" if value is None else f"{value:,.{digits}f}"


def _roles(out: Output) -> dict[str, dict[str, list[str]]]:
    """Per question, its columns by role: `calibrated` and `abstain`."""
    found: dict[str, dict[str, list[str]]] = {}
    for entry in describe(out.schema):
        if entry["role"] in ("calibrated", "abstain") and entry["question"]:
            found.setdefault(entry["question"], {}).setdefault(entry["role"], []).append(
                entry["column"]
            )
    return found


def _columns(names: list[str]) -> str:
    """A question's calibrated columns, the probability columns as their pattern."""
    probs = [n for n in names if "__p_calibrated__" in n]
    shown = [n for n in names if n not in probs]
    if probs:
        pattern = probs[0].split("__p_calibrated__")[0] + "__p_calibrated__*"
        shown.append(f"{pattern} ({len(probs)})")
    return ", ".join(shown)


def _calibrated_rows(out: Output, roles: dict[str, dict[str, list[str]]]) -> list[list[str]]:
    """Per calibrated question: its mean answer before and after, and the rows it kept."""
    exprs = []
    for key, found in roles.items():
        q = out.question(key)
        own = q.head if q is not None and q.kind != "choice" else None
        calibrated = found.get("calibrated", [None])[0]
        if own is not None and calibrated is not None:
            exprs += [pl.col(own).mean().alias(f"{key}\x00own"),
                      pl.col(calibrated).mean().alias(f"{key}\x00cal")]  # fmt: skip
        for column in found.get("abstain", []):
            exprs += [(~pl.col(column)).sum().alias(f"{key}\x00kept"),
                      pl.col(column).count().alias(f"{key}\x00answered")]  # fmt: skip
    figures = collect(out.scan().select(exprs)).row(0, named=True) if exprs else {}
    rows = []
    for key, found in roles.items():
        kept, answered = figures.get(f"{key}\x00kept"), figures.get(f"{key}\x00answered")
        share = f"{kept / answered:.1%}" if answered else "\u2013"
        rows.append([
            key, _columns(found.get("calibrated", [])), _num(figures.get(f"{key}\x00own")),
            _num(figures.get(f"{key}\x00cal")),
            f"{kept:,} of {answered:,} ({share})" if answered is not None else "no abstention",
        ])  # fmt: skip
    return rows


def _promises(summary: dict[str, Any]) -> list[list[str]]:
    rows = []
    for key, q in ((summary.get("calibration") or {}).get("questions") or {}).items():
        a = q.get("abstain")
        if not a:
            continue
        ece = (q.get("held_out") or {}).get("ece") or {}
        threshold = "none can promise it" if a["threshold"] is None else _num(a["threshold"], 4)
        promise = f"{a['target_agreement']:.1%} at {a['confidence']:.0%}"
        moved = f"{_num(ece.get('before'))} -> {_num(ece.get('after'))}"
        rows.append([key, promise, threshold, _num(a["bound"]), moved])
    return rows


def _canaries(out: Output) -> list[list[str]]:
    """Each run's canary (from the manifest's runs), oldest first."""
    rows = []
    for run in (out.manifest or {}).get("runs") or []:
        canary = ((run or {}).get("summary") or {}).get("canary") if isinstance(run, dict) else None
        if not isinstance(canary, dict):
            continue
        tests = canary.get("tests") or []
        worst = min((t["share"] if t["against"] == "labels" else 1 - t["share"]
                     for t in tests if t.get("share") is not None), default=None)  # fmt: skip
        rows.append([str(run.get("run_id")), "passed" if canary.get("passed") else "FAILED",
                     f"{canary.get('answered', 0):,} of {canary.get('rows', 0):,}",
                     str(canary.get("compared_with")), _num(worst)])  # fmt: skip
    return rows


def trust_section(out: Output) -> Section | None:
    """The section (module docstring), or None when the output has nothing of it."""
    roles = _roles(out)
    summary = (out.manifest or {}).get("summary") or {}
    canaries = _canaries(out)
    if not roles and not canaries:
        return None
    section = Section(
        "trust", "Trust",
        "Calibrated columns (evalpipe calibrate) beside the judge's own, the rows each question "
        "kept for its promised agreement with people, and the canary asked before each run.",
    )  # fmt: skip
    if roles:
        headers = ["question", "calibrated columns", "mean (judge)", "mean (calibrated)", "kept"]
        section.tables.append(Table(headers, _calibrated_rows(out, roles), wide=frozenset(
            {"calibrated columns"})))  # fmt: skip
    promises = _promises(summary if isinstance(summary, dict) else {})
    if promises:
        headers = ["question", "promise", "threshold", "bound", "held-out ECE"]
        section.tables.append(Table(headers, promises, caption="the last run's promise"))
    if canaries:
        headers = ["run", "canary", "answered", "compared with", "lowest agreement"]
        section.tables.append(Table(headers, canaries, frozenset({"lowest agreement"})))
    return section
