"""Snapshots as files on a mounted volume: `<root>/<namespace>/<session>/<uid>.tar` with a
`.json` beside it holding size, sha256 and time.

The archive is written to a hidden temporary name, fsynced, read back and hashed again,
and only then renamed into place; the `.json` is written (atomically) last. So a tar
without its `.json` is an interrupted put and never counts as a snapshot, and a crash at
any step leaves the previous snapshot (if any) or nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import os
import time
import uuid
from collections.abc import AsyncIterable, AsyncIterator
from pathlib import Path
from typing import BinaryIO

from sandfleet.errors import SnapshotCorruptError
from sandfleet.snapshots.store import (
    ArchiveTally,
    SnapshotKey,
    SnapshotMissingError,
    SnapshotStoreUnavailableError,
    StoredSnapshot,
)

_CHUNK = 1 << 20


def _read_hashed(handle: BinaryIO, digest: hashlib._Hash) -> bytes:
    """The next chunk, hashed in the reading thread (sha256 releases the GIL on large
    buffers: the event loop is not held for it)."""
    chunk = handle.read(_CHUNK)
    digest.update(chunk)
    return chunk


class VolumeSnapshotStore:
    """A SnapshotStore on a local or mounted filesystem (the chart's PersistentVolumeClaim)."""

    def __init__(self, root: Path) -> None:
        self._root = root

    @property
    def root(self) -> Path:
        return self._root

    def _archive(self, key: SnapshotKey) -> Path:
        return self._root / key.relative_path

    def _meta(self, key: SnapshotKey) -> Path:
        return self._archive(key).with_suffix(".json")

    async def put(
        self, key: SnapshotKey, chunks: AsyncIterable[bytes], *, limit_bytes: int
    ) -> StoredSnapshot:
        archive = self._archive(key)
        partial = archive.with_name(f".{archive.name}.{uuid.uuid4().hex}.partial")
        try:
            await asyncio.to_thread(archive.parent.mkdir, parents=True, exist_ok=True)
            tally = ArchiveTally(limit_bytes)
            handle = await asyncio.to_thread(partial.open, "wb")
            try:
                async for chunk in chunks:
                    tally.add(chunk)
                    await asyncio.to_thread(handle.write, chunk)
                await asyncio.to_thread(_flush_and_sync, handle)
            finally:
                await asyncio.to_thread(handle.close)
            size, sha256 = tally.size_bytes, tally.sha256
            reread_size, reread_sha256 = await asyncio.to_thread(_hash_file, partial)
            if (reread_size, reread_sha256) != (size, sha256):
                raise SnapshotStoreUnavailableError(
                    f"the volume returned other bytes than were written for {key.relative_path}"
                )
            stored = StoredSnapshot(key, size, sha256, time.time())
            await asyncio.to_thread(os.replace, partial, archive)
            await asyncio.to_thread(_write_meta, self._meta(key), stored)
            return stored
        except OSError as error:
            raise SnapshotStoreUnavailableError(
                f"cannot write the snapshot {key.relative_path} under {self._root}: {error}"
            ) from error
        finally:
            await asyncio.to_thread(_remove_quietly, partial)

    async def read(self, key: SnapshotKey, expected: StoredSnapshot) -> AsyncIterator[bytes]:
        archive = self._archive(key)
        try:
            handle = await asyncio.to_thread(archive.open, "rb")
        except FileNotFoundError as error:
            raise SnapshotMissingError(f"no snapshot is stored at {archive}") from error
        except OSError as error:
            raise SnapshotStoreUnavailableError(f"cannot read {archive}: {error}") from error
        digest = hashlib.sha256()
        size = 0
        try:
            while chunk := await asyncio.to_thread(_read_hashed, handle, digest):
                size += len(chunk)
                yield chunk
        finally:
            await asyncio.to_thread(handle.close)
        if (size, digest.hexdigest()) != (expected.size_bytes, expected.sha256):
            raise SnapshotCorruptError(
                f"the snapshot {archive} has {size} bytes with sha256 {digest.hexdigest()}, "
                f"not the {expected.size_bytes} bytes with sha256 {expected.sha256} recorded "
                "when it was stored; it is left in place for inspection"
            )

    async def stat(self, key: SnapshotKey) -> StoredSnapshot | None:
        return await asyncio.to_thread(_read_meta, self._meta(key), key)

    async def delete(self, key: SnapshotKey) -> None:
        # The .json first: from then on the tar is an interrupted put, never a snapshot.
        try:
            await asyncio.to_thread(self._meta(key).unlink, missing_ok=True)
            await asyncio.to_thread(self._archive(key).unlink, missing_ok=True)
        except OSError as error:
            raise SnapshotStoreUnavailableError(
                f"cannot delete the snapshot {key.relative_path}: {error}"
            ) from error

    async def list_namespace(self, namespace: str) -> list[StoredSnapshot]:
        return await asyncio.to_thread(self._list_namespace, namespace)

    def _list_namespace(self, namespace: str) -> list[StoredSnapshot]:
        folder = self._root / SnapshotKey(namespace, "x", "0").namespace
        try:
            self._root.stat()  # a root not made yet holds nothing; one unreachable is down
        except FileNotFoundError:
            return []
        except OSError as error:
            raise SnapshotStoreUnavailableError(
                f"cannot list the snapshots under {self._root}: {error}"
            ) from error
        stored: list[StoredSnapshot] = []
        for meta in sorted(folder.glob("*/*.json")) if folder.is_dir() else []:
            try:
                key = SnapshotKey(namespace, meta.parent.name, meta.stem)
            except ValueError:
                continue
            found = _read_meta(meta, key)
            if found is not None:
                stored.append(found)
        return stored


def _remove_quietly(path: Path) -> None:
    """Clean-up after a put: a volume too broken to remove it has already failed the put."""
    with contextlib.suppress(OSError):
        path.unlink(missing_ok=True)


def _flush_and_sync(handle: BinaryIO) -> None:
    handle.flush()
    os.fsync(handle.fileno())


def _hash_file(path: Path) -> tuple[int, str]:
    digest = hashlib.sha256()
    size = 0
    with path.open("rb") as handle:
        while chunk := handle.read(_CHUNK):
            size += len(chunk)
            digest.update(chunk)
    return size, digest.hexdigest()


def _write_meta(path: Path, stored: StoredSnapshot) -> None:
    fields = {
        "size_bytes": stored.size_bytes,
        "sha256": stored.sha256,
        "stored_at": stored.stored_at,
    }
    temporary = path.with_name(f".{path.name}.{uuid.uuid4().hex}.partial")
    temporary.write_text(json.dumps(fields))
    os.replace(temporary, path)


def _read_meta(path: Path, key: SnapshotKey) -> StoredSnapshot | None:
    try:
        fields = json.loads(path.read_text())
        return StoredSnapshot(
            key, int(fields["size_bytes"]), str(fields["sha256"]), float(fields["stored_at"])
        )
    except FileNotFoundError:
        return None
    except OSError as error:
        raise SnapshotStoreUnavailableError(f"cannot read {path}: {error}") from error
    except (ValueError, KeyError, TypeError) as error:
        raise SnapshotCorruptError(f"the snapshot record {path} is unreadable: {error}") from error
