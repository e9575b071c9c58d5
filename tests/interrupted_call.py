"""A data scientist's script for tests/test_api_interrupt.py: `ep.score` interrupted mid-call
by a real SIGINT, then the same call again, once for each front end the test names.

    python interrupted_call.py BASE_URL ROWS SIGNALLED_DIR

It joins the Ray RAY_ADDRESS names (the test session's). Each line on stdin names a front end
(`script`: `ep.score` from a script; `loop`: `ep.score` inside a running asyncio loop, as in a
notebook; `ascore`: `ep.ascore` awaited under `asyncio.run`), whose calls score ROWS rows of
their own (the answer cache never answers one front end's rows from another's). It prints one
JSON line per event on stdout: `calling`, `interrupted` (seconds from the SIGINT the test
announces in the file SIGNALLED_DIR/<front end> to the KeyboardInterrupt, and the actors still
alive then that were not alive when the script started: an interrupt ends every actor of this
driver, those an earlier front end's second call left idle included), `again` (the second
call's rows and seconds). It ends when stdin closes.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from pathlib import Path

import polars as pl

import evalpipe as ep

QUESTIONS = {
    "helpful": ep.Noul("Does the review help a shopper decide?", true="specific", false="vague"),
    "sentiment": ep.Choice("Overall sentiment?", ["positive", "negative", "mixed"]),
}


def say(event: str, **fields: object) -> None:
    print(json.dumps({"event": event, **fields}), flush=True)


def alive_actors() -> dict[str, str]:
    """Every actor alive on the cluster: id -> name, from Ray's GCS (the state API's
    `list_actors` needs the dashboard, which the session's Ray runs without)."""
    from ray._private.state import actors

    alive = actors(actor_state_name="ALIVE").values()
    return {a["ActorID"]: a["Name"] or a["ActorClassName"] for a in alive}


def interrupted(how: str, data: pl.DataFrame, options: dict[str, object]) -> bool:
    """The call `how` makes; True once it raised KeyboardInterrupt."""
    try:
        if how == "loop":

            async def in_a_notebook() -> None:
                ep.score(data, **options, progress=False)

            asyncio.run(in_a_notebook())
        elif how == "ascore":
            asyncio.run(ep.ascore(data, **options, progress=False))
        else:
            ep.score(data, **options, progress=False)
    except KeyboardInterrupt:
        return True
    return False


def main() -> None:
    base_url, rows, signalled = sys.argv[1], int(sys.argv[2]), Path(sys.argv[3])
    service = ep.Service(base_url, model="model-1.13.0", limits={"requests_per_minute": 60_000})
    options = {"id": "id", "state": "text", "questions": QUESTIONS, "service": service}

    import ray

    ray.init(address="auto", logging_level="ERROR", log_to_driver=False)  # the user's own
    before = alive_actors()
    for line in sys.stdin:
        how = line.strip()
        data = pl.DataFrame(
            {
                "id": list(range(rows)),
                "text": [f"Review {i} ({how}): it broke on day {i}." for i in range(rows)],
            }
        )
        say("calling", how=how, actors=len(alive_actors()))
        if not interrupted(how, data, options):
            say("finished", how=how)
            continue
        after = time.time() - float((signalled / how).read_text())
        left = {k: v for k, v in alive_actors().items() if k not in before}
        say("interrupted", how=how, seconds=round(after, 3), left=left)
        started = time.monotonic()
        again = ep.score(data, **options, progress=False)
        say("again", how=how, rows=again.height, answered=again["_model"].drop_nulls().len(),
            seconds=round(time.monotonic() - started, 3))  # fmt: skip


if __name__ == "__main__":
    main()
