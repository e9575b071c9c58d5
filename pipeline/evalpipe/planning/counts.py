"""A batch of states' token counts at once: the contract's count, without a regex call per row;
and a state's size in bytes (`state_bytes`), which bounds its tokens from below.

The row classifier counts every state it plans, and a run the answer cache answers whole still
plans each row (the tokens it saved are the plan's). `count_text` (`evalpipe.contract`) runs
Python's `re` once per state: about 6 µs for a 20-token state, most of a cached rerun's time.
Here the plain strings of a batch are counted in one polars call (Rust's regex, ~1 µs each).

The two counts are the same by construction, not by approximation: a string qualifies only
when every character is printable ASCII, a tab, a newline, a carriage return or a form feed.
On that alphabet the contract's `\\w` is exactly `[0-9A-Za-z_]` and its `\\s` exactly
`[\\t\\n\\r\\f ]`, so the contract's pattern `\\w+|[^\\w\\s]` is exactly `_TOKEN` below,
written with explicit classes so that no engine's notion of a word or a space comes into it.
Any other string (Unicode, a vertical tab, the separators that Python counts as space) and any
state that is not a string is left to the contract's own `count_value`, by the caller, only if
it needs the count (a repeated state does not).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

_PLAIN = r"^[\t\n\r\x0c\x20-\x7e]*$"  # the alphabet on which the two patterns agree
_TOKEN = r"[0-9A-Za-z_]+|[!-/:-@\[-^`{-~]"  # a run of word characters, or one punctuation


def plain_counts(states: Sequence[Any]) -> list[int | None]:
    """Per state, in order: `count_value(state)` where the state is a plain string (see the
    module docstring), None for any other state (not counted here). Polars is imported here, not
    with the module: a Ray worker imports the planning rules to split a refused request and
    counts nothing, and should not pay for polars at its start."""
    import polars as pl

    texts = pl.Series(values=[s if type(s) is str else None for s in states], dtype=pl.String)
    plain = texts.str.contains(_PLAIN).to_list()
    counts = texts.str.count_matches(_TOKEN).to_list()
    return [n if ok else None for ok, n in zip(plain, counts, strict=True)]


def state_bytes(state: Any) -> int:
    """The UTF-8 bytes of a state's text: its strings, keys and scalars (no quotes or
    punctuation: a lower bound of its JSON's size), for the context rule's byte bound
    (`evalpipe.contract.context_violation`). O(1) for an ASCII string."""
    if isinstance(state, str):
        return len(state) if state.isascii() else len(state.encode("utf-8", "surrogatepass"))
    if isinstance(state, Mapping):
        return sum(state_bytes(str(k)) + state_bytes(v) for k, v in state.items())
    if isinstance(state, (list, tuple)):
        return sum(state_bytes(v) for v in state)
    return len(str(state))
