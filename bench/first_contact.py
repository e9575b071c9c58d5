"""How long a first contact that cannot succeed takes to say so, and what it says.

Issue 41's cases, each tried as a user runs them, `evalpipe models` and `evalpipe run CONFIG`
in a subprocess, timed from outside (spawn to exit, so Python's start and evalpipe's imports
are in the figure):

- untrusted: the service over HTTPS under a private CA (trustme), SSL_CERT_FILE unset;
- unresolvable: `https://evalsvc.invalid` (RFC 6761: never resolves);
- http-to-https: `http://` given for the HTTPS service;
- trusted+proxy: the same service as `https://evalsvc.example` through a CONNECT proxy, with
  SSL_CERT_FILE naming the CA: `models` must list the models (the control: exit 0).

The HTTPS service is the embedded reference service (a process of its own) behind a TLS front,
and the proxy a CONNECT proxy, both from tests/netdoubles.py, in threads of this script.
Needs the `test` extra (trustme).

    .venv/bin/python bench/first_contact.py [--repeat 3]

Each line: case, command, exit code, wall seconds (min / median / max), the child's CPU
seconds (median: the figure a loaded machine does not inflate), and the last line of stderr.
Target (issue 41): exit 2 in <= 2 s with one line naming the cause and the fix.
"""

from __future__ import annotations

import argparse
import os
import resource
import ssl
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import trustme
import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from evalpipe.service import EmbeddedService, ServiceSettings  # noqa: E402
from netdoubles import connect_proxy, tls_front  # noqa: E402

KEY = "bench-key-0123456789"
NAME = "evalsvc.example"
QUESTIONS = {"helpful": {"type": "noul", "instructions": "Helpful?", "criteria": {"true": "y"}}}


def evalpipe() -> list[str]:
    script = Path(sys.executable).with_name("evalpipe")
    return [str(script)] if script.exists() else [sys.executable, "-m", "evalpipe.cli.main"]


def config(tmp: Path, url: str) -> Path:
    pq.write_table(pa.table({"id": [1, 2, 3], "text": ["a", "b", "c"]}), tmp / "in.parquet")
    path = tmp / f"job-{abs(hash(url))}.yaml"
    job = {
        "input": {"path": str(tmp / "in.parquet"), "id_column": "id", "state": "text"},
        "output": {"path": str(tmp / f"out-{abs(hash(url))}")},
        "service": {"base_url": url},
        "model": "model-1.13.0",
        "questions": QUESTIONS,
    }
    path.write_text(yaml.safe_dump(job))
    return path


def timed(args: list[str], env: dict[str, str]) -> tuple[int, float, float, str]:
    """Exit code, wall seconds, the child's CPU seconds, its last line of output."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.monotonic()
    done = subprocess.run(args, env=env, capture_output=True, text=True, timeout=120, check=False)
    wall = time.monotonic() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    lines = (done.stderr.strip() or done.stdout.strip()).splitlines()
    return done.returncode, wall, cpu, lines[-1] if lines else ""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=3)
    repeat = parser.parse_args().repeat
    ca = trustme.CA()
    server = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("localhost", NAME).configure_cert(server)
    settings = ServiceSettings(api_key=KEY)
    with (
        tempfile.TemporaryDirectory() as tmpdir,
        EmbeddedService(settings, port=0, mode="process") as service,
    ):
        tmp = Path(tmpdir)
        ca_file = tmp / "ca.pem"
        ca.cert_pem.write_to_path(str(ca_file))
        upstream = ("127.0.0.1", int(service.base_url.rsplit(":", 1)[1]))
        with tls_front(server, upstream) as front:
            route = lambda host, port: ("127.0.0.1", front.port)  # noqa: E731
            with connect_proxy(route=route) as proxy:
                base = {k: v for k, v in os.environ.items() if "PROXY" not in k.upper()}
                base = {**base, "EVAL_API_KEY": KEY, "XDG_CACHE_HOME": str(tmp / "cache")}
                base.pop("SSL_CERT_FILE", None)
                base.pop("SSL_CERT_DIR", None)
                proxied = {**base, "SSL_CERT_FILE": str(ca_file), "HTTPS_PROXY": proxy.url}
                cases = [
                    ("untrusted", f"https://localhost:{front.port}", base),
                    ("unresolvable", "https://evalsvc.invalid", base),
                    ("http-to-https", f"http://localhost:{front.port}", base),
                    ("trusted+proxy", f"https://{NAME}", proxied),
                ]
                for name, url, env in cases:
                    commands = {"models": ["models", "--base-url", url]}
                    if name != "trusted+proxy":
                        commands["run"] = ["run", str(config(tmp, url))]
                    for command, args in commands.items():
                        runs = [timed([*evalpipe(), *args], env) for _ in range(repeat)]
                        walls = [wall for _, wall, _, _ in runs]
                        cpus = [cpu for _, _, cpu, _ in runs]
                        code, _, _, line = runs[-1]
                        print(
                            f"{name:14} {command:6} exit {code}  wall s min {min(walls):.2f} "
                            f"median {statistics.median(walls):.2f} max {max(walls):.2f}  "
                            f"cpu s median {statistics.median(cpus):.2f}\n    {line[:300]}"
                        )
    print(f"load average: {os.getloadavg()[0]:.2f} (1 min)")


if __name__ == "__main__":
    main()
