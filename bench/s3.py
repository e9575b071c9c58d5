"""An S3-compatible server on loopback for the benches: moto's server mode, in this process.

The job reaches it as it reaches any S3-compatible store: `AWS_ENDPOINT_URL` and the standard
AWS variables, set here in this process's environment so that the `evalpipe run` subprocesses
inherit them; nothing about the store is in the job config. moto keeps the objects in this
process's memory, so they never count in the job's process tree (what bench e measures).
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pyarrow.fs as pafs
import pyarrow.parquet as pq

BUCKET = "bench"


def point_aws_at(host: str, port: int, who: str) -> None:
    """This process's (and its children's) AWS variables, for the loopback server at host:port
    with made-up credentials named after `who`."""
    os.environ.update(
        AWS_ENDPOINT_URL=f"http://{host}:{port}",
        AWS_ACCESS_KEY_ID=f"{who}-access-key",
        AWS_SECRET_ACCESS_KEY=f"{who}-secret-key",
        AWS_DEFAULT_REGION="us-east-1",
        AWS_EC2_METADATA_DISABLED="true",
    )


@contextlib.contextmanager
def s3_server() -> Iterator[pafs.FileSystem]:
    """moto's S3 server on 127.0.0.1 with a bucket `bench`; yields a filesystem on it."""
    import boto3
    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.WARNING)
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    point_aws_at(host, port, "bench")
    try:
        boto3.client("s3").create_bucket(Bucket=BUCKET)
        yield pafs.FileSystem.from_uri(f"s3://{BUCKET}")[0]
    finally:
        server.stop()


def upload(fs: pafs.FileSystem, path: Path) -> str:
    """`path` copied to the bucket; returns its URI."""
    key = f"{BUCKET}/corpora/{path.name}"
    pafs.copy_files(
        str(path), key, source_filesystem=pafs.LocalFileSystem(), destination_filesystem=fs
    )
    return f"s3://{key}"


def summary(fs: pafs.FileSystem, uri: str) -> dict[str, Any]:
    """The summary in an output's manifest on the store."""
    with fs.open_input_stream(f"{uri.removeprefix('s3://')}/_manifest.json") as stream:
        manifest: dict[str, Any] = orjson.loads(stream.read())
    return manifest.get("summary") or {}


def output_rows(fs: pafs.FileSystem, uri: str) -> tuple[int, int]:
    """(rows, distinct ids) in an output's parts on the store."""
    ids = pq.read_table(uri.removeprefix("s3://"), filesystem=fs, columns=["id"])["id"]
    return len(ids), len(ids.unique())
