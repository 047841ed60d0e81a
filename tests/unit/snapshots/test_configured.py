"""The store the operator's settings choose, from the SANDFLEET_OPERATOR_SNAPSHOT_* variables
the chart sets; an incomplete choice stops the operator at start-up with a message."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from sandfleet.operator.settings import OperatorSettings
from sandfleet.snapshots.configured import snapshot_store_from_settings
from sandfleet.snapshots.s3 import S3SnapshotStore, sse_algorithm
from sandfleet.snapshots.volume import VolumeSnapshotStore


def test_the_default_is_the_volume_store_under_its_mount(monkeypatch: pytest.MonkeyPatch) -> None:
    assert snapshot_store_from_settings(OperatorSettings()) is None  # no mount: no store
    monkeypatch.setenv("SANDFLEET_OPERATOR_SNAPSHOT_DIR", "/mnt/snapshots")
    settings = OperatorSettings()
    assert settings.snapshot_store == "volume"
    assert settings.snapshot_limit_bytes == 1024**3
    store = snapshot_store_from_settings(settings)
    assert isinstance(store, VolumeSnapshotStore)
    assert store.root == Path("/mnt/snapshots")


def test_s3_settings_reach_the_store(monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in {
        "STORE": "s3",
        "LIMIT_BYTES": "5000000",
        "S3_ENDPOINT": "https://s3.internal:9000",
        "S3_BUCKET": "snapshots",
        "S3_PREFIX": "cluster-a/",
        "S3_REGION": "eu-west-1",
        "S3_SSE": "aws:kms",
        "S3_SSE_KMS_KEY_ID": "arn:aws:kms:eu-west-1:111122223333:key/abc",
    }.items():
        monkeypatch.setenv(f"SANDFLEET_OPERATOR_SNAPSHOT_{name}", value)
    settings = OperatorSettings()
    assert settings.snapshot_limit_bytes == 5_000_000
    store = snapshot_store_from_settings(settings)
    assert isinstance(store, S3SnapshotStore)
    location = store.location
    assert (location.endpoint, location.bucket, location.prefix, location.region) == (
        "https://s3.internal:9000",
        "snapshots",
        "cluster-a/",
        "eu-west-1",
    )
    assert (location.sse, location.sse_kms_key_id) == (
        "aws:kms",
        "arn:aws:kms:eu-west-1:111122223333:key/abc",
    )
    assert location.where == "s3://snapshots/cluster-a/ at https://s3.internal:9000"


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"snapshot_store": "s3"}, "needs snapshot_s3_bucket"),
        ({"snapshot_store": "gcs"}, "'volume' or 's3'"),
        ({"snapshot_s3_sse": "AES128"}, "snapshot_s3_sse"),
        (
            {"snapshot_s3_sse": "AES256", "snapshot_s3_sse_kms_key_id": "key"},
            "needs snapshot_s3_sse aws:kms",
        ),
        ({"snapshot_limit_bytes": 0}, "greater than or equal to 1"),
    ],
)
def test_an_incomplete_store_stops_the_operator_at_start_up(
    values: dict[str, object], message: str
) -> None:
    with pytest.raises(ValidationError, match=message):
        OperatorSettings(**values)  # type: ignore[arg-type]


def test_an_unknown_encryption_is_refused() -> None:
    assert sse_algorithm("AES256") == "AES256"
    with pytest.raises(ValueError, match="AES256, aws:kms"):
        sse_algorithm("aes256")
