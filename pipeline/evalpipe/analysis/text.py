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
    if doc.get("estimates"):
        lines += ["", "estimates from the two samples (corpus-wide; --json has every stratum):"]
        rows = [[e["question"], e["what"], _num(e["a"]), _num(e["b"]),
                 _num(e["change"], signed=True), _ci(e["low"], e["high"])]
                for e in doc["estimates"] if e["stratum"] is None]  # fmt: skip
        lines += table(["question", "figure", "A", "B", "change", "95% interval"], rows)
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
    lines += render_reviewers(doc.get("reviewers", []))
    return "\n".join(lines)


def render_reviewers(found: Sequence[dict[str, Any]]) -> list[str]:
    """The reviewers' agreement among themselves, as lines (none for one reviewer)."""
    if not found:
        return []
    rows = [[r["question"], str(r["reviewers"]), f"{r['rows']:,}",
             f"{r.get('method', '')} {_num(r['kappa'])}"] for r in found]  # fmt: skip
    return ["", "reviewers among themselves", *table(["", "reviewers", "rows", "kappa"], rows)]


def _usd(value: Any) -> str:
    return "cost unknown" if value is None else f"${value:.6f}"


def _short(text: str, width: int = 48) -> str:
    return text if len(text) <= width else text[: width - 4] + "...'"


def _estimate_rows(rows: Sequence[dict[str, Any]]) -> list[list[str]]:
    return [
        [
            r["question"],
            _short(r["what"]),
            _num(r["estimate"]),
            _interval(r),
            "-" if r["half_width"] is None else f"±{r['half_width']:.3f}",
            f"{r['n']:,}",
            r["method"] or "-",
        ]
        for r in rows
    ]


def _precision_line(doc: dict[str, Any]) -> str:
    precision = doc["precision"]
    reached = "-" if precision is None else f"±{precision:.4f}"
    why = {
        "margin": "the margin is reached",
        "corpus": "every row is in the sample",
        "max_rows": "stopped at --max-rows: the margin is NOT reached",
        "max_cost": "stopped at --max-cost: the margin is NOT reached",
        "rounds": "stopped after the most rounds: the margin is NOT reached",
        "stopped": "stopped by a signal: the margin is NOT reached",
    }.get(doc["stopped_by"], doc["stopped_by"])
    return (
        f"widest corpus-wide interval {reached} (margin {doc['margin']:g}, a mean level's on "
        f"its 0-1 scale): {why}"
    )


def _invalid(doc: dict[str, Any]) -> str:
    invalid = doc.get("invalid_state_rows") or 0
    return f"; {invalid:,} rows without a state to score left out" if invalid else ""


def render_estimate(doc: dict[str, Any]) -> str:
    """`evalpipe estimate`'s JSON document as text: the corpus-wide estimates, then each
    stratum's, with the rows and cost it took against the full run's."""
    spent, full = doc["spent"], doc["full_run"]
    share = doc["sample_share"] or 0.0
    confidence = f"{doc['confidence']:.0%}"
    lines = [
        f"evalpipe estimate: {doc['sample_rows']:,} of {doc['corpus_rows']:,} rows in the sample "
        f"({share:.1%}; {doc['sample_answered']:,} answered), {doc['rounds']} "
        f"round{'s' if doc['rounds'] != 1 else ''}" + _invalid(doc),
        f"  this time     {spent['requests']:,} requests, {spent['input_tokens']:,} input "
        f"tokens, {_usd(spent['cost_usd'])} ({spent['rows_from_cache']:,} rows from the cache)",
        f"  the full run  ~{full['requests'] or 0:,} requests, "
        f"~{full['estimated_input_tokens'] or 0:,} input tokens, "
        f"~{_usd(full['estimated_cost_usd'])} for {full['rows'] or 0:,} rows",
        f"  {_precision_line(doc)}",
        "",
        f"corpus-wide ({confidence} intervals):",
    ]
    header = ["question", "figure", "estimate", f"{confidence} interval", "±", "n", "method"]
    overall = [r for r in doc["estimates"] if r["stratum"] is None]
    lines += table(header, _estimate_rows(overall))
    for s in doc["strata"] if doc["by"] else []:
        rows = [r for r in doc["estimates"] if r["stratum"] == s["stratum"]]
        lines += ["", f"{s['stratum']} ({s['rows']:,} rows, {s['drawn']:,} drawn):"]
        lines += table(header, _estimate_rows(rows))
    lines += [
        "",
        "method: stratified = the stratified estimate +- z (t for a mean) standard errors, with "
        "the finite population correction; wilson = Wilson's interval on the effective sample "
        "size (a share near 0 or 1); exact = every row is in the sample",
    ]
    return "\n".join(lines)


def _pair(figure: dict[str, Any], side: str) -> str:
    found = figure.get(f"{side}_interval")
    value = _num(figure.get(side), signed=side == "change")
    return value if not found else f"{value} [{found[0]:.3f}, {found[1]:.3f}]"


def _abstain_line(a: dict[str, Any]) -> str:
    promise = f"{a['target_agreement']:.1%} agreement at {a['confidence']:.0%} confidence"
    if a["threshold"] is None:
        more = (f"about {a['labels_needed']:,} labelled rows would" if a["labels_needed"]
                else "more labels would not: its surest rows agree less than that")  # fmt: skip
        return (
            f"  abstain: no threshold promises {promise} from {a['labelled_rows']:,} rows ({more})"
        )
    return (
        f"  abstain: keep calibrated confidence >= {a['threshold']:.4f}: {promise} "
        f"(lower bound {a['bound']:.3f}), {a['labelled_share_kept']:.1%} of labelled rows kept"
    )


def render_calibrate(doc: dict[str, Any]) -> str:
    """`evalpipe calibrate`'s JSON document as text: per question the map, the held-out
    figures before and after with their 95% intervals, and the abstention it would make."""
    lines = [
        f"{doc['output']}: {doc['matched_rows']:,} of {doc['labelled_rows']:,} labelled rows "
        f"matched; judge {doc['model']} on {doc['service']}; {doc['folds']}-fold held out"
    ]
    if doc.get("file"):
        lines.append(f"calibration file: {doc['file']}")
    lines += [f"note: {note}" for note in doc["notes"]]
    for q in doc["questions"]:
        lines += ["", f"{q['key']} ({q['kind']}), n = {q['n']:,}, {q['method']}"]
        if "held_out" not in q:
            continue
        rows = [[name, _pair(f, "before"), _pair(f, "after"), _pair(f, "change")]
                for name, f in (("ECE", q["held_out"]["ece"]), ("Brier", q["held_out"]["brier"]),
                                ("log loss", q["held_out"]["log_loss"]))]  # fmt: skip
        lines += table(["held out", "judge [95%]", "calibrated [95%]", "change [95%]"], rows)
        if q.get("abstain"):
            lines.append(_abstain_line(q["abstain"]))
        for g in q.get("by") or []:
            lines.append(
                f"  {g['group']} (n = {g['n']:,}): ECE {_num(g['ece_before'])} -> "
                f"{_num(g['ece_after'])}, Brier {_num(g['brier_before'])} -> "
                f"{_num(g['brier_after'])}"
            )
    return "\n".join(lines)


def render_infer(doc: dict[str, Any]) -> str:
    """`evalpipe infer`'s document as text: per question and answer, the corrected estimate
    beside the judge alone and the labels alone."""
    level = f"{doc['confidence']:.0%}"
    lines = [
        f"{doc['output']}: {doc['labelled_rows']:,} labelled rows drawn by a known design; "
        f"{level} intervals" + (", the output a sample of the corpus" if doc["sampled_output"]
                                else "")
    ]  # fmt: skip
    lines += [f"note: {note}" for note in doc["notes"]]
    grouped = doc["by"] is not None
    header = ["question", "answer", *([doc["by"]] if grouped else []), "corrected",
              f"{level} interval", "judge", "judge off", "labels alone", "labels",
              "worth"]  # fmt: skip
    rows = []
    for e in doc["estimates"]:
        alone = e.get("labels_alone") or {}
        worth = e.get("effective_labels")
        rows.append([
            e["question"], f"{e['what']} {e['of']}" if e["what"] == "mean" else e["of"],
            *([str(e["group"])] if grouped else []), _num(e.get("estimate")),
            _interval(e) if "low" in e else "-", _num(e["judge"]),
            _num(e.get("judge_off"), signed=True), _interval(alone) if alone else "-",
            f"{e['labels']:,}", "-" if worth is None else f"{worth:,.0f}",
        ])  # fmt: skip
    lines += ["", *table(header, rows)]
    lines += render_reviewers(doc.get("reviewers", []))
    return "\n".join(lines)
