"""What only the S3 store does, on a real SeaweedFS server: its object layout under the
prefix, server-side encryption passed through (the server answers with the algorithm, and
the bytes on its disk are not the snapshot's), and memory bounded by parts, not by size."""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
import urllib.request
from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path

import obstore
import pytest

from sandfleet.snapshots.s3 import S3Location, S3SnapshotStore, object_store
from sandfleet.snapshots.store import SnapshotKey
from tests.integration.snapshots.conftest import s3_location
from tests.support.seaweedfs import BUCKET, SeaweedServer

pytestmark = pytest.mark.integration

KEY = SnapshotKey("tenant-a", "session-1", "0b6f1e2a-1111-2222-3333-444455556666")


async def chunks_of(*parts: bytes) -> AsyncIterator[bytes]:
    for part in parts:
        yield part


async def test_objects_are_named_prefix_namespace_session_uid(seaweed: SeaweedServer) -> None:
    prefix = f"layout-{secrets.token_hex(4)}/snapshots/"
    store = S3SnapshotStore(s3_location(seaweed, prefix))
    await store.put(KEY, chunks_of(b"bytes"), limit_bytes=100)
    whole_bucket = object_store(s3_location(seaweed, ""))
    listed = await obstore.list(whole_bucket, prefix.rstrip("/")).collect_async()
    assert sorted(meta["path"] for meta in listed) == [
        f"{prefix}tenant-a/session-1/{KEY.uid}.json",
        f"{prefix}tenant-a/session-1/{KEY.uid}.tar",
    ]


def response_header(location: S3Location, name: str, header: str) -> str | None:
    """A header of a GET of the object, through a presigned URL (obstore's own reads do not
    show response headers)."""
    url = obstore.sign(object_store(location), "GET", name, timedelta(minutes=5))
    with urllib.request.urlopen(url, timeout=30) as response:  # loopback only
        response.read()
        value: str | None = response.headers.get(header)
        return value


def data_files_contain(folder: Path, marker: bytes) -> bool:
    """Whether any file the server keeps (volumes, filer store) holds `marker` in the clear."""
    return any(marker in path.read_bytes() for path in folder.rglob("*") if path.is_file())


@pytest.mark.parametrize("sse", ["", "AES256"])
async def test_server_side_encryption_is_passed_through(seaweed: SeaweedServer, sse: str) -> None:
    location = s3_location(seaweed, f"sse-{secrets.token_hex(4)}/", sse=sse)
    store = S3SnapshotStore(location)
    marker = b"sandfleet-plaintext-" + secrets.token_hex(8).encode()
    payload = (marker + os.urandom(4096)) * 64
    stored = await store.put(KEY, chunks_of(payload), limit_bytes=1 << 20)
    assert b"".join([chunk async for chunk in store.read(KEY, stored)]) == payload
    header = response_header(location, KEY.relative_path, "x-amz-server-side-encryption")
    on_disk = data_files_contain(seaweed.log.parent / "data", marker)
    if sse:
        assert header == sse
        assert not on_disk, "the server stored the snapshot's bytes unencrypted"
    else:
        assert header is None
        assert on_disk, "the control: without SSE the bytes are on the server's disk as sent"


PEAK_PROBE = """
import asyncio, os, resource, sys
from sandfleet.snapshots.s3 import S3Location, S3SnapshotStore
from sandfleet.snapshots.store import SnapshotKey

def peak_mib():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024

async def main():
    store = S3SnapshotStore(S3Location(
        bucket=sys.argv[1], prefix=sys.argv[2], endpoint=sys.argv[3],
        access_key_id=os.environ["PROBE_KEY"], secret_access_key=os.environ["PROBE_SECRET"],
    ))
    block = os.urandom(1 << 20)

    async def mebibytes(count):
        for _ in range(count):
            yield block

    await store.put(SnapshotKey("ns", "warm-up", "0"), mebibytes(1), limit_bytes=1 << 30)
    before = peak_mib()
    stored = await store.put(SnapshotKey("ns", "big", "1"), mebibytes(int(sys.argv[4])),
                             limit_bytes=1 << 30)
    async for _ in store.read(stored.key, stored):
        pass
    print(before, peak_mib(), stored.size_bytes)

asyncio.run(main())
"""


def test_a_big_snapshot_streams_through_bounded_memory(seaweed: SeaweedServer) -> None:
    """96 MiB up and read back in a fresh process: its peak RSS grows by a few parts
    (measured ~45 MiB), not by the snapshot's size."""
    mebibytes = 96
    probe = subprocess.run(
        [sys.executable, "-c", PEAK_PROBE, BUCKET, f"mem-{secrets.token_hex(4)}/",
         seaweed.endpoint, str(mebibytes)],
        env={**os.environ, "PROBE_KEY": seaweed.access_key, "PROBE_SECRET": seaweed.secret_key},
        capture_output=True, text=True, timeout=240, check=False,
    )  # fmt: skip
    assert probe.returncode == 0, probe.stderr[-3000:]
    before, after, size = (int(word) for word in probe.stdout.split())
    assert size == mebibytes << 20
    assert after - before < 80, f"peak RSS grew by {after - before} MiB for {mebibytes} MiB"
