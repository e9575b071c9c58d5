"""A data scientist's script for tests/test_api_interrupt.py: `ep.score` interrupted mid-call
by a real SIGINT, then the same call again.

    python interrupted_call.py BASE_URL ROWS script|loop|ascore SIGNALLED

It joins the Ray RAY_ADDRESS names (the test session's). It prints one JSON line per event on
stdout: `calling` (the actors alive before), `interrupted` (seconds from the SIGINT the test
announces in the file SIGNALLED to the KeyboardInterrupt, and the actors of the call still
alive then), `again` (the second call's rows and seconds).
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


def main() -> None:
    base_url, rows, how = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    signalled = Path(sys.argv[4])
    data = pl.DataFrame(
        {
            "id": list(range(rows)),
            "text": [f"Review {i}: it broke on day {i}." for i in range(rows)],
        }
    )
    service = ep.Service(base_url, model="model-1.13.0", limits={"requests_per_minute": 60_000})
    options = {"id": "id", "state": "text", "questions": QUESTIONS, "service": service}

    import ray

    ray.init(address="auto", logging_level="ERROR", log_to_driver=False)  # the user's own
    before = alive_actors()
    say("calling", actors=len(before))
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
        after = time.time() - float(signalled.read_text())
        left = {k: v for k, v in alive_actors().items() if k not in before}
        say("interrupted", seconds=round(after, 3), left=left)
    else:
        say("finished")
        return
    started = time.monotonic()
    again = ep.score(data, **options, progress=False)
    say("again", rows=again.height, answered=again["_model"].drop_nulls().len(),
        seconds=round(time.monotonic() - started, 3))  # fmt: skip


if __name__ == "__main__":
    main()
