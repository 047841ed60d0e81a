"""The install notes check the trajectory store's StorageClass against the real cluster: a
claim that would stay Pending (no default class, or a named class the cluster lacks) gets a
WARNING at `helm install` time, since the operator pod would otherwise never be scheduled
with nothing saying why. `helm install --dry-run=server` renders the notes with the chart's
`lookup` against the test cluster (which has no StorageClass of its own)."""

from __future__ import annotations

import secrets
from collections.abc import Iterator

import pytest

from tests.cluster.harness.cluster_access import ClusterUnderTest, unavailable
from tests.cluster.harness.helm_cli import CHART_DIR, Helm, helm_binary_path, missing_helm_reason
from tests.cluster.harness.kube_api import KubeApi

pytestmark = pytest.mark.cluster

CLASSES = "/apis/storage.k8s.io/v1/storageclasses"
NO_DEFAULT = "WARNING: the cluster has no default StorageClass"


@pytest.fixture(scope="module")
def helm(cluster_under_test: ClusterUnderTest, tmp_path_factory: pytest.TempPathFactory) -> Helm:
    reason = missing_helm_reason()
    if reason is not None:
        unavailable(reason)
    return Helm(
        helm_binary_path(),
        tmp_path_factory.mktemp("helm"),
        kubeconfig=cluster_under_test.kubeconfig,
    )


def install_notes(helm: Helm, namespace: str, *settings: str) -> str:
    """The notes of a server-side dry-run install (lookups hit the cluster; nothing is made).
    No default template: a dry run needs no CRDs then."""
    args = ["install", "notes-probe", str(CHART_DIR), "--namespace", namespace,
            "--dry-run=server", "--skip-crds", "--set", "template.create=false"]  # fmt: skip
    for setting in settings:
        args += ["--set", setting]
    output = helm.run(*args)
    return output[output.index("NOTES:") :]


@pytest.fixture
def default_class(kube: KubeApi) -> Iterator[str]:
    """A StorageClass marked default (provisioning nothing; only the notes read it)."""
    name = f"sf-notes-{secrets.token_hex(3)}"
    body = {
        "apiVersion": "storage.k8s.io/v1",
        "kind": "StorageClass",
        "metadata": {
            "name": name,
            "annotations": {"storageclass.kubernetes.io/is-default-class": "true"},
        },
        "provisioner": "example.com/none",
    }
    created = kube.request_sync("POST", CLASSES, body)
    assert created.status == 201, created.body
    yield name
    kube.request_sync("DELETE", f"{CLASSES}/{name}")


def test_a_cluster_without_a_default_storage_class_gets_a_warning(
    helm: Helm, kube: KubeApi, namespace: str
) -> None:
    classes = kube.request_sync("GET", CLASSES).body["items"]
    defaults = [c for c in classes if (c["metadata"].get("annotations") or {}).get(
        "storageclass.kubernetes.io/is-default-class") == "true"]  # fmt: skip
    if defaults:
        pytest.skip(f"this cluster has a default StorageClass: {defaults[0]['metadata']['name']}")

    notes = install_notes(helm, namespace)
    trial = install_notes(helm, namespace, "trajectoryStore.type=emptyDir")

    assert NO_DEFAULT in notes
    assert "notes-probe-sandfleet-trajectories" in notes
    assert "storageClassName" in notes and "emptyDir" in notes  # the ways out
    assert NO_DEFAULT not in trial  # an emptyDir store needs no class


def test_a_default_class_silences_it_and_a_missing_named_class_is_named(
    helm: Helm, namespace: str, default_class: str
) -> None:
    with_default = install_notes(helm, namespace)
    named = install_notes(
        helm, namespace, f"trajectoryStore.persistentVolumeClaim.storageClassName={default_class}"
    )
    missing = install_notes(
        helm, namespace, "trajectoryStore.persistentVolumeClaim.storageClassName=no-such-class"
    )

    assert "WARNING" not in with_default
    assert "WARNING" not in named
    assert 'WARNING: the cluster has no StorageClass "no-such-class"' in missing
