"""A spy in Ray's serializer, for tests/test_secrets.py: every value Ray serializes in a process
(an argument of an actor or a task, or a result) is pickled once more and searched for the
API key; one line per value goes to a file: pid, type, found.

It is installed in an `evalpipe run` process before its CLI starts, and in every worker of the
Ray that run starts through Ray's own `worker_process_setup_hook` (named by its import path in
`RAY_JOB_CONFIG_JSON_ENV_VAR`, the job config Ray's job submission hands a driver). A module of
its own, importing only Ray: each worker imports it at start.
"""

from __future__ import annotations

import json
import os
import pickle
from typing import Any

NOTES_ENV = "EVALPIPE_SPY_NOTES"  # the file the notes go to
KEY_ENV = "EVAL_API_KEY"  # the key searched for: the workers inherit it, as from a shell
HOOK = f"{__name__}.install"


def job_config() -> str:
    """The value of `RAY_JOB_CONFIG_JSON_ENV_VAR` that puts the spy in every worker."""
    return json.dumps({"runtime_env": {"worker_process_setup_hook": HOOK}})


def install() -> None:
    """Make Ray's serializer note, per value, its type and whether it holds the key (this
    process's `EVAL_API_KEY`; a process without one fails here, loudly)."""
    import ray.cloudpickle
    from ray._private import serialization

    record, needle = os.environ[NOTES_ENV], os.environb[KEY_ENV.encode()]
    assert needle, f"{KEY_ENV} is empty: nothing to search for"
    context = serialization.SerializationContext
    if hasattr(context, "_evalpipe_original"):
        return
    original = context.serialize

    def serialize(self: Any, value: Any) -> Any:
        try:
            data = ray.cloudpickle.dumps(value)
        except Exception:
            try:
                data = pickle.dumps(value)
            except Exception:
                data = repr(value).encode()
        with open(record, "a") as notes:
            notes.write(f"{os.getpid()}\t{type(value).__name__}\t{needle in data}\n")
        return original(self, value)

    context._evalpipe_original = original  # type: ignore[attr-defined]
    context.serialize = serialize  # type: ignore[method-assign]
