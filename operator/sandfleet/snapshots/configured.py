"""The snapshot store a component's settings choose (the operator's SANDFLEET_OPERATOR_SNAPSHOT_*,
set by the chart's `snapshots` values).

The settings are read through a Protocol, so this layer stays below the operator: any object
with these attributes will do (OperatorSettings has them).
"""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

from sandfleet.snapshots.store import SnapshotStore


class SnapshotStoreSettings(Protocol):
    """What choosing a store reads (the fields of the same names in OperatorSettings)."""

    @property
    def snapshot_store(self) -> str: ...
    @property
    def snapshot_dir(self) -> Path | None: ...
    @property
    def snapshot_s3_endpoint(self) -> str: ...
    @property
    def snapshot_s3_bucket(self) -> str: ...
    @property
    def snapshot_s3_prefix(self) -> str: ...
    @property
    def snapshot_s3_region(self) -> str: ...
    @property
    def snapshot_s3_sse(self) -> str: ...
    @property
    def snapshot_s3_sse_kms_key_id(self) -> str: ...


def snapshot_store_from_settings(settings: SnapshotStoreSettings) -> SnapshotStore | None:
    """The volume store on `snapshot_dir` (None without one: suspend is refused), or the S3
    store on `snapshot_s3_*` (credentials from the environment: AWS_ACCESS_KEY_ID /
    AWS_SECRET_ACCESS_KEY, which the chart fills from its Secret, or the pod's cloud
    identity). Raises ValueError for an unknown store or an incomplete S3 location: a start-up
    error, not a failed suspend later."""
    if settings.snapshot_store == "volume":
        from sandfleet.snapshots.volume import VolumeSnapshotStore

        return VolumeSnapshotStore(settings.snapshot_dir) if settings.snapshot_dir else None
    if settings.snapshot_store == "s3":
        # Imported here: the volume store's users never load the object-store client.
        from sandfleet.snapshots.s3 import S3Location, S3SnapshotStore, sse_algorithm

        return S3SnapshotStore(
            S3Location(
                bucket=settings.snapshot_s3_bucket,
                prefix=settings.snapshot_s3_prefix,
                endpoint=settings.snapshot_s3_endpoint,
                region=settings.snapshot_s3_region,
                sse=sse_algorithm(settings.snapshot_s3_sse),
                sse_kms_key_id=settings.snapshot_s3_sse_kms_key_id,
            )
        )
    raise ValueError(f"unknown snapshot store {settings.snapshot_store!r} (volume or s3)")
