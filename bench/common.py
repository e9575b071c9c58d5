"""Shared pieces of the job benches: corpora, configs, the service, and watching from outside.

Every job bench runs the whole job the way a user does, `evalpipe run CONFIG` in a subprocess
(Parquet in, Ray actors, Parquet out), against the embedded reference service started here in
a process of its own, so that neither shares a GIL with the job nor with this script. Figures
come from outside the job: the service's own counters sampled over time (`ServiceWatch`), the
memory of the job's process tree (`TreeWatch`), and the summary the job leaves in its manifest.

Corpora and outputs go under BENCH_DIR (default /tmp/evalpipe-bench, outside the repository;
override with EVALPIPE_BENCH_DIR).
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil
import pyarrow as pa
import pyarrow.parquet as pq
import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from evalpipe.contract.tokens import count_questions  # noqa: E402
from evalpipe.service import EmbeddedService, ServiceSettings  # noqa: E402

BENCH_DIR = Path(os.environ.get("EVALPIPE_BENCH_DIR", "/tmp/evalpipe-bench"))
KEY = "bench-key-0123456789"
KEY_ENV = "EVAL_API_KEY"
EVALPIPE = str(Path(sys.executable).with_name("evalpipe"))
LIFTED = {"rpm": 1e9, "tps": 1e13}  # far beyond anything one machine sends
QUESTIONS: dict[str, Any] = {
    "helpful": {
        "type": "noul",
        "instructions": "Does the review help a shopper decide?",
        "criteria": {"true": "specific details", "false": "vague"},
    },
    "sentiment": {
        "type": "choice",
        "instructions": "What is the overall sentiment?",
        "criteria": {"positive": None, "mixed": None, "negative": None},
    },
    "quality": {
        "type": "score",
        "instructions": "How well written is it?",
        "criteria": ["poor", "fair", "good"],
    },
}
QUESTION_TOKENS = sum(count_questions(QUESTIONS).values())
_TEXT = (
    "the kettle boils fast but lid broke after week support replaced it quickly and kindly "
    "jacket fits well button came loose two days later tent kept us dry through storm lamp "
    "light warm bright cheap sturdy flimsy would buy again recommend avoid price shipping box"
)


def load() -> str:
    """The machine's load, as printed beside every figure."""
    one, five, _ = os.getloadavg()
    return f"{one:.2f}/{five:.2f}"


def header(title: str) -> None:
    stamp = time.strftime("%Y-%m-%d %H:%M")
    print(f"\n## {title}  ({stamp}, {os.cpu_count()} cores, load 1/5 min {load()})", flush=True)


def table(rows: list[tuple[str, ...]], head: tuple[str, ...]) -> None:
    """A compact Markdown table."""
    widths = [max(len(str(r[i])) for r in [head, *rows]) for i in range(len(head))]
    line = "| " + " | ".join(f"{h:<{w}}" for h, w in zip(head, widths, strict=True)) + " |"
    print(line)
    print("|" + "|".join("-" * (w + 2) for w in widths) + "|")
    for row in rows:
        print("| " + " | ".join(f"{c!s:<{w}}" for c, w in zip(row, widths, strict=True)) + " |")
    sys.stdout.flush()


# --------------------------------------------------------------------------- corpora


def corpus(rows: int, words: int, first: int = 0) -> Path:
    """A Parquet corpus of `rows` distinct states of about `words` tokens (cached on disk).

    Row i's state is a fixed text chosen by i with the row number appended, so no two states
    are equal (nothing is deduplicated) and every request costs the same to answer. Rows are
    numbered from `first`: corpora whose ranges do not overlap share no state.
    """
    name = f"corpus-{rows}x{words}" + (f"-from{first}" if first else "")
    path = BENCH_DIR / f"{name}.parquet"
    if path.exists():
        return path
    BENCH_DIR.mkdir(parents=True, exist_ok=True)
    words_of = _TEXT.split()
    bank = [
        " ".join(words_of[(i * 7 + j * 3) % len(words_of)] for j in range(max(1, words - 2)))
        for i in range(97)
    ]
    temp = path.with_suffix(".tmp")
    schema = pa.schema([("id", pa.int64()), ("text", pa.string())])
    with pq.ParquetWriter(temp, schema) as writer:
        for start in range(first, first + rows, 65_536):
            ids = range(start, min(first + rows, start + 65_536))
            texts = [f"{bank[i % 97]} row {i}" for i in ids]
            writer.write_table(pa.table({"id": list(ids), "text": texts}, schema=schema))
    temp.rename(path)
    return path


def first_state(path: Path) -> str:
    return str(pq.ParquetFile(path).read_row_group(0, columns=["text"]).column(0)[0])


# --------------------------------------------------------------------------- configs


def write_config(
    name: str,
    corpus_path: Path,
    base_url: str,
    *,
    rpm: float,
    tps: float,
    actors: int = 2,
    max_in_flight: int | None = None,
    headroom: float | None = None,
    extra: dict[str, Any] | None = None,
) -> tuple[Path, Path]:
    """(config path, output dir) of a job on `corpus_path` against `base_url`."""
    out = BENCH_DIR / "out" / name
    limits: dict[str, Any] = {"requests_per_minute": rpm, "tokens_per_second": tps}
    if headroom is not None:
        limits["headroom"] = headroom
    concurrency: dict[str, Any] = {"actors": actors}
    if max_in_flight is not None:
        concurrency["max_in_flight"] = max_in_flight
    config: dict[str, Any] = {
        "input": {"path": str(corpus_path), "id_column": "id", "state": "text"},
        "output": {"path": str(out)},
        "service": {"base_url": base_url, "api_key_env": KEY_ENV},
        "model": "model-1.13.0",
        "limits": limits,
        "concurrency": concurrency,
        # The benches measure sending: answers from the cache of an earlier run would skip it.
        "cache": {"enabled": False},
        "questions": QUESTIONS,
    }
    for key, value in (extra or {}).items():
        config[key] = {**config.get(key, {}), **value}
    path = BENCH_DIR / f"{name}.yaml"
    BENCH_DIR.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path, out


# --------------------------------------------------------------------------- the service


@contextmanager
def service(
    rpm: float = LIFTED["rpm"],
    tps: float = LIFTED["tps"],
    latency: float = 0.0,
    schedule: str = "",
    **more: Any,
) -> Iterator[EmbeddedService]:
    """The embedded reference service in its own process (limits as given; `more`: other
    `ServiceSettings`, e.g. `token_rule="json"`)."""
    settings = ServiceSettings(
        api_key=KEY,
        rpm=rpm,
        tps=tps,
        latency=latency,
        limit_schedule=schedule,
        max_inflight=1_000_000,
        **more,
    )
    with EmbeddedService(settings, mode="process") as embedded:
        yield embedded


@dataclass
class Sample:
    t: float  # time.monotonic() in this process
    accepted: int
    tokens: int
    rate_limited: int
    rpm: float
    tps: float


class ServiceWatch:
    """Samples the service's counters in a thread: every `fast` seconds until the first
    accepted evaluate request (to time start-up), every `interval` seconds after."""

    def __init__(self, embedded: EmbeddedService, interval: float = 0.25, fast: float = 0.02):
        self.embedded = embedded
        self.interval = interval
        self.fast = fast
        self.samples: list[Sample] = []
        self._origin: float | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> ServiceWatch:
        self.sample()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.sample()

    def sample(self) -> Sample:
        stats = self.embedded.stats()
        received = time.monotonic()
        # Times on the service's own clock (its uptime), placed on ours once: the delay of
        # each admin request then does not blur the rates.
        if self._origin is None:
            self._origin = received - stats["uptime_seconds"]
        limits = stats["limits"]
        s = Sample(
            self._origin + stats["uptime_seconds"],
            stats["requests_accepted"],
            stats["tokens_accepted"],
            stats["rate_limited"],
            float(limits["rpm"]),
            float(limits["tps"]),
        )
        self.samples.append(s)
        return s

    def _run(self) -> None:
        while not self._stop.is_set():
            started = self.samples[-1].accepted > self.samples[0].accepted
            self._stop.wait(self.interval if started else self.fast)
            self.sample()

    # -- analysis ----------------------------------------------------------------------------

    def since(self, t: float) -> list[Sample]:
        return [s for s in self.samples if s.t >= t]

    def first_accepted(self, after: float = 0.0) -> float | None:
        """When the service accepted its first evaluate request after `after` (to a sample)."""
        base = next((s for s in reversed(self.samples) if s.t <= after), self.samples[0])
        for s in self.samples:
            if s.t > after and s.accepted > base.accepted:
                return s.t
        return None

    def sending(self, after: float = 0.0) -> tuple[float, float]:
        """(first, last) time the accepted count grew, after `after`."""
        first = self.first_accepted(after) or after
        final = self.samples[-1].accepted
        last = next(s.t for s in self.samples if s.t >= first and s.accepted >= final)
        return first, last

    def at(self, t: float) -> Sample:
        """The sample nearest `t` at or before it."""
        best = self.samples[0]
        for s in self.samples:
            if s.t > t:
                break
            best = s
        return best

    def rate(self, start: float, end: float) -> tuple[float, float, int, int]:
        """(requests/s, tokens/s, accepted, 429s) accepted by the service in [start, end]."""
        a, b = self.at(start), self.at(end)
        span = max(1e-9, b.t - a.t)
        return (
            (b.accepted - a.accepted) / span,
            (b.tokens - a.tokens) / span,
            b.accepted - a.accepted,
            b.rate_limited - a.rate_limited,
        )

    def rolling(self, start: float, end: float, window: float) -> list[tuple[float, float]]:
        """(t, requests/s over the `window` seconds before t) for samples in [start+window, end]."""
        out = []
        for s in self.samples:
            if start + window <= s.t <= end:
                out.append((s.t, self.rate(s.t - window, s.t)[0]))
        return out


def steady(watch: ServiceWatch, after: float, warmup: float, tail: float) -> dict[str, Any]:
    """Service-side figures of one sending period that began after `after`."""
    first, last = watch.sending(after)
    start, end = first + warmup, max(first + warmup + 1, last - tail)
    rps, tps, _, _ = watch.rate(start, end)
    _, _, total, total_429 = watch.rate(after, last)
    return {
        "first": first,
        "last": last,
        "steady_rps": rps,
        "steady_tps": tps,
        "steady_seconds": end - start,
        "accepted": total,
        "rate_limited": total_429,
        "share_429": total_429 / max(1, total + total_429),
        "load": load(),
    }


# --------------------------------------------------------------------------- memory


STICKY = ("driver", "actor", "budget")  # roles a process keeps once it is seen in them
_RAY_INFRA = ("raylet", "gcs_server", "dashboard", "log_monitor", "monitor.py", "runtime_env")


def _role(proc: psutil.Process, driver: int) -> str:
    if proc.pid == driver:
        return "driver"
    try:
        cmd = " ".join(proc.cmdline())
    except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
        return "gone"
    if cmd.startswith("ray::Worker"):
        return "actor"
    if cmd.startswith(("ray::Budget", "ray::AccountBudget")):
        return "budget"
    if cmd.startswith("ray::"):
        return "ray idle worker"
    if "evalpipe.service" in cmd:
        return "service"
    if any(name in cmd for name in _RAY_INFRA):
        return "ray infrastructure"
    return "other"


class TreeWatch:
    """Peak RSS of a process tree by role (driver, each actor, budget, Ray, ...), sampled."""

    def __init__(self, pid: int, interval: float = 0.5) -> None:
        self.pid = pid
        self.interval = interval
        self.peak: dict[str, int] = {}  # role -> peak RSS of one process of that role
        self.peak_total: dict[str, int] = {}  # role -> peak of the sum over its processes
        self._cpu: dict[int, tuple[str, float]] = {}  # pid -> (role, last CPU seconds seen)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._procs: dict[int, psutil.Process] = {}

    def __enter__(self) -> TreeWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        while not self._stop.is_set():
            self.sample()
            self._stop.wait(self.interval)

    def sample(self) -> None:
        try:
            root = psutil.Process(self.pid)
            procs = [root, *root.children(recursive=True)]
        except psutil.NoSuchProcess:
            return
        totals: dict[str, int] = {}
        for proc in procs:
            try:
                rss = proc.memory_info().rss
            except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
                continue
            role = _role(proc, self.pid)
            if role not in STICKY:  # an actor's process is renamed as it shuts down
                role = self._cpu.get(proc.pid, (role, 0.0))[0]
            self.peak[role] = max(self.peak.get(role, 0), rss)
            with contextlib.suppress(psutil.Error):
                times = proc.cpu_times()
                self._cpu[proc.pid] = (role, times.user + times.system)
            totals[role] = totals.get(role, 0) + rss
        for role, total in totals.items():
            self.peak_total[role] = max(self.peak_total.get(role, 0), total)

    def cpu(self) -> dict[str, float]:
        """CPU seconds by role, as last sampled (a process's last half second may be missed)."""
        out: dict[str, float] = {}
        for role, seconds in self._cpu.values():
            out[role] = out.get(role, 0.0) + seconds
        return out


# --------------------------------------------------------------------------- the job


@dataclass
class JobRun:
    returncode: int
    started: float  # time.monotonic() just before the subprocess was started
    ended: float
    summary: dict[str, Any]
    stderr: str
    memory: TreeWatch | None = None
    extra: dict[str, Any] = field(default_factory=dict)


def run_job(
    config: Path,
    out: Path,
    *,
    memory: bool = False,
    timeout: float = 7200,
    args: list[str] | None = None,
    env: dict[str, str] | None = None,
    program: list[str] | None = None,
) -> JobRun:
    """`evalpipe run CONFIG --restart [args]` in a subprocess (with `env` added to this
    process's environment); its summary from the manifest. `program` stands for `evalpipe`
    (a bench's shim around the CLI)."""
    env = {**os.environ, KEY_ENV: KEY, "RAY_DEDUP_LOGS": "0", **(env or {})}
    env.pop("RAY_ADDRESS", None)  # a local Ray of its own, never somebody else's cluster
    command = [*(program or [EVALPIPE]), "run", str(config), "--restart"]
    command += ["--progress-interval", "3600"]
    command += args or []
    started = time.monotonic()
    proc = subprocess.Popen(
        command, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    watch = TreeWatch(proc.pid) if memory else None
    if watch is not None:
        watch.__enter__()
    try:
        _, stderr = proc.communicate(timeout=timeout)
    finally:
        if watch is not None:
            watch.__exit__()
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    ended = time.monotonic()
    summary: dict[str, Any] = {}
    manifest = out / "_manifest.json"
    if proc.returncode == 0 and manifest.exists():
        summary = json.loads(manifest.read_text()).get("summary") or {}
    if proc.returncode != 0:
        print(f"job failed ({proc.returncode}): {stderr.strip()[-2000:]}", file=sys.stderr)
    return JobRun(proc.returncode, started, ended, summary, stderr, watch)


def output_rows(out: Path) -> int:
    """Rows in the job's output directory (part files only)."""
    files = [p for p in out.glob("*.parquet") if not p.name.startswith(("_", "."))]
    return sum(pq.ParquetFile(p).metadata.num_rows for p in files)


def mib(n: int) -> str:
    return f"{n / 2**20:,.0f} MiB"
