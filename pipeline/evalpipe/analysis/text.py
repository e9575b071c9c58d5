"""`diff` and `agree` as text for a terminal: aligned tables, intervals in brackets.

The JSON documents are the results; this module only lays them out, so what a person reads
and what a program reads never disagree.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

SHOWN = 10  # flips or ids listed per question; --json and --out have them all


def _num(value: Any, signed: bool = False) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:+.3f}" if signed else f"{value:.3f}"
    return str(value)


def _ci(low: Any, high: Any) -> str:
    return "-" if low is None else f"[{low:+.3f}, {high:+.3f}]"


def table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    widths = [max(len(str(c)) for c in col) for col in zip(header, *rows, strict=True)]
    lines = ["  ".join(str(c).ljust(w) for c, w in zip(header, widths, strict=True))]
    lines.append("  ".join("-" * w for w in widths))
    lines += ["  ".join(str(c).ljust(w) for c, w in zip(r, widths, strict=True)) for r in rows]
    return ["  " + line.rstrip() for line in lines]


def _listed(ids: list[Any]) -> str:
    shown = ", ".join(map(str, ids[:SHOWN]))
    return shown + (f", ... ({len(ids) - SHOWN} more)" if len(ids) > SHOWN else "")


def render_diff(doc: dict[str, Any]) -> str:
    """The diff's JSON document as text."""
    a, b = doc["a"], doc["b"]
    lines = [
        f"A: {a['output']}  ({a['rows']:,} rows; models {', '.join(a['models']) or '-'})",
        f"B: {b['output']}  ({b['rows']:,} rows; models {', '.join(b['models']) or '-'})",
    ]
    if doc["models_differ"]:
        lines.append("MODELS DIFFER between A and B")
    lines.append(f"joined on '{doc['id_column']}': {doc['shared_ids']:,} shared ids")
    for side in ("a", "b"):
        only = doc[f"only_in_{side}"]
        if only["count"]:
            lines.append(f"only in {side.upper()}: {only['count']} ids: {_listed(only['ids'])}")
    lines += [f"note: {note}" for note in doc["notes"]]
    for q in doc["questions"]:
        lines += ["", f"{q['key']} ({q['kind']}), {q['n']:,} rows answered on both sides"]
        rows = [
            [
                c["what"],
                _num(c["a"]),
                _num(c["b"]),
                _num(c["change"], signed=True),
                _ci(c["low"], c["high"]),
            ]
            for c in q["changes"]
        ]
        lines += table(["", "A", "B", "change", "95% interval"], rows)
        flips = q["flips"]
        share = "" if flips["share"] is None else f" ({flips['share']:.1%})"
        lines.append(f"  flips: {flips['count']}{share}")
        lines += [f"    {r['id']}: {_num(r['a'])} -> {_num(r['b'])}" for r in flips["rows"][:SHOWN]]
        if flips["count"] > SHOWN:
            lines.append(f"    ... {flips['count'] - SHOWN} more (--json or --out for all)")
    return "\n".join(lines)


def _interval(m: dict[str, Any]) -> str:
    return "-" if m["low"] is None else f"[{m['low']:.3f}, {m['high']:.3f}]"


def render_agree(doc: dict[str, Any]) -> str:
    """The agreement's JSON document as text."""
    lines = [
        f"{doc['output']}: {doc['matched_rows']:,} of {doc['labelled_rows']:,} labelled rows "
        f"matched on '{doc['id_column']}'"
    ]
    lines += [f"note: {note}" for note in doc["notes"]]
    for q in doc["questions"]:
        lines += ["", f"{q['key']} ({q['kind']}), n = {q['n']:,}"]
        if not q["metrics"]:
            continue
        base = q["base_rate"]
        rows = [[m["name"], _num(m["value"]), _interval(m)] for m in q["metrics"]]
        rows.append([f"base rate ({base['majority']!s})", _num(base["share"]), ""])
        lines += table(["", "value", "95% interval"], rows)
        if q["kind"] == "noul":
            lines.append(
                f"  yes: {q['yes_rate_labels']:.1%} of labels, {q['yes_rate_judge']:.1%} of "
                "the judge's answers (p > 0.5)"
            )
            bins = [[f"{b['low']:.1f}-{b['high']:.1f}", str(b["rows"]), _num(b["predicted"]),
                     _num(b["observed"])] for b in q["reliability"]]  # fmt: skip
            lines += table(["p bin", "rows", "mean p", "observed yes"], bins)
    return "\n".join(lines)
