"""What every section of the job config shares: unknown keys refused, values frozen, and each
field's docstring as its description (the docs' config reference is made from them).

Apart from `evalpipe.config.model` so that the sections that name URLs
(`evalpipe.config.endpoints`) live in a module of their own.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field

Positive = Annotated[float, Field(gt=0)]
PositiveInt = Annotated[int, Field(gt=0)]


class ConfigSection(BaseModel):
    """A section of the job config (see the module docstring)."""

    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)
