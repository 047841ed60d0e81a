"""A cluster snapshot is one tar archive: a first member with the session's state (its runtime
token and each bash session's working directory and exported environment), then the runtime's
SnapshotTree archive of the working tree as it came.

One archive, so the store verifies one size and one checksum for everything a resume needs,
and `tar tf` still reads it. The state member is split off again before the rest is streamed
into RestoreTree, so it never lands in the sandbox's tree.
"""

from __future__ import annotations

import json
import tarfile
import time
from collections.abc import AsyncIterable, AsyncIterator, Mapping
from typing import Any

from sandfleet.errors import SnapshotCorruptError

STATE_MEMBER = ".sandfleet-suspend-state.json"
STATE_VERSION = 1
_BLOCK = tarfile.BLOCKSIZE
_MAX_STATE_BYTES = 16 * 1024 * 1024
"""A state member larger than this is not one we wrote (the environments are small)."""


def state_member(state: Mapping[str, Any]) -> bytes:
    """The state as one USTAR member (header, JSON, padding to the block size)."""
    data = json.dumps({"version": STATE_VERSION, **state}, sort_keys=True).encode()
    info = tarfile.TarInfo(STATE_MEMBER)
    info.size = len(data)
    info.mode = 0o600
    info.mtime = int(time.time())
    header = info.tobuf(format=tarfile.USTAR_FORMAT, encoding="utf-8", errors="strict")
    return header + data + b"\0" * (-len(data) % _BLOCK)


async def with_state(state: Mapping[str, Any], tree: AsyncIterable[bytes]) -> AsyncIterator[bytes]:
    """The snapshot's chunks: the state member, then the working tree's archive."""
    yield state_member(state)
    async for chunk in tree:
        yield chunk


class _Buffered:
    """Reads exact byte counts off a chunk stream, then hands back what is left."""

    def __init__(self, chunks: AsyncIterator[bytes]) -> None:
        self._chunks = chunks
        self._buffer = bytearray()

    async def take(self, size: int) -> bytes:
        while len(self._buffer) < size:
            try:
                self._buffer += await anext(self._chunks)
            except StopAsyncIteration:
                raise SnapshotCorruptError(
                    "the snapshot ends inside its state member (truncated)"
                ) from None
        taken = bytes(self._buffer[:size])
        del self._buffer[:size]
        return taken

    async def rest(self) -> AsyncIterator[bytes]:
        if self._buffer:
            yield bytes(self._buffer)
            self._buffer.clear()
        async for chunk in self._chunks:
            yield chunk


async def split_state(
    chunks: AsyncIterator[bytes],
) -> tuple[dict[str, Any], AsyncIterator[bytes]]:
    """The state member's content and the rest of the archive (the working tree's tar).
    Raises SnapshotCorruptError when the archive does not start with a state we wrote."""
    reader = _Buffered(chunks)
    header = await reader.take(_BLOCK)
    try:
        info = tarfile.TarInfo.frombuf(header, encoding="utf-8", errors="strict")
    except (tarfile.HeaderError, UnicodeDecodeError) as exc:
        raise SnapshotCorruptError(f"the snapshot's first member is unreadable: {exc}") from None
    if info.name != STATE_MEMBER or not 0 < info.size <= _MAX_STATE_BYTES:
        raise SnapshotCorruptError(
            f"the snapshot does not start with {STATE_MEMBER} (found {info.name!r})"
        )
    data = await reader.take(info.size + (-info.size % _BLOCK))
    try:
        state = json.loads(data[: info.size])
    except ValueError as exc:
        raise SnapshotCorruptError(f"the snapshot's state is not JSON: {exc}") from None
    if not isinstance(state, dict) or state.get("version") != STATE_VERSION:
        raise SnapshotCorruptError("the snapshot's state has an unknown version")
    return state, reader.rest()
