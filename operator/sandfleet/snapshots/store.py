"""The snapshot store seam: how the operator saves, verifies, reads and deletes the archive
a suspended session's files were packed into (the runtime's SnapshotTree tar stream).

Snapshots are tenant data. A key is (namespace, session name, session uid): the uid keeps a
session re-created under the same name from ever reading its predecessor's files, and the
namespace is the first part of every stored path or object name, so a store can be scoped
(and listed, and swept) per tenant.
"""

from __future__ import annotations

import dataclasses
import hashlib
import re
from collections.abc import AsyncIterable, AsyncIterator
from typing import Protocol

from sandfleet.errors import SnapshotCorruptError, SnapshotTooLargeError, SuspendError

_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$")
_UID = re.compile(r"^[0-9a-fA-F-]{1,64}$")


class SnapshotStoreUnavailableError(SuspendError):
    """The store could not be written or read (down, full, refused the credentials); a
    suspend that meets it leaves the sandbox running."""


class SnapshotMissingError(SnapshotCorruptError):
    """No snapshot is stored under the key (never written, or deleted)."""


@dataclasses.dataclass(frozen=True, slots=True)
class SnapshotKey:
    """Which session's snapshot: validated so no part can climb out of its namespace."""

    namespace: str
    session: str
    uid: str

    def __post_init__(self) -> None:
        if not _DNS_LABEL.match(self.namespace):
            raise ValueError(f"not a namespace name: {self.namespace!r}")
        if not _DNS_SUBDOMAIN.match(self.session):
            raise ValueError(f"not a session name: {self.session!r}")
        if not _UID.match(self.uid):
            raise ValueError(f"not a session uid: {self.uid!r}")

    @property
    def relative_path(self) -> str:
        """`<namespace>/<session>/<uid>.tar`: the file or object name under the store's root."""
        return f"{self.namespace}/{self.session}/{self.uid}.tar"


@dataclasses.dataclass(frozen=True, slots=True)
class StoredSnapshot:
    """A complete, verified snapshot: what the session's status records about it."""

    key: SnapshotKey
    size_bytes: int
    sha256: str
    stored_at: float
    """Seconds since the epoch when the store finished writing it."""


class ArchiveTally:
    """The size and sha256 of an archive as it streams into a store; past the limit it
    refuses the chunk, so no store ever holds more than the limit."""

    def __init__(self, limit_bytes: int) -> None:
        self._limit_bytes = limit_bytes
        self._digest = hashlib.sha256()
        self.size_bytes = 0

    def add(self, chunk: bytes) -> None:
        self.size_bytes += len(chunk)
        if self.size_bytes > self._limit_bytes:
            raise SnapshotTooLargeError(
                f"the snapshot exceeds the limit of {self._limit_bytes} bytes"
            )
        self._digest.update(chunk)

    @property
    def sha256(self) -> str:
        return self._digest.hexdigest()


class SnapshotStore(Protocol):
    """A place for snapshots. Every method is safe to retry; none leaves a partial snapshot
    visible under a key (a put is complete and verified, or nothing is stored)."""

    async def put(
        self, key: SnapshotKey, chunks: AsyncIterable[bytes], *, limit_bytes: int
    ) -> StoredSnapshot:
        """Store the archive, replacing any snapshot under key; computes size and sha256 as it
        writes and verifies the stored copy against them before returning.

        Raises SnapshotTooLargeError past limit_bytes (nothing stored) and
        SnapshotStoreUnavailableError when the store fails.
        """
        ...

    def read(self, key: SnapshotKey, expected: StoredSnapshot) -> AsyncIterator[bytes]:
        """The archive's bytes in chunks; raises SnapshotMissingError when nothing is stored and
        SnapshotCorruptError at the end of a read whose size or sha256 differ from expected."""
        ...

    async def stat(self, key: SnapshotKey) -> StoredSnapshot | None:
        """The stored snapshot under key, or None."""
        ...

    async def delete(self, key: SnapshotKey) -> None:
        """Remove the snapshot under key; nothing stored is not an error."""
        ...

    async def list_namespace(self, namespace: str) -> list[StoredSnapshot]:
        """Every snapshot stored for one namespace (for sweeping and the bytes-stored metric)."""
        ...
