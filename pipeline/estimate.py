"""`evalpipe plan`: what a job will cost and how long the limits make it take, before sending.

One streaming pass over the corpus with the same planner the job uses: rows, invalid states,
rows over the context limit, distinct states, requests after splitting, estimated input tokens
(our tokenizer; the service's own count may differ a little), cost, and the floor the account's
limits set on the duration.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pipeline.plan import cost, minimum_seconds
from pipeline.source import state_key

if TYPE_CHECKING:
    from pipeline.runner import Prepared


def estimate(prepared: Prepared) -> dict[str, Any]:
    """Figures for a prepared job; sends nothing."""
    repeated = prepared.source.duplicate_state_keys()
    seen: set[bytes] = set()
    rows = invalid = over_limit = duplicates = requests = split_rows = tokens = 0
    for batch in prepared.source.batches():
        for row in batch:
            rows += 1
            if row.state is None:
                invalid += 1
                continue
            if repeated:
                key = state_key(row.state)
                if key in repeated:
                    if key in seen:
                        duplicates += 1
                        continue
                    seen.add(key)
            plan = prepared.planner.plan(row.state)
            if plan.error_type:
                over_limit += 1
                continue
            requests += len(plan.requests)
            split_rows += len(plan.requests) > 1
            tokens += sum(r.tokens for r in plan.requests)
    limits = prepared.config.limits
    return {
        "rows": rows,
        "invalid_state_rows": invalid,
        "context_limit_rows": over_limit,
        "distinct_states_to_send": rows - invalid - over_limit - duplicates,
        "rows_answered_from_identical_state": duplicates,
        "requests": requests,
        "rows_split_into_several_requests": split_rows,
        "estimated_input_tokens": tokens,
        "estimated_cost_usd": round(cost(tokens), 6),
        "minimum_seconds": round(
            minimum_seconds(requests, tokens, limits.requests_per_minute, limits.tokens_per_second),
            1,
        ),
        "requests_per_minute_limit": limits.requests_per_minute,
        "tokens_per_second_limit": limits.tokens_per_second,
        "model": prepared.config.model,
    }


def format_estimate(f: dict[str, Any]) -> str:
    minutes = f["minimum_seconds"] / 60
    return "\n".join(
        [
            "evalpipe plan (nothing was sent)",
            f"  rows               {f['rows']}",
            f"  invalid state      {f['invalid_state_rows']} (never sent)",
            f"  over context limit {f['context_limit_rows']} (never sent)",
            f"  distinct states    {f['distinct_states_to_send']} to send; "
            f"{f['rows_answered_from_identical_state']} rows reuse an identical state's answer",
            f"  requests           {f['requests']} "
            f"({f['rows_split_into_several_requests']} rows split to fit the context limit)",
            f"  input tokens       ~{f['estimated_input_tokens']:,}",
            f"  cost               ~${f['estimated_cost_usd']:.6f} at 0.042 $ per million",
            f"  minimum duration   {f['minimum_seconds']:.1f} s ({minutes:.1f} min) at "
            f"{f['requests_per_minute_limit']:.0f} RPM and "
            f"{f['tokens_per_second_limit']:.0f} tokens/s",
            f"  model              {f['model']}",
        ]
    )
