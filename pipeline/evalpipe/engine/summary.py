"""The run's summary: a dict first (the manifest and the `summary` event keep it), text second.

What a run did, from its counters (`evalpipe.engine.progress.Counters`): rows by outcome, requests,
retries and 429s, the tokens the service billed and what they cost, the rates held against the
limits, the answer cache, the workers, the service and its models, how rows were packed, the
canary, and the rows each calibrated question kept.
"""

from __future__ import annotations

from typing import Any

from evalpipe.config import EMBEDDED_WARNING
from evalpipe.engine.progress import Counters
from evalpipe.planning import shown_usd
from evalpipe.send import CAUSES


def summary(c: Counters, rpm: float, tps: float) -> dict[str, Any]:
    """The end-of-job figures, as plain data for the manifest and for printing."""
    wall = c.elapsed
    # Rates over the sending time: start-up (Ray, the service check) is reported on its own.
    startup = (c.first_request - c.started) if c.first_request is not None else wall
    sending = max(1e-9, wall - startup)
    return {
        "rows_total": c.rows_total,
        "rows_skipped_committed_earlier": c.rows_skipped,
        "rows_answered": c.answered,
        "rows_in_error": dict(sorted(c.errors.items())),
        "network_causes": dict(sorted(c.network_causes.items())),
        "rows_reused_identical_state": c.reused,
        "requests": c.requests,
        "attempts": c.attempts,
        "retries": c.retries,
        "rate_limited_429": c.rate_limited,
        "requests_refused_for_length": c.refused_for_length,
        "input_tokens": c.input_tokens,
        "cost_usd": c.price.cost(c.input_tokens),
        "price_per_million_input_tokens": c.price.per_million,
        "price_source": c.price.source,
        "service": c.service,
        "token_ratio": c.token_ratio or None,
        "cache": c.cache,
        "rows_from_cache": c.rows_from_cache,
        "questions_from_cache": c.questions_from_cache,
        "cache_saved_tokens": c.cache_saved_tokens,
        "cache_saved_usd": c.price.cost(c.cache_saved_tokens),
        "wall_seconds": round(wall, 3),
        "startup_seconds": round(startup, 3),
        "achieved_rpm": round(c.attempts / sending * 60, 1),
        "rpm_limit": rpm,
        "achieved_tps": round(c.input_tokens / sending, 1),
        "tps_limit": tps,
        "models": dict(c.models),
        "actor_restarts": c.actor_restarts,
        "workers": c.workers,
        "nodes": c.nodes,
        "canary": c.canary,
        "calibration": c.calibration,
        "packing": {
            **c.packing,
            "packed_requests": c.packs,
            "rows_packed": c.rows_packed,
            "rows_per_request": round(c.rows_by_request / c.requests, 3) if c.requests else None,
        },
    }


def _refused_line(s: dict[str, Any]) -> list[str]:
    refused = s.get("requests_refused_for_length", 0)
    if not refused:
        return []
    return [f"                {refused} requests refused for length, split and sent again"]


def _network_line(s: dict[str, Any]) -> list[str]:
    """Rows in `network` error by the cause that was told (a certificate, a name, a proxy)."""
    causes = s.get("network_causes") or {}
    if not causes:
        return []
    told = ", ".join(f"{CAUSES.get(k, k)} {n}" for k, n in causes.items())
    return [f"  network       {sum(causes.values())} rows in error: {told} (see _error)"]


def _cache_line(s: dict[str, Any]) -> list[str]:
    """The answer cache's line; summaries written before it existed have none."""
    if "cache" not in s:
        return []
    if s["cache"] != "on":
        return [f"  cache         {s['cache']}"]
    return [
        f"  cache         {s['rows_from_cache']} rows and {s['questions_from_cache']} questions "
        f"answered from the cache, saving ~{s['cache_saved_tokens']:,} tokens "
        f"({shown_usd(s['cache_saved_usd'])})"
    ]


def _cost_part(s: dict[str, Any]) -> str:
    """`cost $0.001234 ($0.042 per million input tokens (pricing.default))`; summaries written
    before the price was the user's carry the price they used in the text only."""
    if s.get("cost_usd") is None:
        return f"cost unknown ({s.get('price_source', 'no price')})"
    per_million = s.get("price_per_million_input_tokens")
    if per_million is None:
        return f"cost ${s['cost_usd']:.6f}"
    return f"cost ${s['cost_usd']:.6f} (${per_million:g} per million, {s['price_source']})"


def _service_lines(s: dict[str, Any]) -> list[str]:
    service = s.get("service")
    if not service:
        return []
    lines = [f"  service       {service}"]
    if s.get("token_ratio"):
        lines.append(f"  token ratio   {s['token_ratio']} (planned with it)")
    if service == "embedded":
        lines.append(f"                {EMBEDDED_WARNING}")
    return lines


def _workers_line(s: dict[str, Any]) -> list[str]:
    """Where the job's workers ran; summaries written before it was counted have none."""
    if not s.get("workers"):
        return []
    restarts = s.get("actor_restarts") or 0
    nodes = f"{s['nodes']} node{'s' if s['nodes'] != 1 else ''}"
    replaced = f", {restarts} of them replacing workers that died" if restarts else ""
    return [f"  workers       {s['workers']} on {nodes}{replaced}"]


def packing_line(p: Any) -> list[str]:
    """`packing.rows` in the summary: rows per request, and the measurement behind it."""
    if not isinstance(p, dict) or "rows" not in p:
        return []
    per = p.get("rows_per_request")
    lines = [
        f"  packing       up to {p['rows']} rows per request"
        + (f" ({per:.2f} on average)" if per else "")
        + f": {p.get('reason', '')}"
    ]
    agreement = p.get("agreement") or []
    if agreement:
        worst = min(agreement, key=lambda a: a["interval_95"][0])
        lines.append(
            f"                lowest agreement {worst['question']!r} {worst['agree']}/"
            f"{worst['rows']} (95% from {worst['interval_95'][0]:.3f}); cost per row packed / "
            f"alone {p.get('cost_ratio')}"
        )
    return lines


def trust_lines(s: dict[str, Any]) -> list[str]:
    """The canary's result, and per question with a target agreement the rows kept and the
    promise behind them (`rows_kept`, added by the sink)."""
    lines = []
    canary = s.get("canary")
    if isinstance(canary, dict):
        lines.append(f"  canary        {canary['text'].removeprefix('Canary: ')}")
    calibration = s.get("calibration") or {}
    kept = s.get("rows_kept") or {}
    for key, q in (calibration.get("questions") or {}).items():
        a = q.get("abstain")
        if not a:
            continue
        n, of = (kept.get(key) or {}).get("kept", 0), (kept.get(key) or {}).get("answered", 0)
        share = f"{n / of:.1%}" if of else "-"
        promise = f"{a['target_agreement']:.1%} agreement at {a['confidence']:.0%} confidence"
        bound = "no threshold can promise it" if a["bound"] is None else f"bound {a['bound']:.3f}"
        lines.append(f"  kept          {key}: {n:,} of {of:,} rows ({share}) for {promise} "
                     f"({bound})")  # fmt: skip
    return lines


def format_summary(s: dict[str, Any]) -> str:
    errors = ", ".join(f"{k} {v}" for k, v in s["rows_in_error"].items()) or "none"
    models = ", ".join(s["models"]) or "none"
    lines = [
        "evalpipe summary",
        f"  rows          {s['rows_total']} total, {s['rows_answered']} answered, "
        f"{sum(s['rows_in_error'].values())} in error ({errors}), "
        f"{s['rows_skipped_committed_earlier']} committed by an earlier run",
        *_network_line(s),
        f"  reused        {s['rows_reused_identical_state']} rows answered from an identical state",
        f"  requests      {s['requests']} ({s['attempts']} attempts, {s['retries']} retries, "
        f"{s['rate_limited_429']} answered 429)",
        *_refused_line(s),
        f"  input tokens  {s['input_tokens']:,}  {_cost_part(s)}",
        *_cache_line(s),
        f"  wall time     {s['wall_seconds']:.1f} s ({s['startup_seconds']:.1f} s to the first "
        "request)",
        f"  throughput    {s['achieved_rpm']:.0f} RPM of {s['rpm_limit']:.0f} limit, "
        f"{s['achieved_tps']:.0f} tokens/s of {s['tps_limit']:.0f}",
        *_workers_line(s),
        *_service_lines(s),
        f"  models        {models}",
        *packing_line(s.get("packing")),
        *trust_lines(s),
        *_kept_line(s.get("maintenance")),
    ]
    return "\n".join(lines)


def _kept_line(kept: dict[str, Any] | None) -> list[str]:
    """The table kept after the run (`evalpipe.output.after_run`): its active files."""
    if not kept:
        return []
    return [f"  table kept    {kept['files_before']} -> {kept['files_after']} data files "
            f"({kept['files_rewritten']} compacted, {kept['files_vacuumed']} past the retention "
            f"removed), checkpoint at version {kept['checkpoint_version']}, "
            f"{kept['seconds']:.1f} s"]  # fmt: skip
