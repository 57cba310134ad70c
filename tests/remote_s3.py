"""A local S3 API for the remote-corpus tests: moto's server in its own process (one per test session),
a fresh bucket per test, files uploaded with s3fs, and index corpora split over several HDF files
whose frames hold their global sequence index (``conftest.check_rows`` works on them)."""

from __future__ import annotations

import atexit
import functools
import os
import re
import subprocess
import sys
import threading
import uuid
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

import seqloader as sl

pytest.importorskip("moto.server", reason="the remote tests need moto[server] (dev extra)")
s3fs = pytest.importorskip("s3fs", reason="the remote tests need s3fs (dev extra)")


@dataclass(frozen=True)
class S3:
    """A running S3 endpoint and a bucket of this test's own."""

    endpoint: str
    bucket: str

    @property
    def options(self) -> dict:
        """``storage_options`` for fsspec/s3fs (what a user passes to HDFSource)."""
        return storage_options(self.endpoint)

    def fs(self):
        return s3fs.S3FileSystem(skip_instance_cache=True, **self.options)

    def url(self, name: str) -> str:
        return f"s3://{self.bucket}/{name}"

    def upload(self, local: str | os.PathLike, name: str) -> str:
        url = self.url(name)
        _uploader(self.endpoint).put_file(os.fspath(local), url)
        return url


def storage_options(endpoint: str) -> dict:
    return {
        "key": "testing",
        "secret": "testing",
        "client_kwargs": {"endpoint_url": endpoint, "region_name": "us-east-1"},
    }


@functools.cache
def _uploader(endpoint: str):
    """One filesystem for every upload to ``endpoint``: a new one loads botocore's S3 model and
    opens a session again (3x the CPU of the upload of a small file). Uploads only write, so
    nothing it caches can go stale; reads go through a fresh ``S3.fs()``."""
    return s3fs.S3FileSystem(skip_instance_cache=True, **storage_options(endpoint))


@functools.cache
def _server() -> str:
    """moto's S3 server in a process of its own, started once per test session.

    Not a thread of the test process: DataLoader workers forked from it would inherit the
    server's accepted connections, so a connection the server closed stayed open (no FIN) while
    such a worker lived, the client reused it from its pool and waited out botocore's read
    timeout five times (a 300 s hang of ``test_budget_keeps_two_sub_epochs_of_files``, with
    every server thread idle). The endpoint is read from the server's own start-up line
    (port 0: the kernel picks a free one), so nothing waits on a deadline."""
    proc = subprocess.Popen(
        [sys.executable, "-u", "-m", "moto.server", "-H", "127.0.0.1", "-p", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "NO_COLOR": "1"},
    )
    assert proc.stdout is not None
    seen = []
    for line in proc.stdout:  # ends at the server's exit, so a failed start is no hang
        seen.append(line)
        found = re.search(r"Running on (http://127\.0\.0\.1:\d+)", line)
        if found:
            threading.Thread(target=proc.stdout.read, daemon=True, name="moto-output").start()
            atexit.register(_stop, proc)
            return found.group(1)
    raise RuntimeError(f"moto's S3 server exited ({proc.wait()}) before serving: {''.join(seen)}")


def _stop(proc: subprocess.Popen) -> None:
    proc.terminate()
    proc.wait()


@pytest.fixture(scope="session", name="s3_endpoint")
def s3_endpoint_fixture() -> str:
    return _server()


@pytest.fixture(name="s3")
def s3_fixture(s3_endpoint: str) -> S3:
    import boto3

    bucket = f"t-{uuid.uuid4().hex[:12]}"
    boto3.client(
        "s3",
        endpoint_url=s3_endpoint,
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
        region_name="us-east-1",
    ).create_bucket(Bucket=bucket)
    return S3(s3_endpoint, bucket)


def index_files(
    directory: Path, n_files: int, per_file: int, seed: int = 0, max_len: int = 30, dim: int = 2
) -> list[Path]:
    """``n_files`` HDF files of ``per_file`` sequences each; sequence ``i`` (global, in file
    order) has float32 frames ``[T, dim]`` all equal to ``i`` and tag ``utt-<i>``."""
    rng = np.random.default_rng(seed)
    paths = []
    for f in range(n_files):
        idx = range(f * per_file, (f + 1) * per_file)
        lengths = rng.integers(1, max_len + 1, size=per_file)
        part = sl.MemorySource(
            {"data": [np.full((int(t), dim), i, np.float32) for i, t in zip(idx, lengths)]},
            tags=[f"utt-{i}" for i in idx],
        )
        path = directory / f"part{f:03d}.hdf"
        sl.write_hdf(path, part)
        paths.append(path)
    return paths


def upload_corpus(
    s3: S3, tmp: Path, n_files: int = 4, per_file: int = 12, **kwargs: int
) -> list[str]:
    """Index files (``index_files``) uploaded to ``s3``'s bucket; returns their URLs."""
    local = tmp / "upload"
    local.mkdir(exist_ok=True)
    return [
        s3.upload(p, f"corpus/{p.name}") for p in index_files(local, n_files, per_file, **kwargs)
    ]
