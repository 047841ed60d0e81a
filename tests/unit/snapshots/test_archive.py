"""The cluster snapshot's framing: a state member in front of the runtime's tree archive."""

from __future__ import annotations

import io
import tarfile
from collections.abc import AsyncIterator

import pytest

from sandfleet.errors import SnapshotCorruptError
from sandfleet.snapshots.archive import STATE_MEMBER, split_state, state_member, with_state


def tree_archive() -> bytes:
    """A real tar archive of one file, as SnapshotTree streams it (PAX)."""
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w|", format=tarfile.PAX_FORMAT) as archive:
        data = b"hello\n" * 1000
        info = tarfile.TarInfo("work/note.txt")
        info.size = len(data)
        archive.addfile(info, io.BytesIO(data))
    return out.getvalue()


async def chunks_of(data: bytes, size: int) -> AsyncIterator[bytes]:
    for start in range(0, len(data), size):
        yield data[start : start + size]


async def collect(chunks: AsyncIterator[bytes]) -> bytes:
    return b"".join([chunk async for chunk in chunks])


@pytest.mark.parametrize("chunk_size", [1, 100, 512, 4096, 1 << 20])
async def test_the_state_and_the_tree_come_apart_as_they_went_in(chunk_size: int) -> None:
    tree = tree_archive()
    state = {"token": "t0k", "shells": {"default": {"cwd": "/testbed/w", "env": {"S": "7"}}}}
    stored = await collect(with_state(state, chunks_of(tree, 700)))
    read, rest = await split_state(chunks_of(stored, chunk_size))
    assert read == {"version": 1, **state}
    assert await collect(rest) == tree


def test_the_stored_snapshot_is_a_tar_that_tar_reads() -> None:
    stored = state_member({"token": "x", "shells": {}}) + tree_archive()
    with tarfile.open(fileobj=io.BytesIO(stored), mode="r:") as archive:
        assert archive.getnames() == [STATE_MEMBER, "work/note.txt"]


@pytest.mark.parametrize(
    ("stored", "says"),
    [
        (b"", "truncated"),
        (state_member({"token": "x", "shells": {}})[:700], "truncated"),
        (b"\1" * 512, "unreadable"),
        (tree_archive(), "does not start with"),
    ],
    # Named ids: archives hold their mtime, and pytest-xdist needs the same ids in each worker.
    ids=["empty", "cut-state-member", "garbage", "tree-without-state"],
)
async def test_a_snapshot_without_our_state_is_corrupt(stored: bytes, says: str) -> None:
    with pytest.raises(SnapshotCorruptError, match=says):
        await split_state(chunks_of(stored, 256))
