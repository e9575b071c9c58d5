"""Where the API key is read: the one place, for the driver, its Ray workers and the Budget.

A module of its own, loaded with the package (not on first use, as the pydantic config is): a
Ray worker reads the key from its own environment at start and must not pay for the config's
models to do it.
"""

from __future__ import annotations

import os


def api_key_in(key_env: str) -> str:
    """The API key in this process's environment, from the variable `key_env` names
    (`service.api_key_env`); "" when it is unset. Never logged, never in a message, a manifest
    or a Ray task's arguments."""
    return os.environ.get(key_env, "")
