"""Bench q: lean packs against a service that counts tokens as a tokenizer reads JSON (issue 48).

The service is the embedded one in a process of its own with `--token-rule json` (a state that
is not a string, and any instructions or criteria that are not, counted as their JSON: every
quote, bracket, colon, comma and escape a token), 600 RPM and 20,000 tokens/s, latency 0.2 s.
The corpus is 1,800 short docstrings of Python's standard library (20-100 tokens each, most of
them several lines: a packed row's newlines are JSON escapes), in an order drawn by a hash of
their names; three questions about them (~90 tokens). The job is `evalpipe run` in a process of
its own with `packing.rows: auto` and the default `max_cost_ratio` (1.25), a fresh cache folder
(so it measures) and the answer cache off (`--max-cost-ratio R` sets another, to see how a
run that packs hands over from its measurement where the default keeps rows alone). Printed:

- whether auto packed, at how many rows per request, and why;
- a packed row's cost / its request alone, by the service's own count: the measurement's
  figure, and the run's (the packed rows' billed tokens ÷ what the same rows cost alone, by the
  service's counter);
- the share of the token bound the packed run reached (the service's tokens/s from its first
  full-speed second to its last request, less a tail, ÷ 20,000);
- the time from the first request to the run's first full-speed second (a second in which
  the service accepted >= 90% of its token limit) after the measurement ended (its function
  returned: a shim around the CLI records when), and from that end to it: the hand-over;
- whether every row equals the service's answer to that row alone (the reference evaluator for
  every row, the service over HTTP for a few).

    .venv/bin/python bench/job_lean_packs.py                  # once
    .venv/bin/python bench/job_lean_packs.py --repeat 3
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import importlib
import inspect
import io
import json
import pkgutil
import shutil
import sys
import warnings
from pathlib import Path
from typing import Any

import httpx
import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import BENCH_DIR, KEY, ServiceWatch, header, load, run_job, service, table, write_config
from evalpipe.contract import count_text
from evalpipe.service.counting import ServiceCounter
from evalpipe.service.evaluator import answer_request, compile_questions

QUESTIONS: dict[str, Any] = {
    "returns": {
        "type": "noul",
        "instructions": "Does the docstring say what the function returns, or what it changes "
        "when it returns nothing?",
        "criteria": {
            "true": "it names the result or the effect",
            "false": "it leaves the result unsaid",
        },
    },
    "kind": {
        "type": "choice",
        "instructions": "What does the documented code mainly do?",
        "criteria": {
            "compute": "calculates or transforms values",
            "io": "reads or writes files, streams or sockets",
            "check": "tests a condition",
            "other": None,
        },
    },
    "clarity": {
        "type": "score",
        "instructions": "How clear is the docstring for a new user of the library, who has "
        "not read its source?",
        "criteria": [
            "unclear: it could not be used from this",
            "adequate",
            "clear: usable at once",
        ],
    },
}
_SKIP = ("antigravity", "this", "idlelib", "turtledemo", "tkinter", "turtle", "test", "lib2to3",
         "ensurepip", "pydoc_data", "venv", "__main__")  # fmt: skip
FULL_SPEED = 0.9  # a second at this share of the token limit is at full speed


# --------------------------------------------------------------------------- the corpus


def _modules() -> list[str]:
    """The standard library's public modules, and their packages' modules one level down."""
    names: set[str] = set()
    for name in sorted(sys.stdlib_module_names):
        if name.startswith("_") or name in _SKIP:
            continue
        names.add(name)
        module = _imported(name)
        for info in pkgutil.iter_modules(getattr(module, "__path__", None) or []):
            if not info.name.startswith("_") and "test" not in info.name:
                names.add(f"{name}.{info.name}")
    return sorted(names)


def _imported(name: str) -> Any:
    try:
        with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
            warnings.simplefilter("ignore")
            return importlib.import_module(name)
    except BaseException:  # a module that cannot be imported here (a platform's, a GUI's)
        return None


def _docstrings() -> dict[str, str]:
    """Distinct docstrings of 20-100 tokens of the standard library's functions, classes and
    methods, by qualified name."""
    found: dict[str, str] = {}
    seen: set[str] = set()
    for name in _modules():
        module = _imported(name)
        if module is None:
            continue
        for attr, obj in sorted(vars(module).items()):
            if attr.startswith("_") or getattr(obj, "__module__", None) != name:
                continue
            items = [(f"{name}.{attr}", obj)]
            if inspect.isclass(obj):
                items += [(f"{name}.{attr}.{a}", o) for a, o in sorted(vars(obj).items())
                          if not a.startswith("_") and callable(o)]  # fmt: skip
            for qualified, item in items:
                doc = inspect.getdoc(item) if callable(item) else None
                if doc and doc not in seen and 20 <= count_text(doc) <= 100:
                    seen.add(doc)
                    found[qualified] = doc
    return found


def docstring_corpus(rows: int) -> Path:
    """`rows` docstrings (ids 0..rows-1) in an order drawn by a hash of their names."""
    path = (
        BENCH_DIR / f"docstrings-{rows}-py{sys.version_info.major}{sys.version_info.minor}.parquet"
    )
    if path.exists():
        return path
    found = _docstrings()
    names = sorted(found, key=lambda n: hashlib.blake2b(n.encode(), digest_size=8).digest())
    if len(names) < rows:
        raise SystemExit(f"only {len(names)} docstrings of 20-100 tokens here, not {rows}")
    chosen = names[:rows]
    BENCH_DIR.mkdir(parents=True, exist_ok=True)
    texts = [found[n] for n in chosen]
    pq.write_table(pa.table({"id": list(range(rows)), "name": chosen, "text": texts}), path)
    return path


# --------------------------------------------------------------------------- the run


def _first_full_second(watch: ServiceWatch, after: float, tps: float) -> float | None:
    """The start of the first second (after `after`) in which the service accepted at least
    FULL_SPEED of `tps` tokens."""
    for s in watch.since(after + 1.0):
        if watch.rate(s.t - 1.0, s.t)[1] >= FULL_SPEED * tps:
            return s.t - 1.0
    return None


def _exact(out: Path, texts: list[str], base_url: str) -> tuple[int, int]:
    """(rows whose every answer is the service's answer alone, rows)."""
    table_ = pl.read_parquet(out / "part-*.parquet").sort("id")
    compiled = compile_questions(QUESTIONS)
    alone = [answer_request(t, QUESTIONS, compiled) for t in texts]
    with httpx.Client(timeout=30) as client:  # the evaluator is the service's answer: a check
        for text, answers in list(zip(texts, alone, strict=True))[:3]:
            body = {"state": text, "model": "model-1.13.0", "questions": QUESTIONS}
            reply = client.post(f"{base_url}/v1/evaluate", json=body,
                                headers={"Authorization": f"Bearer {KEY}"})  # fmt: skip
            assert reply.json()["answers"] == answers, "the evaluator is not the service"
    same = 0
    for row in table_.iter_rows(named=True):
        a = alone[row["id"]]
        kind = a["kind"]["probabilities"]
        same += (
            row["returns__p_true"] == a["returns"]["noul"]
            and row["kind__choice"] == a["kind"]["choice"]
            and all(row[f"kind__p__{k}"] == p for k, p in kind.items())
            and row["clarity__score"] == a["clarity"]["score"]
        )
    return same, table_.height


def one_run(args: argparse.Namespace, i: int) -> dict[str, Any]:
    path = docstring_corpus(args.rows)
    texts = pq.read_table(path, columns=["text"]).column(0).to_pylist()
    name = f"lean-{i}"
    cache = BENCH_DIR / f"xdg-{name}"
    shutil.rmtree(cache, ignore_errors=True)
    with service(rpm=args.rpm, tps=args.tps, latency=args.latency, token_rule="json") as svc:
        config, out = write_config(
            name, path, svc.base_url, rpm=args.rpm, tps=args.tps,
            extra={"packing": {"rows": "auto", **_ratio(args)}},
        )  # fmt: skip
        _questions(config)
        with ServiceWatch(svc) as watch:
            marks = BENCH_DIR / f"{name}.marks"
            marks.unlink(missing_ok=True)
            shim = [sys.executable, __file__, "--child", str(marks)]
            job = run_job(config, out, env={"XDG_CACHE_HOME": str(cache)}, program=shim)
        same, rows = _exact(out, texts, svc.base_url)
        measured = float(marks.read_text()) if marks.exists() else None
    s = job.summary
    p = s.get("packing", {})
    first = watch.first_accepted(job.started) or job.started
    full = _first_full_second(watch, measured or first, args.tps)
    last = watch.sending(job.started)[1]
    start = full if full is not None else first
    _, tps, _, _ = watch.rate(start, max(start + 1.0, last - args.tail))
    counter = ServiceCounter("json")
    questions = sum(counter.question(q) for q in QUESTIONS.values())
    result = pl.read_parquet(out / "part-*.parquet")
    packed = result.filter(pl.col("_pack") > 1)
    alone_cost = sum(counter.state(t) + questions for t in (texts[j] for j in packed["id"]))
    seconds = range(int(last - first) + 1)
    timeline = [watch.rate(first + i, first + i + 1) for i in seconds]
    return {
        "timeline": [(round(r), round(t), refused) for r, t, _, refused in timeline],
        "rows_per_request": p.get("rows"),
        "reason": p.get("reason"),
        "measured_cost_ratio": p.get("cost_ratio"),
        "run_cost_ratio": packed["_input_tokens"].sum() / alone_cost if alone_cost else None,
        "alone_tokens_per_row": alone_cost / max(1, packed.height),
        "token_share": tps / args.tps,
        "to_full_speed": None if full is None else full - first,
        "handover": None if full is None or measured is None else full - measured,
        "measuring": None if measured is None else measured - first,
        "run_seconds": last - first,
        "same": same,
        "rows": rows,
        "rate_limited": s.get("rate_limited_429"),
        "wall": s.get("wall_seconds"),
        "load": load(),
    }


def _ratio(args: argparse.Namespace) -> dict[str, float]:
    return {} if args.max_cost_ratio is None else {"max_cost_ratio": args.max_cost_ratio}


def _questions(config: Path) -> None:
    """The bench's questions in the config `write_config` made (it writes the common ones)."""
    import yaml

    data = yaml.safe_load(config.read_text())
    data["questions"] = QUESTIONS
    config.write_text(yaml.safe_dump(data, sort_keys=False))


def child(marks: str, argv: list[str]) -> None:
    """`evalpipe` with the moment the packing measurement returned written to `marks`."""
    import time

    import evalpipe.preflight.measure as measure_module
    from evalpipe.cli import main

    measure = measure_module.measure

    def timed(*args: Any, **kwargs: Any) -> Any:
        measured = measure(*args, **kwargs)
        Path(marks).write_text(f"{time.monotonic()}")
        return measured

    measure_module.measure = timed
    main(argv)


def main() -> None:
    if len(sys.argv) > 2 and sys.argv[1] == "--child":
        return child(sys.argv[2], sys.argv[3:])
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1800)
    parser.add_argument("--rpm", type=float, default=600)
    parser.add_argument("--tps", type=float, default=20_000)
    parser.add_argument("--latency", type=float, default=0.2, help="service median seconds")
    parser.add_argument("--tail", type=float, default=1.0, help="seconds left out at the end")
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--timeline", action="store_true", help="print each second's rates")
    parser.add_argument(
        "--max-cost-ratio", type=float, help="packing.max_cost_ratio (default: the config's)"
    )
    args = parser.parse_args()
    header(
        f"Bench q: lean packs, {args.rows} docstrings, 3 questions, --token-rule json, "
        f"{args.rpm:g} RPM, {args.tps:g} tokens/s, packing.rows auto"
    )
    rows = []
    for i in range(args.repeat):
        r = one_run(args, i)
        print(json.dumps(r), flush=True)
        if args.timeline:  # requests/s, tokens/s, 429s, each second from the first request
            for second, (rps, tps, refused) in enumerate(r["timeline"]):
                print(f"  {second:4d} s  {rps:4d} req/s  {tps:7,d} tokens/s  {refused} 429s")
        rows.append(
            (
                f"{r['rows_per_request']}",
                f"{r['measured_cost_ratio']}",
                f"{r['run_cost_ratio']:.3f}" if r["run_cost_ratio"] else "-",
                f"{r['token_share']:.1%}",
                "never" if r["to_full_speed"] is None else f"{r['to_full_speed']:.1f}",
                "-" if r["measuring"] is None else f"{r['measuring']:.1f}",
                "-" if r["handover"] is None else f"{r['handover']:.1f}",
                f"{r['run_seconds']:.1f}",
                f"{r['same']} / {r['rows']}",
                f"{r['rate_limited']}",
                f"{r['wall']:.1f}",
                r["load"],
            )
        )
        print(f"auto: {r['reason']}")
    table(
        rows,
        ("rows/request", "cost ratio measured", "cost ratio run", "÷ token bound",
         "first request → full speed, s", "measuring, s", "measured → full speed, s",
         "first → last request, s", "rows = alone", "429s",
         "wall s", "load"),
    )  # fmt: skip


if __name__ == "__main__":
    main()
