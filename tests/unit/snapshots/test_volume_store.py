"""The volume snapshot store on a real temporary folder: complete and verified or nothing."""

from __future__ import annotations

import hashlib
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from sandfleet.errors import SnapshotCorruptError, SnapshotTooLargeError
from sandfleet.snapshots.store import SnapshotKey, SnapshotMissingError
from sandfleet.snapshots.volume import VolumeSnapshotStore

KEY = SnapshotKey("tenant-a", "session-1", "0b6f1e2a-1111-2222-3333-444455556666")


async def chunks_of(*parts: bytes) -> AsyncIterator[bytes]:
    for part in parts:
        yield part


async def read_all(store: VolumeSnapshotStore, key: SnapshotKey) -> bytes:
    stored = await store.stat(key)
    assert stored is not None
    return b"".join([chunk async for chunk in store.read(key, stored)])


async def test_a_put_is_read_back_whole_with_its_size_and_sha256(tmp_path: Path) -> None:
    store = VolumeSnapshotStore(tmp_path)
    stored = await store.put(KEY, chunks_of(b"abc", b"def" * 1000), limit_bytes=1 << 20)
    assert stored.size_bytes == 3003
    assert stored.sha256 == hashlib.sha256(b"abc" + b"def" * 1000).hexdigest()
    assert await read_all(store, KEY) == b"abc" + b"def" * 1000
    assert await store.list_namespace("tenant-a") == [await store.stat(KEY)]
    assert await store.list_namespace("tenant-b") == []
    assert (tmp_path / "tenant-a" / "session-1" / f"{KEY.uid}.tar").is_file()


async def test_a_snapshot_over_the_limit_stores_nothing(tmp_path: Path) -> None:
    store = VolumeSnapshotStore(tmp_path)
    with pytest.raises(SnapshotTooLargeError, match="limit of 10 bytes"):
        await store.put(KEY, chunks_of(b"x" * 8, b"y" * 8), limit_bytes=10)
    assert await store.stat(KEY) is None
    assert [p.name for p in (tmp_path / "tenant-a" / "session-1").iterdir()] == []


async def test_a_changed_archive_fails_its_read_and_stays_for_inspection(tmp_path: Path) -> None:
    store = VolumeSnapshotStore(tmp_path)
    stored = await store.put(KEY, chunks_of(b"original bytes"), limit_bytes=1 << 20)
    archive = tmp_path / KEY.relative_path
    archive.write_bytes(b"tampered bytes")
    with pytest.raises(SnapshotCorruptError, match="left in place"):
        _ = [chunk async for chunk in store.read(KEY, stored)]
    assert archive.read_bytes() == b"tampered bytes"


async def test_delete_removes_it_and_a_missing_snapshot_is_said_so(tmp_path: Path) -> None:
    store = VolumeSnapshotStore(tmp_path)
    stored = await store.put(KEY, chunks_of(b"bytes"), limit_bytes=100)
    await store.delete(KEY)
    await store.delete(KEY)
    assert await store.stat(KEY) is None
    with pytest.raises(SnapshotMissingError):
        _ = [chunk async for chunk in store.read(KEY, stored)]


def test_a_key_cannot_climb_out_of_its_namespace() -> None:
    for namespace, session, uid in [("../etc", "s", "1"), ("ns", "../x", "1"), ("ns", "s", "1/..")]:
        with pytest.raises(ValueError):
            SnapshotKey(namespace, session, uid)
