"""The SnapshotStore contract, run against both stores: the volume store on a real folder and
the S3 store on a real SeaweedFS server. A snapshot is complete and verified or not there;
a refused or failed put stores nothing; a changed archive fails its read and stays; the
listing of a namespace shows that namespace only."""

from __future__ import annotations

import hashlib
import os
from collections.abc import AsyncIterator

import pytest

from sandfleet.errors import SnapshotCorruptError, SnapshotTooLargeError
from sandfleet.snapshots.store import (
    SnapshotKey,
    SnapshotMissingError,
    SnapshotStore,
    StoredSnapshot,
)
from tests.integration.snapshots.conftest import StoreUnderTest

pytestmark = pytest.mark.integration

KEY = SnapshotKey("tenant-a", "session-1", "0b6f1e2a-1111-2222-3333-444455556666")
OTHER_SESSION = SnapshotKey("tenant-a", "session-2", "7c0d2b3a-1111-2222-3333-444455556666")
OTHER_TENANT = SnapshotKey("tenant-b", "session-1", "0b6f1e2a-1111-2222-3333-444455556666")


async def chunks_of(*parts: bytes) -> AsyncIterator[bytes]:
    for part in parts:
        yield part


async def read_all(store: SnapshotStore, key: SnapshotKey, expected: StoredSnapshot) -> bytes:
    return b"".join([chunk async for chunk in store.read(key, expected)])


async def test_a_put_is_read_back_whole_with_its_size_and_sha256(
    under_test: StoreUnderTest,
) -> None:
    store = under_test.store
    # Several S3 parts (8 MiB each) and an uneven tail: the multipart path, not one PUT.
    payload = os.urandom(9 * 1024 * 1024 + 12345)
    pieces = [payload[i : i + 300_000] for i in range(0, len(payload), 300_000)]
    stored = await store.put(KEY, chunks_of(*pieces), limit_bytes=64 << 20)
    assert stored.size_bytes == len(payload)
    assert stored.sha256 == hashlib.sha256(payload).hexdigest()
    assert await store.stat(KEY) == stored
    assert await read_all(store, KEY, stored) == payload
    assert f"{KEY.relative_path}" in await under_test.names()


async def test_a_second_put_replaces_the_first(under_test: StoreUnderTest) -> None:
    store = under_test.store
    await store.put(KEY, chunks_of(b"first"), limit_bytes=100)
    second = await store.put(KEY, chunks_of(b"second"), limit_bytes=100)
    assert await store.stat(KEY) == second
    assert await read_all(store, KEY, second) == b"second"


async def test_a_snapshot_over_the_limit_stores_nothing(under_test: StoreUnderTest) -> None:
    store = under_test.store
    with pytest.raises(SnapshotTooLargeError, match="limit of 10 bytes"):
        await store.put(KEY, chunks_of(b"x" * 8, b"y" * 8), limit_bytes=10)
    assert await store.stat(KEY) is None
    assert await store.list_namespace(KEY.namespace) == []
    assert await under_test.names() == []


class SourceBrokeError(Exception):
    """What the archive's source (the runtime's SnapshotTree stream) raised."""


async def test_a_failing_source_stores_nothing(under_test: StoreUnderTest) -> None:
    """The archive stream breaks mid-way (the runtime died): its own error comes through."""

    async def broken() -> AsyncIterator[bytes]:
        yield b"a" * 1000
        raise SourceBrokeError("the runtime went away")

    with pytest.raises(SourceBrokeError, match="went away"):
        await under_test.store.put(KEY, broken(), limit_bytes=1 << 20)
    assert await under_test.store.stat(KEY) is None
    assert await under_test.names() == []


async def test_a_changed_archive_fails_its_read_and_stays(under_test: StoreUnderTest) -> None:
    store = under_test.store
    stored = await store.put(KEY, chunks_of(b"original bytes"), limit_bytes=1 << 20)
    await under_test.tamper(KEY, b"tampered bytes")
    with pytest.raises(SnapshotCorruptError, match="left in place for inspection") as caught:
        await read_all(store, KEY, stored)
    assert stored.sha256 in str(caught.value)
    assert KEY.relative_path in await under_test.names()


async def test_a_missing_snapshot_is_said_so(under_test: StoreUnderTest) -> None:
    store = under_test.store
    assert await store.stat(KEY) is None
    phantom = StoredSnapshot(KEY, 5, hashlib.sha256(b"bytes").hexdigest(), 0.0)
    with pytest.raises(SnapshotMissingError, match=KEY.uid):
        await read_all(store, KEY, phantom)


async def test_delete_removes_it_and_is_idempotent(under_test: StoreUnderTest) -> None:
    store = under_test.store
    stored = await store.put(KEY, chunks_of(b"bytes"), limit_bytes=100)
    await store.delete(KEY)
    await store.delete(KEY)
    await store.delete(OTHER_SESSION)  # never stored
    assert await store.stat(KEY) is None
    assert await under_test.names() == []
    with pytest.raises(SnapshotMissingError):
        await read_all(store, KEY, stored)


async def test_a_namespace_lists_its_own_snapshots_only(under_test: StoreUnderTest) -> None:
    store = under_test.store
    mine = [
        await store.put(KEY, chunks_of(b"one"), limit_bytes=100),
        await store.put(OTHER_SESSION, chunks_of(b"two"), limit_bytes=100),
    ]
    theirs = await store.put(OTHER_TENANT, chunks_of(b"three"), limit_bytes=100)
    assert await store.list_namespace("tenant-a") == mine
    assert await store.list_namespace("tenant-b") == [theirs]
    assert await store.list_namespace("tenant-c") == []
    # a namespace whose name starts like another's is another namespace
    assert await store.list_namespace("tenant") == []
    assert sorted(await under_test.names()) == sorted(
        name
        for key in (KEY, OTHER_SESSION, OTHER_TENANT)
        for name in (key.relative_path, key.relative_path.removesuffix(".tar") + ".json")
    )
