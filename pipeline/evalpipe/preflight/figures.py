"""`evalpipe plan`: what a job will cost and how long the limits make it take, before sending.

One streaming pass over the corpus with the row classifier the job uses (`evalpipe.planning`), so
the figures are what the run will do: rows, invalid states, rows over the context limit,
distinct states, rows and questions the answer cache answers (it is read, never written),
requests after splitting, estimated input tokens, cost, and the floor the account's limits set
on the duration. Tokens are counted with evalpipe's tokenizer (`TOKENIZER`); the service counts
with its own. With a measured ratio of its count to ours (`plan --calibrate N`,
`evalpipe.preflight.tokens`), the rows are planned and the tokens and cost estimated by its count.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from evalpipe.cache import open_job_cache
from evalpipe.config import JobConfig, describe_duration
from evalpipe.engine import seconds_available
from evalpipe.planning import (
    Fate,
    Learned,
    PreparedJob,
    RowClassifier,
    minimum_seconds,
    price_of,
    repeated_states,
    shown_usd,
)
from evalpipe.preflight.canary import read_canary
from evalpipe.preflight.choice import Packs, choose_packing

TOKENIZER = "evalpipe's: a run of word characters, or one punctuation mark, is one token"


def plan_figures(
    prepared: PreparedJob, ratio: float | None = None, source: str = ""
) -> dict[str, Any]:
    """Figures for a prepared job; sends nothing. `ratio` is the service's token count per
    token of ours, measured just now (`evalpipe.preflight.tokens`), else the one kept for the
    service and model (`evalpipe.planning.ratios`), if any: the one the run will plan with."""
    questions, planner, config = prepared.questions, prepared.planner, prepared.config
    if ratio is None:
        known = Learned.of(prepared).ratio()
        if known is not None:
            ratio, source = known.ratio, known.describe()
    if ratio is not None:
        planner.calibrate(ratio)
    cache = open_job_cache(
        prepared.config, questions, planner.question_tokens, tier=prepared.tier, write=False
    )
    classifier = RowClassifier(planner, repeated_states(prepared.source), cache.lookup)
    fates: Counter[Fate] = Counter()
    requests = split_rows = tokens = cached_questions = saved = 0
    choice = choose_packing(prepared)
    packs = Packs(prepared, choice)
    try:
        for batch in prepared.source.batches():
            singles = []
            for decision in classifier.classify_batch(batch):
                fates[decision.fate] += 1
                requests += len(decision.requests)
                split_rows += len(decision.requests) > 1
                tokens += sum(r.tokens for r in decision.requests)
                cached_questions += len(decision.hit.answers) if decision.hit else 0
                saved += decision.saved_tokens
                if len(decision.requests) == 1:
                    singles.append(decision.requests[0])
                elif decision.requests:
                    packs.alone(decision.requests)
            packs.add(singles)
    finally:
        cache.close()
    limits = prepared.config.limits
    billed = round(tokens * ratio) if ratio is not None else tokens
    price = price_of(config)
    selection = prepared.source.spec.rows
    rpm, tps = limits.requests_per_minute, limits.tokens_per_second
    seconds = minimum_seconds(requests, billed, rpm, tps)
    return {
        "service": config.service.identity,
        "rows_selected": "all" if selection is None else selection.describe(),
        "rows": sum(fates.values()),
        "invalid_state_rows": fates[Fate.INVALID],
        "context_limit_rows": fates[Fate.CONTEXT_LIMIT],
        "distinct_states_to_send": fates[Fate.SEND],
        "rows_answered_from_identical_state": fates[Fate.REPEAT],
        "cache": cache.note,
        "rows_answered_from_cache": fates[Fate.CACHED],
        "questions_answered_from_cache": cached_questions,
        "cache_saved_tokens": saved,
        "cache_saved_usd": price.cost(saved),
        "requests": requests,
        "rows_split_into_several_requests": split_rows,
        "tokenizer": TOKENIZER,
        "service_token_ratio": ratio,
        "service_token_ratio_source": source if ratio is not None else None,
        "evalpipe_count_tokens": tokens,
        "estimated_input_tokens": billed,
        "estimated_cost_usd": price.cost(billed),
        "price_per_million_input_tokens": price.per_million,
        "price_source": price.source,
        "minimum_seconds": round(seconds, 1),
        "requests_per_minute_limit": limits.requests_per_minute,
        "tokens_per_second_limit": limits.tokens_per_second,
        "model": config.model,
        **guard_figures(config, price.cost(billed), seconds),
        "packing": packs.figures(
            ratio, price, limits.requests_per_minute, limits.tokens_per_second
        ),
        "calibration": prepared.calibration_shown(),
        "canary": canary_figures(prepared),
    }


def canary_figures(prepared: PreparedJob) -> dict[str, Any] | None:
    """The canary the run will ask before the corpus (`canary.labels`, read and checked now)."""
    section = prepared.config.canary
    if section.labels is None:
        return None
    rows = read_canary(prepared)
    labelled = {key: sum(v is not None for v in values) for key, values in rows.labels.items()}
    return {"file": str(section.labels), "rows": len(rows.ids), "labelled": labelled,
            "left_out_without_state": rows.invalid}  # fmt: skip


def _promise_line(key: str, a: dict[str, Any]) -> str:
    kept = (
        "no threshold can promise it"
        if a["threshold"] is None
        else f"keeps {a['labelled_share_kept']:.0%} of labelled rows (bound {a['bound']:.3f})"
    )
    return f"{'':21}{key}: {a['target_agreement']:.1%} agreement at {a['confidence']:.0%}: {kept}"


def trust_lines(f: dict[str, Any]) -> list[str]:
    """The calibration the run adds columns from, and the canary it asks first."""
    lines = []
    calibration = f.get("calibration")
    if calibration:
        keys = ", ".join(calibration["questions"]) or "no question"
        lines.append(f"  calibration        {calibration['file']}: calibrated columns for {keys}")
        questions = calibration["questions"].items()
        lines += [_promise_line(key, q["abstain"]) for key, q in questions if q.get("abstain")]
    canary = f.get("canary")
    if canary:
        lines.append(
            f"  canary             {canary['rows']} rows of {canary['file']} asked fresh before "
            "the corpus (billed, never from the cache)"
        )
    return lines


def _cache_line(f: dict[str, Any]) -> str:
    if not f["cache"].startswith("on"):
        return f"  answer cache       {f['cache']}"
    return (
        f"  answer cache       {f['rows_answered_from_cache']} rows and "
        f"{f['questions_answered_from_cache']} questions answered from it, saving "
        f"~{f['cache_saved_tokens']:,} tokens ({shown_usd(f['cache_saved_usd'])})"
    )


def _cost_line(f: dict[str, Any]) -> str:
    if f["estimated_cost_usd"] is None:
        return f"  cost               unknown ({f['price_source']}: set pricing.default)"
    return (
        f"  cost               ~${f['estimated_cost_usd']:.6f} at "
        f"${f['price_per_million_input_tokens']:g} per million input tokens ({f['price_source']})"
    )


def _token_lines(f: dict[str, Any]) -> list[str]:
    ratio = f.get("service_token_ratio")
    if ratio is None:
        return [
            f"  input tokens       ~{f['estimated_input_tokens']:,} by evalpipe's count "
            "(a word or a punctuation mark is a token);",
            "                     the service counts with its own tokenizer, which may differ: "
            "--calibrate N measures it",
        ]
    lines = []
    if "calibration_requests" in f:
        lines.append(
            f"  calibration        {f['calibration_requests']} requests sent and billed "
            f"({f['calibration_billed_tokens']:,} tokens, {shown_usd(f['calibration_cost_usd'])}"
            f"{_refused(f)}): the service counts {ratio:.2f} tokens per token of evalpipe's"
        )
    elif f.get("service_token_ratio_source"):
        lines.append(
            f"  token ratio        {f['service_token_ratio_source']} (the run plans with it too)"
        )
    lines.append(
        f"  input tokens       ~{f['estimated_input_tokens']:,} by the service's count "
        f"(~{f['evalpipe_count_tokens']:,} by evalpipe's)"
    )
    return lines


def _refused(f: dict[str, Any]) -> str:
    refused = f.get("calibration_refused_for_length", 0)
    return f"; {refused} refused for length" if refused else ""


def format_plan(f: dict[str, Any]) -> str:
    minutes = f["minimum_seconds"] / 60
    sent = f.get("calibration_requests", 0) + f.get("calibration_refused_for_length", 0)
    sent += f.get("packing_calibration_requests", 0)
    head = f"{sent} calibration requests were sent, nothing else" if sent else "nothing was sent"
    return "\n".join(
        [
            f"evalpipe plan ({head})",
            f"  service            {f['service']}",
            f"  rows               {f['rows']}" + _selected(f),
            f"  invalid state      {f['invalid_state_rows']} (never sent)",
            f"  over context limit {f['context_limit_rows']} (never sent)",
            f"  distinct states    {f['distinct_states_to_send']} to send; "
            f"{f['rows_answered_from_identical_state']} rows reuse an identical state's answer",
            _cache_line(f),
            f"  requests           {f['requests']} "
            f"({f['rows_split_into_several_requests']} rows split to fit the context limit)",
            *_token_lines(f),
            _cost_line(f),
            f"  minimum duration   {f['minimum_seconds']:.1f} s ({minutes:.1f} min) at "
            f"{f['requests_per_minute_limit']:.0f} RPM and "
            f"{f['tokens_per_second_limit']:.0f} tokens/s",
            *guard_lines(f),
            f"  model              {f['model']}",
            *packing_lines(f.get("packing")),
            *trust_lines(f),
        ]
    )


_BINDS = {
    "tokens_per_second": "tokens per second bind",
    "requests_per_minute": "requests per minute bind",
}


def packing_lines(p: dict[str, Any] | None) -> list[str]:
    """`packing.rows` in the plan: what a row costs alone and packed, then rows per request,
    requests, tokens, cost and the shortest time packed and alone with the limit that binds
    each, and the measurement behind an `auto` choice."""
    if not p:
        return []
    lines = [f"  packing            {p['rows']} rows per request at most: {p['reason']}"]
    row = p.get("per_row")
    if row:
        lines += [
            f"    a row            ~{row['alone']:,.0f} tokens alone, ~{row['packed']:,.0f} "
            f"packed: +{row['added']:,.0f} ({row['ratio']}x; its field's name and JSON, and a",
            f"{_MORE}pointer in each question), by {row['counted_by']}",
        ]
    for how in ("packed", "alone"):
        f = p[how]
        binds = _BINDS.get(f.get("binding_limit", ""), "")
        if (
            binds
            and how == "packed"
            and p["rows"] > 1
            and f["binding_limit"] == "tokens_per_second"
        ):
            binds += ": more rows a request gain nothing"
        lines.append(
            f"    {how:<7}          {f['rows_per_request']:.2f} rows per request, "
            f"{f['requests']:,} requests, ~{f['input_tokens']:,} tokens, "
            f"{shown_usd(f['cost_usd'])}, at least {f['minimum_seconds']:.1f} s"
            + (f" ({binds})" if binds else "")
        )
    for a in p.get("agreement", []):
        low, high = a["interval_95"]
        lines.append(
            f"    {a['question']!r}: agrees on {a['agree']}/{a['rows']} rows "
            f"(95% {low:.3f}-{high:.3f}), mean change {a['mean_abs_change']:.4f}"
        )
    if p.get("cost_ratio") is not None:
        lines.append(
            f"    cost per row packed / alone: {p['cost_ratio']:.3f} (the service's usage)"
        )
    return lines


def _selected(f: dict[str, Any]) -> str:
    selected = f.get("rows_selected", "all")
    return "" if selected == "all" else f" ({selected})"


def guard_figures(config: JobConfig, cost_usd: float | None, seconds: float) -> dict[str, Any]:
    """`plan`'s figures for the guard rails: whether the corpus's estimated cost passes the
    cap, and whether its shortest duration at the limits fits in the time allowed."""
    limits = config.limits
    available = seconds_available(config)
    return {
        "max_cost_usd": limits.max_cost_usd,
        "over_cost_cap": (
            None if limits.max_cost_usd is None or cost_usd is None
            else cost_usd > limits.max_cost_usd
        ),
        "max_duration_seconds": limits.max_duration,
        "deadline": limits.deadline,
        "seconds_available": None if available is None else round(available, 1),
        "fits_in_time": None if available is None else seconds <= available,
    }  # fmt: skip


def guard_lines(f: dict[str, Any]) -> list[str]:
    """The plan's lines for the guard rails (none when neither is set)."""
    lines = []
    cap, cost = f.get("max_cost_usd"), f.get("estimated_cost_usd")
    if cap is not None and cost is not None:
        if f["over_cost_cap"]:
            share = cap / cost if cost else 1.0
            lines += [
                f"  cost cap           ${cap:g}: the corpus would cost more (~${cost:.6f});",
                f"{_MORE}the run stops at it (exit 6), about {share:.0%} done; a run with a "
                "higher cap, or none, resumes",
            ]
        else:
            lines.append(f"  cost cap           ${cap:g}: the corpus fits (~${cost:.6f})")
    available = f.get("seconds_available")
    if available is not None:
        need = f["minimum_seconds"]
        what = _time_allowed(f)
        if f["fits_in_time"]:
            lines.append(
                f"  time limit         {what}: the corpus fits at the limits (at least "
                f"{describe_duration(need)} of {describe_duration(available)} left)"
            )
        else:
            share = available / need if need else 1.0
            lines += [
                f"  time limit         {what}: the corpus does not fit (at least "
                f"{describe_duration(need)} at the limits, {describe_duration(available)} left);",
                f"{_MORE}the run stops then (exit 7), about {share:.0%} done; the next run resumes",
            ]
    return lines


_MORE = " " * 21  # a plan line's continuation, under its value


def _time_allowed(f: dict[str, Any]) -> str:
    parts = []
    if f.get("max_duration_seconds") is not None:
        parts.append(f"--max-duration {describe_duration(f['max_duration_seconds'])}")
    if f.get("deadline") is not None:
        parts.append(f"--deadline {f['deadline']}")
    return " and ".join(parts)
