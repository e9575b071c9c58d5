"""What a job costs and the floor its account's limits set on how long it takes."""

from __future__ import annotations

PRICE_PER_MILLION_INPUT_TOKENS = 0.042  # dollars, model-1.13.0 (spec section 1)


def cost(input_tokens: int) -> float:
    """Dollars for this many input tokens."""
    return input_tokens * PRICE_PER_MILLION_INPUT_TOKENS / 1_000_000


def minimum_seconds(requests: int, tokens: int, rpm: float, tps: float) -> float:
    """The floor the limits set: requests / (RPM/60) or tokens / TPS, whichever is larger."""
    return max(requests / (rpm / 60.0), tokens / tps)
