"""What `helm template` renders for the MCP endpoint (mcp.enabled): nothing by default; a
locked-down Deployment claiming through the gateway Service, whose ServiceAccount may only
review callers."""

from __future__ import annotations

from typing import Any

import pytest

from sandfleet.api import GATEWAY_PORT
from tests.cluster.harness.helm_cli import Helm, HelmError, only

MCP = "sandfleet-mcp"
ON = {"mcp": {"enabled": True, "pool": "py312"}}


def test_the_endpoint_is_off_by_default(helm: Helm) -> None:
    assert not [m for m in helm.template() if m["metadata"]["name"] == MCP]


def test_the_endpoint_claims_through_the_gateway_service_and_is_locked_down(helm: Helm) -> None:
    rendered = helm.template(values=ON)
    spec: dict[str, Any] = only(rendered, "Deployment", MCP)["spec"]["template"]["spec"]
    (container,) = spec["containers"]
    env = {item["name"]: item.get("value") for item in container["env"]}
    assert container["command"] == ["sandfleet-mcp-endpoint"]
    assert env["SANDFLEET_MCP_GATEWAY"] == (
        f"sandfleet-gateway.sandfleet-system.svc:{GATEWAY_PORT}"
    )
    assert env["SANDFLEET_MCP_POOL"] == "py312" and "SANDFLEET_MCP_NAMESPACE" not in env
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert container["securityContext"]["capabilities"]["drop"] == ["ALL"]
    assert spec["securityContext"]["runAsNonRoot"] is True
    service = only(rendered, "Service", MCP)
    assert service["spec"]["sessionAffinity"] == "ClientIP"
    # Where pods have no cluster DNS, the gateway's address is given.
    elsewhere = helm.template(values={"mcp": {**ON["mcp"], "gateway": "10.0.0.7:50052"}})
    spec = only(elsewhere, "Deployment", MCP)["spec"]["template"]["spec"]
    env = {item["name"]: item.get("value") for item in spec["containers"][0]["env"]}
    assert env["SANDFLEET_MCP_GATEWAY"] == "10.0.0.7:50052"


def test_the_endpoints_own_rights_are_the_two_reviews_and_nothing_else(helm: Helm) -> None:
    rendered = helm.template(values=ON)
    role = only(rendered, "ClusterRole", MCP)
    rules = {
        (group, resource, verb)
        for rule in role["rules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }
    assert rules == {
        ("authentication.k8s.io", "tokenreviews", "create"),
        ("authorization.k8s.io", "subjectaccessreviews", "create"),
    }
    binding = only(rendered, "ClusterRoleBinding", MCP)
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": MCP, "namespace": "sandfleet-system"}
    ]


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"gateway": {"enabled": False}}, "mcp.enabled needs gateway.enabled"),
        (
            {"gateway": {"tls": {"enabled": True, "secretName": "cert"}}},
            "does not support gateway.tls",
        ),
    ],
)
def test_the_endpoint_refuses_installs_it_cannot_serve(
    helm: Helm, values: dict[str, Any], message: str
) -> None:
    with pytest.raises(HelmError) as failure:
        helm.template(values={**ON, **values})
    assert message in str(failure.value)
