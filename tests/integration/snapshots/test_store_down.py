"""A store that is down: every operation raises SnapshotStoreUnavailableError within seconds,
with a one-line message that says where and why (no traceback, no library dump). The S3
store's server is a real SeaweedFS stopped mid-test; the volume store's root is a path that
cannot be a folder (its parent is a file), as an unmounted or broken volume is."""

from __future__ import annotations

import hashlib
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from sandfleet.snapshots.s3 import S3SnapshotStore
from sandfleet.snapshots.store import (
    SnapshotKey,
    SnapshotStore,
    SnapshotStoreUnavailableError,
    StoredSnapshot,
)
from sandfleet.snapshots.volume import VolumeSnapshotStore
from tests.integration.snapshots.conftest import s3_location
from tests.support.seaweedfs import SeaweedServer, running_seaweed

pytestmark = pytest.mark.integration

KEY = SnapshotKey("tenant-a", "session-1", "0b6f1e2a-1111-2222-3333-444455556666")
DOWN_WITHIN_S = 60.0
"""The S3 store gives up after its retry timeout (3 s here); the bound is for a loaded box."""


async def chunks_of(*parts: bytes) -> AsyncIterator[bytes]:
    for part in parts:
        yield part


async def every_operation_fails(store: SnapshotStore, where: str) -> list[str]:
    """Each operation's message; asserts each is an unavailable error naming `where`."""
    expected = StoredSnapshot(KEY, 5, hashlib.sha256(b"bytes").hexdigest(), 0.0)
    attempts = {
        "put": lambda: store.put(KEY, chunks_of(b"bytes"), limit_bytes=100),
        "stat": lambda: store.stat(KEY),
        "delete": lambda: store.delete(KEY),
        "list": lambda: store.list_namespace(KEY.namespace),
    }
    messages = []
    for name, attempt in attempts.items():
        with pytest.raises(SnapshotStoreUnavailableError) as caught:
            await attempt()
        messages.append(f"{name}: {caught.value}")
    with pytest.raises(SnapshotStoreUnavailableError) as caught:
        _ = [chunk async for chunk in store.read(KEY, expected)]
    messages.append(f"read: {caught.value}")
    for message in messages:
        assert where in message, message
        assert "Traceback" not in message and "\n" not in message, message
    return messages


async def test_an_s3_store_whose_server_stopped_is_unavailable(tmp_path: Path) -> None:
    with running_seaweed(tmp_path / "seaweedfs") as server:
        store = S3SnapshotStore(s3_location(server, "down/"))
        stored = await store.put(KEY, chunks_of(b"bytes"), limit_bytes=100)
        assert await store.stat(KEY) == stored
        server.stop()
        started = time.monotonic()
        messages = await every_operation_fails(store, server.endpoint)
        assert time.monotonic() - started < DOWN_WITHIN_S
    assert all("the store failed" in message for message in messages), messages


async def test_a_volume_store_on_a_broken_mount_is_unavailable(tmp_path: Path) -> None:
    (tmp_path / "not-a-folder").write_text("a file where the mount should be")
    root = tmp_path / "not-a-folder" / "snapshots"
    messages = await every_operation_fails(VolumeSnapshotStore(root), str(root))
    assert messages


async def test_s3_credentials_the_server_refuses_are_said_so(seaweed: SeaweedServer) -> None:
    store = S3SnapshotStore(s3_location(seaweed, "creds/", secret_access_key="wrong" * 8))
    with pytest.raises(SnapshotStoreUnavailableError, match="refused the credentials"):
        await store.put(KEY, chunks_of(b"bytes"), limit_bytes=100)
    with pytest.raises(SnapshotStoreUnavailableError, match="refused the credentials"):
        await store.stat(KEY)
