"""What a job costs and the floor its account's limits set on how long it takes.

The price is the user's: the config's `pricing` section, per million input tokens, by versioned
model with a default (`evalpipe.config.PricingConfig`). evalpipe knows no price of its own, so a
config without one gets token counts and "cost unknown", never a made-up figure.
"""

from __future__ import annotations

from dataclasses import dataclass

from evalpipe.config import JobConfig


@dataclass(frozen=True)
class Price:
    """Dollars per million input tokens (None: unknown) and the config key it came from."""

    per_million: float | None
    source: str

    def cost(self, input_tokens: int) -> float | None:
        """Dollars for this many input tokens; None when the price is unknown."""
        if self.per_million is None:
            return None
        return round(input_tokens * self.per_million / 1_000_000, 6)

    def describe(self) -> str:
        """`$0.042 per million input tokens (pricing.models.model-1.13.0)`, or why unknown."""
        if self.per_million is None:
            return f"cost unknown ({self.source})"
        return f"${self.per_million:g} per million input tokens ({self.source})"


UNKNOWN = Price(None, "no pricing in the config")


def shown_usd(usd: float | None) -> str:
    """Dollars as the plan and the summary print them, or "cost unknown" without a price."""
    return "cost unknown" if usd is None else f"${usd:.6f}"


def price_of(config: JobConfig) -> Price:
    """The job's price: its model's entry in `pricing.models`, else `pricing.default`."""
    pricing = config.pricing
    if config.model in pricing.models:
        return Price(pricing.models[config.model], f"pricing.models.{config.model}")
    if pricing.default is not None:
        return Price(pricing.default, "pricing.default")
    return UNKNOWN


def minimum_seconds(requests: int, tokens: int, rpm: float, tps: float) -> float:
    """The floor the limits set: requests / (RPM/60) or tokens / TPS, whichever is larger."""
    return max(requests / (rpm / 60.0), tokens / tps)
