"""What is learned of a service, kept per service and model in a small JSON file between runs.

The token ratio (`evalpipe.planning.ratios`) and what packing learned (`evalpipe.planning.packing`)
are each one file beside the answer cache, `{"<service> <model>": {...}, ...}`: read whole,
changed one entry at a time, written whole (a temporary file renamed, so a reader never sees
half of one). It is advice, never a reason to fail: a file that cannot be read is empty, and
one that cannot be written is not.

With a shared tier (`shared.url`) the entries are kept in it instead (`TierKept`: one hash per
file, one field per service and model, the same JSON), so a fresh pod's `plan` and `run` start
where the last host's ended; a tier that is away is nothing kept, as a bad file is, and so is a
value whose seal does not hold (`evalpipe.tier.seal`: written without the account's key).
"""

from __future__ import annotations

import contextlib
import os
import tempfile
import time
from pathlib import Path
from typing import Any, Protocol

import orjson

from evalpipe.stores import cache_home
from evalpipe.tier import TierAddress


class Kept(Protocol):
    """Where one file's entries are kept: the local file, or the shared tier."""

    def entry(self, service: str, model: str) -> dict[str, Any] | None: ...

    def keep(self, service: str, model: str, entry: dict[str, Any]) -> None: ...


def kept(name: str, root: Path | None = None, tier: TierAddress | None = None) -> Kept:
    """The entries of file `name`: in the shared `tier` when there is one, else the file under
    `root` (default: the cache home)."""
    return KeptFile(name, root) if tier is None else TierKept(name, tier)


def _stamped(entry: dict[str, Any]) -> dict[str, Any]:
    return {**entry, "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}


class KeptFile:
    """One such file: `name` under `root` (default: the cache home)."""

    def __init__(self, name: str, root: Path | None = None) -> None:
        self.path = (root if root is not None else cache_home()) / name

    def entry(self, service: str, model: str) -> dict[str, Any] | None:
        """The entry kept for (service, model), None when none is (or the file is bad)."""
        found = self._read().get(f"{service} {model}")
        return found if isinstance(found, dict) else None

    def keep(self, service: str, model: str, entry: dict[str, Any]) -> None:
        """Replace (service, model)'s entry with `entry`, stamped with the time now."""
        entries = self._read()
        entries[f"{service} {model}"] = _stamped(entry)
        with contextlib.suppress(OSError):
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd, temp = tempfile.mkstemp(dir=self.path.parent, prefix=f".{self.path.stem}-")
            try:
                with os.fdopen(fd, "wb") as file:
                    file.write(orjson.dumps(entries, option=orjson.OPT_INDENT_2))
                os.replace(temp, self.path)
            finally:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(temp)

    def _read(self) -> dict[str, Any]:
        try:
            data = orjson.loads(self.path.read_bytes())
        except (OSError, orjson.JSONDecodeError):
            return {}
        return data if isinstance(data, dict) else {}


class TierKept:
    """One file's entries in the shared tier at `address`: a hash of the account's."""

    def __init__(self, name: str, address: TierAddress) -> None:
        from evalpipe.tier import Tier

        self._tier = Tier.of(address)
        self._address = address
        self._hash = address.key("learned", name)

    def _sealed_as(self, field: str) -> bytes:
        return self._hash + b"\0" + field.encode()

    def entry(self, service: str, model: str) -> dict[str, Any] | None:
        field = f"{service} {model}"
        kept = self._tier.field(self._hash, field)
        value = None if kept is None else self._address.unseal(self._sealed_as(field), kept)
        if kept is not None and value is None:
            self._tier.forged(1)
        try:
            found = orjson.loads(value) if value is not None else None
        except orjson.JSONDecodeError:
            return None
        return found if isinstance(found, dict) else None

    def keep(self, service: str, model: str, entry: dict[str, Any]) -> None:
        field = f"{service} {model}"
        value = self._address.seal(self._sealed_as(field), orjson.dumps(_stamped(entry)))
        if value is not None:
            self._tier.set_field(self._hash, field, value)
