"""Both snapshot stores behind one face for the contract tests: the volume store on a real
temporary folder and the S3 store on a real SeaweedFS server (tests/support/seaweedfs.py),
each with the two things a contract test does behind the store's back: change a stored
archive's bytes, and list every name the store keeps."""

from __future__ import annotations

import asyncio
import dataclasses
import secrets
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path

import pytest

from sandfleet.snapshots.s3 import S3Location, S3SnapshotStore, object_store
from sandfleet.snapshots.store import SnapshotKey, SnapshotStore
from sandfleet.snapshots.volume import VolumeSnapshotStore
from tests.support.seaweedfs import BUCKET, SeaweedServer, running_seaweed


@dataclasses.dataclass
class StoreUnderTest:
    kind: str
    store: SnapshotStore
    tamper: Callable[[SnapshotKey, bytes], Awaitable[None]]
    """Replace the stored archive's bytes, as a disk fault or an intruder would."""
    names: Callable[[], Awaitable[list[str]]]
    """Every file or object the store holds, relative to its root or prefix."""


def s3_location(server: SeaweedServer, prefix: str, **overrides: object) -> S3Location:
    fields: dict[str, object] = {
        "bucket": BUCKET,
        "prefix": prefix,
        "endpoint": server.endpoint,
        "access_key_id": server.access_key,
        "secret_access_key": server.secret_key,
        "retry_timeout_seconds": 3.0,
        **overrides,
    }
    return S3Location(**fields)  # type: ignore[arg-type]


@pytest.fixture(scope="session")
def seaweed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SeaweedServer]:
    """One server for the session's S3 tests; each test works under a prefix of its own."""
    with running_seaweed(tmp_path_factory.mktemp("seaweedfs")) as server:
        yield server


def volume_under_test(root: Path) -> StoreUnderTest:
    async def tamper(key: SnapshotKey, data: bytes) -> None:
        (root / key.relative_path).write_bytes(data)

    def files() -> list[str]:
        return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())

    async def names() -> list[str]:
        return await asyncio.to_thread(files)

    return StoreUnderTest("volume", VolumeSnapshotStore(root), tamper, names)


def s3_under_test(location: S3Location) -> StoreUnderTest:
    import obstore

    store = S3SnapshotStore(location)
    raw = object_store(location)  # the same bucket and prefix, without the store's checks

    async def tamper(key: SnapshotKey, data: bytes) -> None:
        await obstore.put_async(raw, key.relative_path, data)

    async def names() -> list[str]:
        listed = await obstore.list(raw).collect_async()
        return sorted(meta["path"] for meta in listed)

    return StoreUnderTest("s3", store, tamper, names)


@pytest.fixture(params=["volume", "s3"])
def under_test(request: pytest.FixtureRequest, tmp_path: Path) -> StoreUnderTest:
    if request.param == "volume":
        return volume_under_test(tmp_path / "snapshots")
    server: SeaweedServer = request.getfixturevalue("seaweed")
    return s3_under_test(s3_location(server, f"test-{secrets.token_hex(4)}/"))
