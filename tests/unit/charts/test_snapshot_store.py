"""The chart's `snapshots` values: a claim mounted into the operator by default, or an S3
bucket whose key reaches the operator from a Secret and whose endpoint its NetworkPolicy
admits; either way the operator's settings name the store and the size limit, and the
settings the chart renders are ones the operator accepts."""

from __future__ import annotations

from typing import Any

import pytest

from sandfleet.operator.settings import OperatorSettings
from sandfleet.snapshots.configured import snapshot_store_from_settings
from sandfleet.snapshots.s3 import S3SnapshotStore
from sandfleet.snapshots.volume import VolumeSnapshotStore
from tests.cluster.harness.helm_cli import Helm, HelmError, Manifest, find, only

OPERATOR = "sandfleet-operator"
S3_VALUES: dict[str, Any] = {
    "snapshots": {
        "store": "s3",
        "maxBytes": 5368709120,
        "s3": {
            "endpoint": "https://objects.example.com:9000",
            "bucket": "fleet-snapshots",
            "prefix": "cluster-a/",
            "region": "eu-west-1",
            "credentialsSecret": {"name": "snapshot-s3-key"},
            "sse": "aws:kms",
            "sseKmsKeyId": "alias/sandfleet",
        },
    }
}


def pod_spec(rendered: list[Manifest]) -> dict[str, Any]:
    spec: dict[str, Any] = only(rendered, "Deployment", OPERATOR)["spec"]["template"]["spec"]
    return spec


def store_from(rendered: list[Manifest], monkeypatch: pytest.MonkeyPatch) -> object:
    """The store the operator would build from the rendered ConfigMap."""
    for name, value in only(rendered, "ConfigMap", OPERATOR)["data"].items():
        monkeypatch.setenv(name, value)
    return snapshot_store_from_settings(OperatorSettings())


def test_the_default_is_a_claim_mounted_into_the_operator_only(
    helm: Helm, monkeypatch: pytest.MonkeyPatch
) -> None:
    rendered = helm.template()
    claim = only(rendered, "PersistentVolumeClaim", "sandfleet-snapshots")
    assert claim["spec"]["resources"]["requests"]["storage"] == "20Gi"
    assert "annotations" not in claim["metadata"]  # deleted with the release's sessions
    spec = pod_spec(rendered)
    volume = next(v for v in spec["volumes"] if v["name"] == "snapshots")
    assert volume["persistentVolumeClaim"] == {"claimName": "sandfleet-snapshots"}
    (container,) = spec["containers"]
    mount = next(m for m in container["volumeMounts"] if m["name"] == "snapshots")
    assert mount["mountPath"] == "/var/lib/sandfleet/snapshots"
    store = store_from(rendered, monkeypatch)
    assert isinstance(store, VolumeSnapshotStore)
    assert str(store.root) == "/var/lib/sandfleet/snapshots"
    # Tenant data: no other workload of the chart mounts the claim.
    for deployment in find(rendered, "Deployment"):
        if deployment["metadata"]["name"] != OPERATOR:
            volumes = deployment["spec"]["template"]["spec"].get("volumes", [])
            assert all(
                (v.get("persistentVolumeClaim") or {}).get("claimName") != "sandfleet-snapshots"
                for v in volumes
            )


def test_size_class_existing_claim_and_empty_dir(helm: Helm) -> None:
    sized = {"snapshots": {"volume": {"persistentVolumeClaim": {
        "size": "200Gi", "storageClassName": "fast", "keepOnUninstall": True,
    }}}}  # fmt: skip
    claim = only(helm.template(values=sized), "PersistentVolumeClaim", "sandfleet-snapshots")
    assert claim["spec"]["resources"]["requests"]["storage"] == "200Gi"
    assert claim["spec"]["storageClassName"] == "fast"
    assert claim["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"

    existing = {"snapshots": {"volume": {"type": "existingClaim", "existingClaim": "rwx"}}}
    rendered = helm.template(values=existing)
    assert not find(rendered, "PersistentVolumeClaim", "sandfleet-snapshots")
    volume = next(v for v in pod_spec(rendered)["volumes"] if v["name"] == "snapshots")
    assert volume["persistentVolumeClaim"] == {"claimName": "rwx"}

    rendered = helm.template(values={"snapshots": {"volume": {"type": "emptyDir"}}})
    volume = next(v for v in pod_spec(rendered)["volumes"] if v["name"] == "snapshots")
    assert volume["emptyDir"] == {"sizeLimit": "2Gi"}


def test_s3_reaches_the_operator_settings_key_and_network_policy(
    helm: Helm, monkeypatch: pytest.MonkeyPatch
) -> None:
    rendered = helm.template(values=S3_VALUES)
    assert not find(rendered, "PersistentVolumeClaim", "sandfleet-snapshots")
    spec = pod_spec(rendered)
    assert all(v["name"] != "snapshots" for v in spec["volumes"])
    settings = only(rendered, "ConfigMap", OPERATOR)["data"]
    assert settings["SANDFLEET_OPERATOR_SNAPSHOT_LIMIT_BYTES"] == "5368709120"
    (container,) = spec["containers"]
    env = {e["name"]: e for e in container["env"]}
    assert env["AWS_ACCESS_KEY_ID"]["valueFrom"]["secretKeyRef"] == {
        "name": "snapshot-s3-key",
        "key": "AWS_ACCESS_KEY_ID",
    }
    assert env["AWS_SECRET_ACCESS_KEY"]["valueFrom"]["secretKeyRef"]["key"] == (
        "AWS_SECRET_ACCESS_KEY"
    )
    egress = only(rendered, "NetworkPolicy", OPERATOR)["spec"]["egress"]
    assert egress[-1] == {"ports": [{"port": 443, "protocol": "TCP"}]}
    assert len(egress) == 5  # API server, DNS, sandboxes, model, the object store
    store = store_from(rendered, monkeypatch)
    assert isinstance(store, S3SnapshotStore)
    location = store.location
    assert location.where == "s3://fleet-snapshots/cluster-a/ at https://objects.example.com:9000"
    assert (location.sse, location.sse_kms_key_id) == ("aws:kms", "alias/sandfleet")


def test_without_a_secret_the_pod_identity_is_used(helm: Helm) -> None:
    values = {"snapshots": {"store": "s3", "s3": {"bucket": "fleet-snapshots"}}}
    (container,) = pod_spec(helm.template(values=values))["containers"]
    assert not {"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"} & {
        e["name"] for e in container["env"]
    }


@pytest.mark.parametrize(
    ("values", "where"),
    [
        ({"store": "s3"}, "/snapshots/s3/bucket"),
        ({"store": "gcs"}, "/snapshots/store"),
        ({"maxBytes": 0}, "/snapshots/maxBytes"),
        ({"s3": {"sse": "AES128"}}, "/snapshots/s3/sse"),
        ({"s3": {"endpoint": "s3.example.com"}}, "/snapshots/s3/endpoint"),
        ({"volume": {"type": "existingClaim"}}, "/snapshots/volume/existingClaim"),
    ],
)
def test_the_schema_refuses_an_incomplete_store(
    helm: Helm, values: dict[str, Any], where: str
) -> None:
    with pytest.raises(HelmError, match=where):
        helm.template(values={"snapshots": values})
