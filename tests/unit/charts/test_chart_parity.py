"""The chart installs the same API and the same operator permissions as manifests/."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from tests.cluster.harness.helm_cli import CHART_DIR, Helm, find, only
from tests.cluster.harness.layout import REPO_ROOT

MANIFESTS = REPO_ROOT / "manifests"
CLUSTER_ONLY_RESOURCES = {"customresourcedefinitions", "namespaces", "clusterkopfpeerings"}
"""Cluster-scoped resources: a namespace-scoped install cannot (and need not) be granted them."""
REVIEWS = {"tokenreviews", "subjectaccessreviews"}
"""The cluster-scoped review kinds of the gateway and the operator's HTTP port
(authentication and authorization questions)."""


def _files(folder: Path) -> dict[str, bytes]:
    return {path.name: path.read_bytes() for path in sorted(folder.glob("*.yaml"))}


def _manifest_rules(name: str = "cluster-role.yaml") -> list[dict[str, Any]]:
    role = yaml.safe_load((MANIFESTS / "rbac" / name).read_text())
    rules: list[dict[str, Any]] = role["rules"]
    return rules


def _gateway_manifest_rules() -> list[dict[str, Any]]:
    return _manifest_rules("gateway-cluster-role.yaml")


def test_the_charts_crds_are_byte_identical_to_manifests_crds() -> None:
    chart, manifests = _files(CHART_DIR / "crds"), _files(MANIFESTS / "crds")
    assert sorted(chart) == sorted(manifests)
    for name, content in manifests.items():
        assert chart[name] == content, f"charts/sandfleet/crds/{name} differs from manifests/crds"


def test_the_cluster_role_grants_exactly_the_rules_of_manifests_rbac(helm: Helm) -> None:
    rendered = helm.template()
    role = only(rendered, "ClusterRole", "sandfleet-system-sandfleet-operator")
    assert role["rules"] == _manifest_rules()
    binding = only(rendered, "ClusterRoleBinding", role["metadata"]["name"])
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "ClusterRole",
        "name": role["metadata"]["name"],
    }
    account = only(rendered, "ServiceAccount", "sandfleet-operator")
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "sandfleet-operator", "namespace": "sandfleet-system"}
    ]
    assert account["metadata"]["namespace"] == "sandfleet-system"
    assert not find(rendered, "Role", "sandfleet-operator")


def test_namespace_scoped_mode_grants_the_namespaced_rules_in_each_served_namespace_only(
    helm: Helm,
) -> None:
    served = ["team-a", "team-b"]
    rendered = helm.template(values={"operator": {"watchNamespaces": served}})
    # The only cluster-scoped grants are the gateway's and the operator's reviews (its HTTP
    # port's callers): TokenReview and SubjectAccessReview are cluster-scoped kinds, and
    # creating them gives access to no object. The metrics reader grants a non-resource URL.
    cluster_roles = {
        role["metadata"]["name"]: role["rules"]
        for role in find(rendered, "ClusterRole")
        if not role["metadata"]["name"].endswith("-metrics-reader")
    }
    assert sorted(cluster_roles) == [
        "sandfleet-system-sandfleet-gateway",
        "sandfleet-system-sandfleet-operator",
    ]
    assert cluster_roles["sandfleet-system-sandfleet-gateway"] == _gateway_manifest_rules()[:2]
    assert cluster_roles["sandfleet-system-sandfleet-operator"] == _manifest_rules()[-2:]
    for rules in cluster_roles.values():
        assert {r["resources"][0] for r in rules} == REVIEWS
    bindings = {b["roleRef"]["name"] for b in find(rendered, "ClusterRoleBinding")}
    assert bindings == set(cluster_roles)
    expected = []
    for rule in _manifest_rules():
        kept = [r for r in rule["resources"] if r not in CLUSTER_ONLY_RESOURCES | REVIEWS]
        if kept:
            expected.append({**rule, "resources": kept})
    roles = find(rendered, "Role", "sandfleet-operator")
    assert sorted(r["metadata"]["namespace"] for r in roles) == served
    for role in roles:
        assert role["rules"] == expected
    bindings = find(rendered, "RoleBinding", "sandfleet-operator")
    assert sorted(b["metadata"]["namespace"] for b in bindings) == served
    for binding in bindings:
        assert binding["roleRef"]["name"] == "sandfleet-operator"
        assert binding["subjects"] == [
            {
                "kind": "ServiceAccount",
                "name": "sandfleet-operator",
                "namespace": "sandfleet-system",
            }
        ]
    config = only(rendered, "ConfigMap", "sandfleet-operator")["data"]
    assert yaml.safe_load(config["SANDFLEET_OPERATOR_NAMESPACES"]) == served


def test_the_gateway_cluster_role_grants_exactly_the_rules_of_manifests_rbac(helm: Helm) -> None:
    rendered = helm.template()
    role = only(rendered, "ClusterRole", "sandfleet-system-sandfleet-gateway")
    assert role["rules"] == _gateway_manifest_rules()
    binding = only(rendered, "ClusterRoleBinding", role["metadata"]["name"])
    assert binding["roleRef"]["name"] == role["metadata"]["name"]
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "sandfleet-gateway", "namespace": "sandfleet-system"}
    ]
    assert only(rendered, "ServiceAccount", "sandfleet-gateway")


def test_namespace_scoped_mode_gives_the_gateway_a_role_per_served_namespace(helm: Helm) -> None:
    served = ["team-a", "team-b"]
    rendered = helm.template(values={"operator": {"watchNamespaces": served}})
    namespaced = [r for r in _gateway_manifest_rules() if r["resources"][0] not in REVIEWS]
    roles = find(rendered, "Role", "sandfleet-gateway")
    assert sorted(r["metadata"]["namespace"] for r in roles) == served
    for role in roles:
        assert role["rules"] == namespaced
    bindings = find(rendered, "RoleBinding", "sandfleet-gateway")
    assert sorted(b["metadata"]["namespace"] for b in bindings) == served
    for binding in bindings:
        assert binding["subjects"] == [
            {"kind": "ServiceAccount", "name": "sandfleet-gateway", "namespace": "sandfleet-system"}
        ]
