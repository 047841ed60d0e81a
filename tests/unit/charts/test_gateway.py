"""What `helm template` renders for the gateway: its locked-down Deployment, exactly its RBAC,
the session key shared with the operator, quotas, TLS, Ingress, and nothing when it is off."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest

from sandfleet.api import GATEWAY_PORT, RUNTIME_PORT
from tests.cluster.harness.helm_cli import Helm, HelmError, Manifest, find, only

GATEWAY = "sandfleet-gateway"
OPERATOR = "sandfleet-operator"
KEY_SECRET = "sandfleet-session-key"
KEY_DIR = "/etc/sandfleet/session-key"
GATEWAY_RULES = {
    ("authentication.k8s.io", "tokenreviews", "create"),
    ("authorization.k8s.io", "subjectaccessreviews", "create"),
    *(("", "pods", verb) for verb in ("get", "list", "watch", "patch", "delete")),
    *(
        ("sandfleet.dev", "sandboxsessions", verb)
        for verb in ("get", "list", "watch", "create", "patch", "delete")
    ),
    *(
        ("sandfleet.dev", resource, verb)
        for resource in ("sandboxpools", "sandboxtemplates")
        for verb in ("get", "list", "watch")
    ),
    ("", "secrets", "get"),
}
"""The brief's least-privilege list: nothing more (no pod create, no Secret list or create)."""


def _pod_spec(rendered: list[Manifest], name: str = GATEWAY) -> dict[str, Any]:
    spec: dict[str, Any] = only(rendered, "Deployment", name)["spec"]["template"]["spec"]
    return spec


def _settings(rendered: list[Manifest], name: str = GATEWAY) -> dict[str, str]:
    data: dict[str, str] = only(rendered, "ConfigMap", name)["data"]
    return data


def _flat_rules(role: Manifest) -> list[tuple[str, str, str]]:
    """(group, resource, verb) of every resource rule; nonResourceURLs rules (the metrics
    reader's) name no resource and are left out."""
    return [
        (group, resource, verb)
        for rule in role["rules"]
        for group in rule.get("apiGroups", [])
        for resource in rule.get("resources", [])
        for verb in rule["verbs"]
    ]


def _key_volume(spec: dict[str, Any]) -> dict[str, Any]:
    volume: dict[str, Any] = next(v for v in spec["volumes"] if v["name"] == "session-key")
    return volume


def _mount(spec: dict[str, Any], name: str) -> dict[str, Any]:
    mounts = spec["containers"][0]["volumeMounts"]
    mount: dict[str, Any] = next(m for m in mounts if m["name"] == name)
    return mount


def test_the_gateway_runs_sandfleet_gateway_from_the_operator_image_locked_down(
    helm: Helm,
) -> None:
    rendered = helm.template()
    deployment = only(rendered, "Deployment", GATEWAY)
    assert deployment["spec"]["replicas"] == 2
    spec = _pod_spec(rendered)
    container = spec["containers"][0]
    operator = _pod_spec(rendered, OPERATOR)["containers"][0]
    assert container["image"] == operator["image"]
    assert container["command"] == ["sandfleet-gateway"]
    assert spec["serviceAccountName"] == GATEWAY
    # Its own token authenticates its TokenReviews; only sandbox pods go without one.
    assert spec["automountServiceAccountToken"] is True
    assert spec["securityContext"]["runAsNonRoot"] is True
    assert spec["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert container["securityContext"] == {
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "capabilities": {"drop": ["ALL"]},
    }
    assert {"name": "grpc", "containerPort": GATEWAY_PORT, "protocol": "TCP"} in container["ports"]
    assert {"name": "metrics", "containerPort": 9090, "protocol": "TCP"} in container["ports"]
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "metrics"}
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "metrics"}
    replica = {"fieldRef": {"fieldPath": "metadata.name"}}
    assert {"name": "SANDFLEET_GATEWAY_REPLICA", "valueFrom": replica} in container["env"]
    assert container["envFrom"] == [{"configMapRef": {"name": GATEWAY}}]
    settings = _settings(rendered)
    assert settings["SANDFLEET_GATEWAY_PORT"] == str(GATEWAY_PORT)
    assert settings["SANDFLEET_GATEWAY_HTTP_PORT"] == "9090"
    grace = int(settings["SANDFLEET_GATEWAY_SHUTDOWN_GRACE_SECONDS"])
    assert 0 < grace < spec["terminationGracePeriodSeconds"]
    assert "SANDFLEET_GATEWAY_NAMESPACES" not in settings  # every namespace, as the operator


def test_the_image_and_command_can_be_set_apart_from_the_operators(helm: Helm) -> None:
    values = {
        "operator": {"image": {"repository": "registry.example/op", "tag": "1.2.3"}},
        "gateway": {"command": ["python", "-m", "sandfleet.gateway"]},
    }
    container = _pod_spec(helm.template(values=values))["containers"][0]
    assert container["image"] == "registry.example/op:1.2.3"
    assert container["command"] == ["python", "-m", "sandfleet.gateway"]
    values = {"gateway": {"image": {"repository": "registry.example/gw", "tag": "9"}}}
    container = _pod_spec(helm.template(values=values))["containers"][0]
    assert container["image"] == "registry.example/gw:9"


def test_replicas_spread_softly_and_a_budget_exists_only_above_one(helm: Helm) -> None:
    rendered = helm.template()
    spec = _pod_spec(rendered)
    selector = only(rendered, "Deployment", GATEWAY)["spec"]["selector"]["matchLabels"]
    assert selector["app.kubernetes.io/name"] == "sandfleet-gateway"
    (spread,) = spec["topologySpreadConstraints"]
    assert spread["whenUnsatisfiable"] == "ScheduleAnyway"
    assert spread["labelSelector"]["matchLabels"] == selector
    (preferred,) = spec["affinity"]["podAntiAffinity"][
        "preferredDuringSchedulingIgnoredDuringExecution"
    ]
    assert preferred["podAffinityTerm"]["labelSelector"]["matchLabels"] == selector
    assert (
        "requiredDuringSchedulingIgnoredDuringExecution" not in spec["affinity"]["podAntiAffinity"]
    )
    budget = only(rendered, "PodDisruptionBudget", GATEWAY)
    assert budget["spec"] == {"maxUnavailable": 1, "selector": {"matchLabels": selector}}
    assert not find(
        helm.template(values={"gateway": {"replicas": 1}}), "PodDisruptionBudget", GATEWAY
    )


def test_the_gateway_role_grants_exactly_what_it_calls(helm: Helm) -> None:
    role = only(helm.template(), "ClusterRole", "sandfleet-system-sandfleet-gateway")
    granted = _flat_rules(role)
    assert len(granted) == len(set(granted))
    assert set(granted) == GATEWAY_RULES


def test_namespace_scoped_mode_splits_the_rules_into_reviews_and_roles(helm: Helm) -> None:
    served = ["team-a", "team-b"]
    rendered = helm.template(values={"operator": {"watchNamespaces": served}})
    review = only(rendered, "ClusterRole", "sandfleet-system-sandfleet-gateway")
    roles = find(rendered, "Role", GATEWAY)
    assert sorted(r["metadata"]["namespace"] for r in roles) == served
    reviews = {r for r in GATEWAY_RULES if r[1] in {"tokenreviews", "subjectaccessreviews"}}
    assert set(_flat_rules(review)) == reviews
    for role in roles:
        assert set(_flat_rules(role)) == GATEWAY_RULES - reviews
    assert json.loads(_settings(rendered)["SANDFLEET_GATEWAY_NAMESPACES"]) == served


def test_the_session_key_is_one_secret_mounted_read_only_into_the_operator_and_the_gateway(
    helm: Helm,
) -> None:
    rendered = helm.template()
    secret = only(rendered, "Secret", KEY_SECRET)
    key = base64.b64decode(secret["data"]["session-key"])
    assert len(key) >= 32
    assert only(helm.template(), "Secret", KEY_SECRET)["data"] != secret["data"]  # random
    for name, setting in [
        (GATEWAY, "SANDFLEET_GATEWAY_SESSION_KEY_FILE"),
        (OPERATOR, "SANDFLEET_OPERATOR_SESSION_KEY_FILE"),
    ]:
        spec = _pod_spec(rendered, name)
        volume = _key_volume(spec)
        assert volume["secret"]["secretName"] == KEY_SECRET
        assert volume["secret"]["items"] == [{"key": "session-key", "path": "session-key"}]
        mount = _mount(spec, "session-key")
        assert mount == {"name": "session-key", "mountPath": KEY_DIR, "readOnly": True}
        assert _settings(rendered, name)[setting] == f"{KEY_DIR}/session-key"


def test_an_existing_session_key_secret_is_used_and_none_is_created(helm: Helm) -> None:
    rendered = helm.template(values={"sessionKey": {"existingSecret": "fleet-key"}})
    assert not find(rendered, "Secret")
    for name in (GATEWAY, OPERATOR):
        assert _key_volume(_pod_spec(rendered, name))["secret"]["secretName"] == "fleet-key"


def test_the_operator_admits_the_gateways_pods_by_their_selector_labels(helm: Helm) -> None:
    rendered = helm.template(release="prod", namespace="platform")
    labels = json.loads(
        _settings(rendered, "prod-sandfleet-operator")["SANDFLEET_OPERATOR_GATEWAY_POD_LABELS"]
    )
    deployment = only(rendered, "Deployment", "prod-sandfleet-gateway")
    assert labels == deployment["spec"]["selector"]["matchLabels"]
    assert labels.items() <= deployment["spec"]["template"]["metadata"]["labels"].items()
    assert labels["app.kubernetes.io/name"] == "sandfleet-gateway"


def test_quotas_reach_the_gateways_settings(helm: Helm) -> None:
    assert _settings(helm.template())["SANDFLEET_GATEWAY_QUOTA_DEFAULT"] == "0"
    values = {"gateway": {"quotas": {"default": 10, "namespaces": {"team-a": 25, "team-b": 0}}}}
    settings = _settings(helm.template(values=values))
    assert settings["SANDFLEET_GATEWAY_QUOTA_DEFAULT"] == "10"
    assert json.loads(settings["SANDFLEET_GATEWAY_QUOTAS"]) == {"team-a": 25, "team-b": 0}


def test_the_quota_ledger_is_leases_of_the_release_namespace_only(helm: Helm) -> None:
    rendered = helm.template(values={"operator": {"watchNamespaces": ["team-a"]}})
    assert _settings(rendered)["SANDFLEET_GATEWAY_QUOTA_LEDGER_NAMESPACE"] == "sandfleet-system"
    role = only(rendered, "Role", f"{GATEWAY}-quota-ledger")
    assert role["metadata"]["namespace"] == "sandfleet-system"
    assert _flat_rules(role) == [
        ("coordination.k8s.io", "leases", verb) for verb in ("get", "create", "update")
    ]
    binding = only(rendered, "RoleBinding", f"{GATEWAY}-quota-ledger")
    assert binding["roleRef"]["name"] == role["metadata"]["name"]
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": GATEWAY, "namespace": "sandfleet-system"}
    ]
    # No lease rights anywhere else (tenants' namespaces included).
    others = [r for r in find(rendered, "Role") if r is not role] + find(rendered, "ClusterRole")
    assert not any(resource == "leases" for r in others for _, resource, _ in _flat_rules(r))


def test_tls_mounts_the_certificate_secret_and_names_its_files(helm: Helm) -> None:
    assert "SANDFLEET_GATEWAY_TLS_CERT_FILE" not in _settings(helm.template())
    values = {"gateway": {"tls": {"enabled": True, "secretName": "gateway-cert"}}}
    rendered = helm.template(values=values)
    spec = _pod_spec(rendered)
    volume = next(v for v in spec["volumes"] if v["name"] == "tls")
    assert volume["secret"]["secretName"] == "gateway-cert"
    mount = _mount(spec, "tls")
    assert mount["readOnly"] is True
    settings = _settings(rendered)
    assert settings["SANDFLEET_GATEWAY_TLS_CERT_FILE"] == f"{mount['mountPath']}/tls.crt"
    assert settings["SANDFLEET_GATEWAY_TLS_KEY_FILE"] == f"{mount['mountPath']}/tls.key"
    with pytest.raises(HelmError) as failure:
        helm.template(values={"gateway": {"tls": {"enabled": True}}})
    assert "/gateway/tls/secretName" in failure.value.stderr


def test_the_service_and_the_ingress_reach_the_grpc_port(helm: Helm) -> None:
    rendered = helm.template()
    service = only(rendered, "Service", GATEWAY)
    assert service["spec"]["type"] == "ClusterIP"
    assert {"name": "grpc", "port": GATEWAY_PORT, "targetPort": "grpc", "protocol": "TCP"} in (
        service["spec"]["ports"]
    )
    assert not find(rendered, "Ingress")
    values = {
        "gateway": {
            "service": {"type": "NodePort", "nodePort": 30052},
            "ingress": {
                "enabled": True,
                "className": "nginx",
                "host": "sandboxes.example.com",
                "annotations": {"nginx.ingress.kubernetes.io/backend-protocol": "GRPC"},
                "tls": {"secretName": "sandboxes-tls"},
            },
        }
    }
    rendered = helm.template(values=values)
    grpc = only(rendered, "Service", GATEWAY)["spec"]["ports"][0]
    assert grpc["nodePort"] == 30052
    ingress = only(rendered, "Ingress", GATEWAY)
    assert ingress["spec"]["ingressClassName"] == "nginx"
    assert ingress["spec"]["tls"] == [
        {"hosts": ["sandboxes.example.com"], "secretName": "sandboxes-tls"}
    ]
    (rule,) = ingress["spec"]["rules"]
    assert rule["host"] == "sandboxes.example.com"
    backend = rule["http"]["paths"][0]["backend"]["service"]
    assert backend == {"name": GATEWAY, "port": {"name": "grpc"}}
    annotations = ingress["metadata"]["annotations"]
    assert annotations["nginx.ingress.kubernetes.io/backend-protocol"] == "GRPC"
    with pytest.raises(HelmError) as failure:
        helm.template(values={"gateway": {"ingress": {"enabled": True}}})
    assert "/gateway/ingress/host" in failure.value.stderr


NON_SANDBOX_PODS = {
    "namespaceSelector": {},
    "podSelector": {
        "matchExpressions": [
            {"key": "app.kubernetes.io/component", "operator": "NotIn", "values": ["sandbox"]}
        ]
    },
}
"""Every pod but sandboxes: who may reach the operator's port and the gateway's metrics."""
TOKEN_FILE = "/var/run/secrets/kubernetes.io/serviceaccount/token"


def test_the_network_policy_opens_the_front_door_and_egress_only_to_api_and_sandboxes(
    helm: Helm,
) -> None:
    rendered = helm.template()
    policy = only(rendered, "NetworkPolicy", GATEWAY)["spec"]
    selector = only(rendered, "Deployment", GATEWAY)["spec"]["selector"]["matchLabels"]
    assert policy["podSelector"] == {"matchLabels": selector}
    assert policy["policyTypes"] == ["Ingress", "Egress"]
    front_door, metrics = policy["ingress"]
    assert "from" not in front_door  # anyone may knock: every call is authenticated
    assert front_door["ports"] == [{"port": GATEWAY_PORT, "protocol": "TCP"}]
    # /metrics (and the probes' port): never from a sandbox (#26 item 2).
    assert metrics["ports"] == [{"port": 9090, "protocol": "TCP"}]
    assert metrics["from"] == [NON_SANDBOX_PODS]
    values = {"gateway": {"networkPolicy": {"metricsCIDRs": ["192.0.2.0/24"]}}}
    metrics = only(helm.template(values=values), "NetworkPolicy", GATEWAY)["spec"]["ingress"][1]
    assert metrics["from"] == [NON_SANDBOX_PODS, {"ipBlock": {"cidr": "192.0.2.0/24"}}]
    api, dns, sandboxes = policy["egress"]
    assert "to" not in api and {p["port"] for p in api["ports"]} == {443, 6443}
    assert {(p["port"], p["protocol"]) for p in dns["ports"]} == {(53, "UDP"), (53, "TCP")}
    assert sandboxes["ports"] == [{"port": RUNTIME_PORT, "protocol": "TCP"}]
    (peer,) = sandboxes["to"]
    assert peer["namespaceSelector"] == {}
    assert peer["podSelector"]["matchLabels"] == {
        "app.kubernetes.io/managed-by": "sandfleet-operator",
        "app.kubernetes.io/component": "sandbox",
    }
    values = {"gateway": {"networkPolicy": {"apiServerPorts": [16443]}}}
    api = only(helm.template(values=values), "NetworkPolicy", GATEWAY)["spec"]["egress"][0]
    assert api["ports"] == [{"port": 16443, "protocol": "TCP"}]


def test_the_gateway_is_scraped_when_the_operator_is(helm: Helm) -> None:
    assert not find(helm.template(), "ServiceMonitor")
    rendered = helm.template(values={"operator": {"serviceMonitor": {"enabled": True}}})
    monitor = only(rendered, "ServiceMonitor", GATEWAY)
    assert monitor["spec"]["endpoints"] == [
        {"port": "metrics", "path": "/metrics", "interval": "30s", "bearerTokenFile": TOKEN_FILE}
    ]


def test_a_disabled_gateway_renders_nothing_of_it(helm: Helm) -> None:
    rendered = helm.template(values={"gateway": {"enabled": False}})
    leftovers = [
        f"{m['kind']}/{m['metadata']['name']}"
        for m in rendered
        if "gateway" in m["metadata"]["name"] or "session-key" in m["metadata"]["name"]
    ]
    assert leftovers == []
    settings = _settings(rendered, OPERATOR)
    assert not [k for k in settings if "GATEWAY" in k or "SESSION_KEY" in k]
    spec = _pod_spec(rendered, OPERATOR)
    assert not [v for v in spec["volumes"] if v["name"] == "session-key"]


@pytest.mark.parametrize(
    ("values", "complaint"),
    [
        ({"gateway": {"quotas": {"default": -1}}}, "/gateway/quotas/default"),
        ({"gateway": {"quotas": {"namespaces": {"team-a": "ten"}}}}, "/gateway/quotas/namespaces"),
        ({"gateway": {"quotas": {"perNamespace": {}}}}, "/gateway/quotas"),
        ({"gateway": {"service": {"type": "ExternalName"}}}, "/gateway/service/type"),
        ({"gateway": {"replicas": 0}}, "/gateway/replicas"),
        ({"gateway": {"tls": {"cert": "x"}}}, "/gateway/tls"),
        ({"sessionKey": {"value": "x"}}, "/sessionKey"),
    ],
)
def test_the_schema_refuses_wrong_or_unknown_gateway_values(
    helm: Helm, values: dict[str, Any], complaint: str
) -> None:
    with pytest.raises(HelmError) as failure:
        helm.template(values=values)
    assert f"at '{complaint}" in failure.value.stderr
