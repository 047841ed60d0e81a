"""Snapshots as objects in S3-compatible storage: `<prefix><namespace>/<session>/<uid>.tar`
with a `<uid>.json` record beside it (size, sha256, time), the volume store's layout.

A put deletes the record first, streams the archive up as a multipart upload (at most a few
parts in memory), reads the stored object back and hashes it, and writes the record last.
So an archive without its record is an interrupted put and never counts as a snapshot; a
crash at any step leaves no snapshot under the key, which is safe because the operator only
gives a pod back once `put` has returned (until then the running sandbox holds the state).

The client is obstore (the Rust object_store crate): async, streaming, and it passes the
configured server-side encryption (SSE-S3 or SSE-KMS headers) on every upload.
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import json
import re
import time
from collections.abc import AsyncIterable, AsyncIterator, Awaitable
from datetime import timedelta
from typing import TYPE_CHECKING, Any, Literal, NoReturn

import obstore
from obstore.exceptions import BaseError, PermissionDeniedError, UnauthenticatedError
from obstore.store import S3Store

from sandfleet.errors import SnapshotCorruptError
from sandfleet.logs import get_logger
from sandfleet.snapshots.store import (
    ArchiveTally,
    SnapshotKey,
    SnapshotMissingError,
    SnapshotStoreUnavailableError,
    StoredSnapshot,
)

if TYPE_CHECKING:
    from obstore.store import ClientConfig, RetryConfig, S3Config

log = get_logger(__name__)

PART_BYTES = 8 * 1024 * 1024
"""Multipart part size: S3's minimum is 5 MiB; with two parts in flight a put holds about
three parts (24 MiB) in memory whatever the snapshot's size."""
_PARTS_IN_FLIGHT = 2
_RECORDS_READ_AT_ONCE = 16

SseAlgorithm = Literal["", "AES256", "aws:kms", "aws:kms:dsse"]
_SSE_ALGORITHMS: tuple[SseAlgorithm, ...] = ("", "AES256", "aws:kms", "aws:kms:dsse")


def sse_algorithm(name: str) -> SseAlgorithm:
    """`name` as an SseAlgorithm, else ValueError naming the accepted ones."""
    for known in _SSE_ALGORITHMS:
        if name == known:
            return known
    raise ValueError(f"unknown server-side encryption {name!r} (AES256, aws:kms, aws:kms:dsse)")


@dataclasses.dataclass(frozen=True, slots=True)
class S3Location:
    """Where and how to reach the bucket. Credentials left None come from the environment
    (AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY, which the chart sets from its Secret) or the
    pod's cloud identity (web identity token, instance metadata)."""

    bucket: str
    prefix: str = ""
    """Prepended to every object name (`snapshots/` -> `snapshots/<namespace>/...`)."""
    endpoint: str = ""
    """`http(s)://host:port` of an S3-compatible server; empty: AWS S3 in `region`."""
    region: str = "us-east-1"
    sse: SseAlgorithm = ""
    """Server-side encryption asked for on every upload: AES256 (SSE-S3), aws:kms (SSE-KMS),
    aws:kms:dsse; empty: the bucket's default."""
    sse_kms_key_id: str = ""
    """The KMS key for aws:kms / aws:kms:dsse (empty: the account's default key)."""
    access_key_id: str | None = dataclasses.field(default=None, repr=False)
    secret_access_key: str | None = dataclasses.field(default=None, repr=False)
    virtual_hosted_style: bool = False
    """`bucket.host` addressing instead of `host/bucket` (path style suits most servers)."""
    connect_timeout_seconds: float = 5.0
    retry_timeout_seconds: float = 15.0
    """How long a failing request is retried (with backoff) before the store counts as down."""

    def __post_init__(self) -> None:
        if not self.bucket:
            raise ValueError("an S3 snapshot store needs a bucket")
        if self.sse_kms_key_id and not self.sse.startswith("aws:kms"):
            raise ValueError("sse_kms_key_id needs sse aws:kms or aws:kms:dsse")

    @property
    def where(self) -> str:
        """`s3://bucket/prefix` at the endpoint, for messages."""
        at = f" at {self.endpoint}" if self.endpoint else f" in {self.region}"
        return f"s3://{self.bucket}/{self.prefix}{at}"


def object_store(location: S3Location) -> S3Store:
    """The obstore client for a location: bucket, prefix, credentials, encryption, and
    timeouts short enough that a store that is down fails a call in seconds."""
    config: S3Config = {"region": location.region}
    if location.endpoint:
        config["endpoint"] = location.endpoint
    if location.virtual_hosted_style:
        config["virtual_hosted_style_request"] = True
    if location.access_key_id is not None and location.secret_access_key is not None:
        config["access_key_id"] = location.access_key_id
        config["secret_access_key"] = location.secret_access_key
    if location.sse:
        config["server_side_encryption"] = location.sse
    if location.sse_kms_key_id:
        config["sse_kms_key_id"] = location.sse_kms_key_id
    client: ClientConfig = {
        "allow_http": location.endpoint.startswith("http://"),
        "connect_timeout": timedelta(seconds=location.connect_timeout_seconds),
    }
    retry: RetryConfig = {
        "max_retries": 4,
        "retry_timeout": timedelta(seconds=location.retry_timeout_seconds),
        "backoff": {
            "init_backoff": timedelta(milliseconds=100),
            "max_backoff": timedelta(seconds=2),
            "base": 2,
        },
    }
    return S3Store(
        location.bucket,
        prefix=location.prefix.strip("/") or None,
        config=config,
        client_options=client,
        retry_config=retry,
    )


class S3SnapshotStore:
    """A SnapshotStore in an S3-compatible bucket (AWS S3, SeaweedFS, Ceph RGW, GCS's XML
    API, ...)."""

    def __init__(self, location: S3Location) -> None:
        self._location = location
        self._store = object_store(location)

    @property
    def location(self) -> S3Location:
        return self._location

    @staticmethod
    def _archive(key: SnapshotKey) -> str:
        return key.relative_path

    @staticmethod
    def _record(key: SnapshotKey) -> str:
        return key.relative_path.removesuffix(".tar") + ".json"

    async def put(
        self, key: SnapshotKey, chunks: AsyncIterable[bytes], *, limit_bytes: int
    ) -> StoredSnapshot:
        record_name = self._record(key)
        await self._call(
            "replace", key, obstore.delete_async(self._store, record_name), record_name
        )
        size, sha256 = await self._upload(key, chunks, limit_bytes)
        stored = StoredSnapshot(key, size, sha256, time.time())
        await self._verify(stored)
        record = {"size_bytes": size, "sha256": sha256, "stored_at": stored.stored_at}
        await self._call(
            "write",
            key,
            obstore.put_async(
                self._store,
                record_name,
                json.dumps(record).encode(),
                attributes={"Content-Type": "application/json"},
                use_multipart=False,
            ),
            record_name,
        )
        log.info(
            "snapshot.stored",
            store=self._location.where,
            object=self._archive(key),
            size_bytes=size,
            sha256=sha256,
        )
        return stored

    async def _upload(
        self, key: SnapshotKey, chunks: AsyncIterable[bytes], limit_bytes: int
    ) -> tuple[int, str]:
        """Stream the archive up (multipart, PART_BYTES a part); its size and sha256. On any
        failure what was uploaded is removed and the cause raised: the limit, the store, or
        the source's own error."""
        tally = ArchiveTally(limit_bytes)
        stopped: list[Exception] = []  # what stopped the stream: the limit, or the source

        async def counted() -> AsyncIterator[bytes]:
            try:
                async for chunk in chunks:
                    tally.add(chunk)
                    yield chunk
            except Exception as error:
                stopped.append(error)
                raise

        try:
            await obstore.put_async(
                self._store,
                self._archive(key),
                counted(),
                attributes={"Content-Type": "application/x-tar"},
                use_multipart=True,
                chunk_size=PART_BYTES,
                max_concurrency=_PARTS_IN_FLIGHT,
            )
        except Exception as error:
            await self._discard(key)
            if stopped:  # obstore may wrap what the stream raised: that is the cause
                raise stopped[0] from None
            if isinstance(error, BaseError):
                self._unavailable("write", key, error)
            raise
        return tally.size_bytes, tally.sha256

    async def _verify(self, stored: StoredSnapshot) -> None:
        """Read the stored archive back and compare; a mismatch removes it (the sandbox is
        still running, so nothing is lost) and fails the put."""
        try:
            async for _ in self._stream(stored.key, stored):
                pass
        except SnapshotCorruptError as error:
            await self._discard(stored.key)
            raise SnapshotStoreUnavailableError(
                f"the store returned other bytes than were written for "
                f"{self._describe(stored.key)}: {error}"
            ) from None

    async def _discard(self, key: SnapshotKey) -> None:
        """Best effort: what a failed put leaves is removed; a store that is down keeps it
        (it never counts without its record)."""
        try:
            await obstore.delete_async(self._store, self._archive(key))
        except BaseError as error:
            log.warning("snapshot.discard_failed", object=self._describe(key), error=_first(error))

    def read(self, key: SnapshotKey, expected: StoredSnapshot) -> AsyncIterator[bytes]:
        return self._stream(key, expected)

    async def _stream(self, key: SnapshotKey, expected: StoredSnapshot) -> AsyncIterator[bytes]:
        digest = hashlib.sha256()
        size = 0
        try:
            result = await obstore.get_async(self._store, self._archive(key))
            async for chunk in result.stream(min_chunk_size=PART_BYTES):
                size += len(chunk)
                digest.update(chunk)
                yield bytes(chunk)
        except FileNotFoundError:  # obstore's not-found (NotFoundError is deprecated)
            raise SnapshotMissingError(f"no snapshot is stored at {self._describe(key)}") from None
        except BaseError as error:
            self._unavailable("read", key, error)
        if (size, digest.hexdigest()) != (expected.size_bytes, expected.sha256):
            raise SnapshotCorruptError(
                f"the snapshot {self._describe(key)} has {size} bytes with sha256 "
                f"{digest.hexdigest()}, not the {expected.size_bytes} bytes with sha256 "
                f"{expected.sha256} recorded when it was stored; it is left in place for "
                "inspection"
            )

    async def stat(self, key: SnapshotKey) -> StoredSnapshot | None:
        try:
            result = await obstore.get_async(self._store, self._record(key))
            body = bytes(await result.bytes_async())
        except FileNotFoundError:  # obstore's not-found (NotFoundError is deprecated)
            return None
        except BaseError as error:
            self._unavailable("read", key, error, self._record(key))
        return _parse_record(body, key, self._describe(key, self._record(key)))

    async def delete(self, key: SnapshotKey) -> None:
        # The record first: from then on the archive is an interrupted put, never a snapshot.
        for name in (self._record(key), self._archive(key)):
            await self._call("delete", key, obstore.delete_async(self._store, name), name)

    async def list_namespace(self, namespace: str) -> list[StoredSnapshot]:
        folder = SnapshotKey(namespace, "x", "0").namespace + "/"
        try:
            listed = await obstore.list(self._store, folder).collect_async()
        except BaseError as error:
            raise SnapshotStoreUnavailableError(
                f"cannot list the snapshots of namespace {namespace} in "
                f"{self._location.where}: {_why(error)}: {_first(error)}"
            ) from None
        keys = [key for meta in listed if (key := _record_key(namespace, meta["path"]))]
        gate = asyncio.Semaphore(_RECORDS_READ_AT_ONCE)

        async def one(key: SnapshotKey) -> StoredSnapshot | None:
            async with gate:
                return await self.stat(key)

        found = await asyncio.gather(*(one(key) for key in sorted(keys, key=_sort_key)))
        return [stored for stored in found if stored is not None]

    async def _call(
        self, action: str, key: SnapshotKey, call: Awaitable[Any], name: str | None = None
    ) -> None:
        try:
            await call
        except BaseError as error:
            self._unavailable(action, key, error, name)

    def _describe(self, key: SnapshotKey, name: str | None = None) -> str:
        prefix = self._location.prefix.strip("/")
        full = f"{prefix}/{name or self._archive(key)}" if prefix else name or self._archive(key)
        return f"s3://{self._location.bucket}/{full}"

    def _unavailable(
        self, action: str, key: SnapshotKey, error: BaseError, name: str | None = None
    ) -> NoReturn:
        where = self._location.endpoint or f"AWS S3 ({self._location.region})"
        raise SnapshotStoreUnavailableError(
            f"cannot {action} the snapshot {self._describe(key, name)} ({where}): {_why(error)}: "
            f"{_first(error)}"
        ) from None


def _why(error: BaseError) -> str:
    if isinstance(error, PermissionDeniedError | UnauthenticatedError):
        return "the store refused the credentials"
    return "the store failed"


def _first(error: BaseException) -> str:
    """obstore's message on one line, without the debug dump it appends, plus the innermost
    cause that dump names (e.g. "Connection refused")."""
    full = str(error)
    summary = " ".join(full.split("\n\nDebug source:", 1)[0].split()) or type(error).__name__
    causes = re.findall(r'message: "([^"]+)"', full)
    if causes and causes[-1] not in summary:
        summary += f" ({causes[-1]})"
    return summary[:600]


def _record_key(namespace: str, path: str) -> SnapshotKey | None:
    """The key of a `<namespace>/<session>/<uid>.json` record object, else None."""
    parts = path.split("/")
    if len(parts) < 3 or not parts[-1].endswith(".json"):
        return None
    session, uid = parts[-2], parts[-1].removesuffix(".json")
    if parts[-3] != namespace:
        return None
    try:
        return SnapshotKey(namespace, session, uid)
    except ValueError:
        return None


def _sort_key(key: SnapshotKey) -> tuple[str, str]:
    return key.session, key.uid


def _parse_record(body: bytes, key: SnapshotKey, where: str) -> StoredSnapshot:
    try:
        fields = json.loads(body)
        return StoredSnapshot(
            key, int(fields["size_bytes"]), str(fields["sha256"]), float(fields["stored_at"])
        )
    except (ValueError, KeyError, TypeError) as error:
        raise SnapshotCorruptError(f"the snapshot record {where} is unreadable: {error}") from None
