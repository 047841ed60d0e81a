"""What `helm template` renders: the operator's wiring, its safety settings and the options."""

from __future__ import annotations

import json
from typing import Any

import pytest
import yaml

from tests.cluster.harness.helm_cli import Helm, HelmError, Manifest, find, only
from tests.cluster.harness.layout import REPO_ROOT

OPERATOR = "sandfleet-operator"


def _pod_spec(rendered: list[Manifest], name: str = OPERATOR) -> dict[str, Any]:
    spec: dict[str, Any] = only(rendered, "Deployment", name)["spec"]["template"]["spec"]
    return spec


def _settings(rendered: list[Manifest], name: str = OPERATOR) -> dict[str, str]:
    data: dict[str, str] = only(rendered, "ConfigMap", name)["data"]
    return data


def _checksum(rendered: list[Manifest]) -> str:
    deployment = only(rendered, "Deployment", OPERATOR)
    annotations: dict[str, str] = deployment["spec"]["template"]["metadata"]["annotations"]
    return annotations["checksum/config"]


def test_the_operator_knows_its_namespace_and_pod_labels_for_the_sandboxes_network_policies(
    helm: Helm,
) -> None:
    rendered = helm.template(release="prod", namespace="platform")
    name = "prod-sandfleet-operator"
    deployment = only(rendered, "Deployment", name)
    settings = _settings(rendered, name)
    labels = json.loads(settings["SANDFLEET_OPERATOR_OPERATOR_POD_LABELS"])
    pod_labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert labels.items() <= pod_labels.items()
    assert labels == deployment["spec"]["selector"]["matchLabels"]
    assert settings["SANDFLEET_OPERATOR_OPERATOR_NAMESPACE"] == "platform"
    container = _pod_spec(rendered, name)["containers"][0]
    assert container["envFrom"] == [{"configMapRef": {"name": name}}]


def test_the_service_is_where_sandfleet_trajectory_looks_by_default(helm: Helm) -> None:
    rendered = helm.template()
    service = only(rendered, "Service", OPERATOR)
    assert service["metadata"]["namespace"] == "sandfleet-system"
    assert service["spec"]["ports"] == [
        {"name": "http", "port": 8080, "targetPort": "http", "protocol": "TCP"}
    ]
    ports = _pod_spec(rendered)["containers"][0]["ports"]
    assert {"name": "http", "containerPort": 8080, "protocol": "TCP"} in ports
    assert _settings(rendered)["SANDFLEET_OPERATOR_HTTP_PORT"] == "8080"


def test_the_operator_pod_is_locked_down(helm: Helm) -> None:
    spec = _pod_spec(helm.template())
    assert spec["securityContext"]["runAsNonRoot"] is True
    assert spec["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    container = spec["containers"][0]
    assert container["securityContext"] == {
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "capabilities": {"drop": ["ALL"]},
    }
    assert {m["mountPath"] for m in container["volumeMounts"]} == {
        "/tmp",
        "/var/lib/sandfleet/trajectories",
        "/var/lib/sandfleet/snapshots",
        "/etc/sandfleet/session-key",
    }


def test_probes_use_kopfs_liveness_endpoint_and_the_http_apis_health(helm: Helm) -> None:
    rendered = helm.template()
    container = _pod_spec(rendered)["containers"][0]
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "liveness"}
    assert container["startupProbe"]["httpGet"] == {"path": "/healthz", "port": "liveness"}
    assert container["readinessProbe"]["httpGet"] == {"path": "/healthz", "port": "http"}
    assert {"name": "liveness", "containerPort": 8081, "protocol": "TCP"} in container["ports"]
    assert _settings(rendered)["SANDFLEET_OPERATOR_LIVENESS_PORT"] == "8081"


def test_a_changed_setting_changes_the_config_checksum_and_nothing_else_does(
    helm: Helm,
) -> None:
    base = helm.template()
    assert _checksum(helm.template()) == _checksum(base)
    assert _checksum(helm.template(values={"operator": {"podLabels": {"a": "b"}}})) == _checksum(
        base
    )
    changed = helm.template(values={"sandboxes": {"resources": {"memoryLimit": "768Mi"}}})
    assert _settings(changed)["SANDFLEET_OPERATOR_DEFAULT_MEMORY_LIMIT"] == "768Mi"
    assert _checksum(changed) != _checksum(base)


def test_one_replica_runs_standalone_and_is_recreated_rather_than_rolled(helm: Helm) -> None:
    rendered = helm.template()
    deployment = only(rendered, "Deployment", OPERATOR)
    assert deployment["spec"]["strategy"] == {"type": "Recreate"}
    assert "SANDFLEET_OPERATOR_PEERING" not in _settings(rendered)
    assert not find(rendered, "ClusterKopfPeering") and not find(rendered, "KopfPeering")


def test_more_replicas_switch_on_peering_with_the_peering_object_the_chart_creates(
    helm: Helm,
) -> None:
    rendered = helm.template(values={"operator": {"replicas": 3}})
    deployment = only(rendered, "Deployment", OPERATOR)
    assert deployment["spec"]["replicas"] == 3
    assert deployment["spec"]["strategy"]["type"] == "RollingUpdate"
    peering = only(rendered, "ClusterKopfPeering")
    assert _settings(rendered)["SANDFLEET_OPERATOR_PEERING"] == peering["metadata"]["name"]
    env = _pod_spec(rendered)["containers"][0]["env"]
    assert {"name": "POD_ID", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}} in env
    spread = _pod_spec(rendered)["topologySpreadConstraints"][0]
    assert spread["labelSelector"]["matchLabels"] == deployment["spec"]["selector"]["matchLabels"]
    budget = only(rendered, "PodDisruptionBudget", OPERATOR)
    assert budget["spec"]["maxUnavailable"] == 1


def test_namespace_scoped_peering_uses_a_kopf_peering_in_each_served_namespace(
    helm: Helm,
) -> None:
    values = {"operator": {"replicas": 2, "watchNamespaces": ["team-a", "team-b"]}}
    rendered = helm.template(values=values)
    assert not find(rendered, "ClusterKopfPeering")
    peerings = find(rendered, "KopfPeering", "sandfleet")
    assert sorted(p["metadata"]["namespace"] for p in peerings) == ["team-a", "team-b"]


def test_the_trajectory_store_is_a_kept_claim_an_existing_claim_or_an_empty_dir(
    helm: Helm,
) -> None:
    rendered = helm.template()
    claim = only(rendered, "PersistentVolumeClaim", "sandfleet-trajectories")
    assert claim["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"
    volume = next(v for v in _pod_spec(rendered)["volumes"] if v["name"] == "trajectories")
    assert volume["persistentVolumeClaim"] == {"claimName": "sandfleet-trajectories"}

    values: dict[str, Any] = {"trajectoryStore": {"type": "existingClaim", "existingClaim": "rwx"}}
    rendered = helm.template(values=values)
    assert not find(rendered, "PersistentVolumeClaim", "sandfleet-trajectories")
    volume = next(v for v in _pod_spec(rendered)["volumes"] if v["name"] == "trajectories")
    assert volume["persistentVolumeClaim"] == {"claimName": "rwx"}

    rendered = helm.template(values={"trajectoryStore": {"type": "emptyDir"}})
    volume = next(v for v in _pod_spec(rendered)["volumes"] if v["name"] == "trajectories")
    assert volume["emptyDir"] == {"sizeLimit": "1Gi"}


def test_tenants_get_the_template_with_their_runtime_class_and_egress_and_the_editor_role(
    helm: Helm,
) -> None:
    values = yaml.safe_load(
        (REPO_ROOT / "charts/sandfleet/ci/multi-tenant-values.yaml").read_text()
    )
    rendered = helm.template(values=values)
    templates = {t["metadata"]["namespace"]: t["spec"] for t in find(rendered, "SandboxTemplate")}
    assert templates["sandfleet-ci-team-a"]["pod"]["runtimeClassName"] == "gvisor"
    assert templates["sandfleet-ci-team-a"]["network"] == {"egress": "None"}
    assert templates["sandfleet-ci-team-b"]["pod"]["runtimeClassName"] == "kata"
    assert templates["sandfleet-ci-team-b"]["network"] == {"egress": "Internet"}
    assert templates["sandfleet-ci-team-a"]["lifecycle"]["sandboxLostRetries"] == 1
    roles = find(rendered, "Role", "sandfleet-session-editor")
    assert sorted(r["metadata"]["namespace"] for r in roles) == sorted(templates)
    binding = next(
        b
        for b in find(rendered, "RoleBinding", "sandfleet-session-editor")
        if b["metadata"]["namespace"] == "sandfleet-ci-team-a"
    )
    assert binding["subjects"] == [
        {"kind": "Group", "name": "team-a", "apiGroup": "rbac.authorization.k8s.io"},
        {"kind": "ServiceAccount", "name": "ci-runner", "namespace": "sandfleet-ci-team-a"},
    ]


def test_the_session_editor_role_reaches_sessions_but_no_secrets(helm: Helm) -> None:
    role = only(helm.template(), "Role", "sandfleet-session-editor")
    granted = {(g, r, v) for rule in role["rules"] for g in rule["apiGroups"]
               for r in rule["resources"] for v in rule["verbs"]}  # fmt: skip
    assert ("sandfleet.dev", "sandboxsessions", "create") in granted
    assert ("sandfleet.dev", "sandboxsessions", "delete") in granted
    assert not {(g, r, v) for g, r, v in granted if r in {"secrets", "services/proxy"}}
    # Besides sessions, tenants create only their served models (serve's ServedModel objects).
    created = {r for g, r, v in granted if v == "create"}
    assert created == {"sandboxsessions", "servedmodels"}


def test_the_default_template_is_egress_none_and_sandboxes_get_small_requests(
    helm: Helm,
) -> None:
    rendered = helm.template()
    template = only(rendered, "SandboxTemplate", "default")
    assert template["metadata"]["namespace"] == "sandfleet-system"
    assert template["spec"]["network"] == {"egress": "None"}
    settings = _settings(rendered)
    assert settings["SANDFLEET_OPERATOR_DEFAULT_CPU_REQUEST"] == "10m"
    assert settings["SANDFLEET_OPERATOR_DEFAULT_MEMORY_REQUEST"] == "64Mi"
    assert settings["SANDFLEET_OPERATOR_DEFAULT_MEMORY_LIMIT"] == "512Mi"


def test_a_pool_per_tenant_claims_from_the_default_template(helm: Helm) -> None:
    values = {
        "pool": {"create": True, "replicas": 2},
        "tenants": [{"namespace": "a", "poolReplicas": 5}, {"namespace": "b"}],
    }
    pools = find(helm.template(values=values), "SandboxPool", "warm")
    assert {p["metadata"]["namespace"]: p["spec"] for p in pools} == {
        "a": {"templateRef": {"name": "default"}, "replicas": 5},
        "b": {"templateRef": {"name": "default"}, "replicas": 2},
    }


def test_the_binpack_scheduler_scores_most_allocated_at_the_clusters_version(
    helm: Helm,
) -> None:
    rendered = helm.template(values={"binpackScheduler": {"enabled": True}})
    name = "sandfleet-binpack-scheduler"
    config = yaml.safe_load(only(rendered, "ConfigMap", name)["data"]["config.yaml"])
    profile = config["profiles"][0]
    assert profile["schedulerName"] == "sandfleet-binpack"
    fit = next(p for p in profile["pluginConfig"] if p["name"] == "NodeResourcesFit")
    assert fit["args"]["scoringStrategy"]["type"] == "MostAllocated"
    assert config["leaderElection"]["resourceName"] == name
    container = _pod_spec(rendered, name)["containers"][0]
    # helm template's default cluster version is the client-go release helm was built with.
    assert container["image"].startswith("registry.k8s.io/kube-scheduler:v1.")
    roles = {b["roleRef"]["name"] for b in find(rendered, "ClusterRoleBinding")}
    assert {"system:kube-scheduler", "system:volume-scheduler"} <= roles


def test_the_model_endpoint_key_is_mounted_from_an_existing_secret_not_put_in_env(
    helm: Helm,
) -> None:
    values = {"model": {"baseURL": "https://models.example/v1", "apiKeySecret": {"name": "llm"}}}
    rendered = helm.template(values=values)
    settings = _settings(rendered)
    assert settings["SANDFLEET_OPERATOR_DEFAULT_MODEL_BASE_URL"] == "https://models.example/v1"
    key_file = settings["SANDFLEET_OPERATOR_DEFAULT_MODEL_API_KEY_FILE"]
    spec = _pod_spec(rendered)
    volume = next(v for v in spec["volumes"] if v["name"] == "model-api-key")
    assert volume["secret"]["secretName"] == "llm"
    assert volume["secret"]["items"] == [{"key": "api-key", "path": "api-key"}]
    mount = next(m for m in spec["containers"][0]["volumeMounts"] if m["name"] == "model-api-key")
    assert key_file == f"{mount['mountPath']}/api-key"
    # The chart never creates the key's Secret; its only Secret is the gateway's session key.
    assert [s["metadata"]["name"] for s in find(rendered, "Secret")] == ["sandfleet-session-key"]


def test_model_endpoints_are_allowed_only_by_the_admin_and_none_by_default(helm: Helm) -> None:
    allowed = ["https://api.openai.com/v1", "http://*.models.svc:8000"]
    settings = _settings(helm.template(values={"model": {"allowedEndpoints": allowed}}))
    assert json.loads(settings["SANDFLEET_OPERATOR_MODEL_ENDPOINTS_ALLOWED"]) == allowed
    default = _settings(helm.template())
    assert json.loads(default["SANDFLEET_OPERATOR_MODEL_ENDPOINTS_ALLOWED"]) == []


def test_the_service_monitor_scrapes_the_http_port_with_prometheus_token(helm: Helm) -> None:
    rendered = helm.template(values={"operator": {"serviceMonitor": {"enabled": True}}})
    monitor = only(rendered, "ServiceMonitor", OPERATOR)
    token = "/var/run/secrets/kubernetes.io/serviceaccount/token"
    assert monitor["spec"]["endpoints"] == [
        {"port": "http", "path": "/metrics", "interval": "30s", "bearerTokenFile": token}
    ]
    assert not find(helm.template(), "ServiceMonitor")


def test_the_metrics_reader_grants_get_on_metrics_and_binds_the_subjects_given(
    helm: Helm,
) -> None:
    name = "sandfleet-system-sandfleet-metrics-reader"
    role = only(helm.template(), "ClusterRole", name)
    assert role["rules"] == [{"nonResourceURLs": ["/metrics"], "verbs": ["get"]}]
    assert not find(helm.template(), "ClusterRoleBinding", name)
    prometheus = {"kind": "ServiceAccount", "name": "prometheus-k8s", "namespace": "monitoring"}
    values = {"rbac": {"metricsReader": {"subjects": [prometheus]}}}
    binding = only(helm.template(values=values), "ClusterRoleBinding", name)
    assert binding["subjects"] == [prometheus]
    assert binding["roleRef"]["name"] == name


def test_the_operators_network_policy_admits_no_sandbox_and_egress_only_where_it_calls(
    helm: Helm,
) -> None:
    """#26 item 2: a sandbox with egress All read other tenants' trajectories at :8080."""
    rendered = helm.template()
    policy = only(rendered, "NetworkPolicy", OPERATOR)["spec"]
    selector = only(rendered, "Deployment", OPERATOR)["spec"]["selector"]["matchLabels"]
    assert policy["podSelector"] == {"matchLabels": selector}
    assert policy["policyTypes"] == ["Ingress", "Egress"]
    (ingress,) = policy["ingress"]
    assert ingress["ports"] == [{"port": 8080, "protocol": "TCP"}]
    (peer,) = ingress["from"]
    assert peer == {
        "namespaceSelector": {},
        "podSelector": {"matchExpressions": [
            {"key": "app.kubernetes.io/component", "operator": "NotIn", "values": ["sandbox"]}
        ]},
    }  # fmt: skip
    api, dns, sandboxes, model = policy["egress"]
    assert "to" not in api and {p["port"] for p in api["ports"]} == {443, 6443}
    assert {(p["port"], p["protocol"]) for p in dns["ports"]} == {(53, "UDP"), (53, "TCP")}
    assert sandboxes["ports"] == [{"port": 50051, "protocol": "TCP"}]
    assert sandboxes["to"][0]["podSelector"]["matchLabels"]["app.kubernetes.io/component"] == (
        "sandbox"
    )
    assert model == {"ports": [{"port": 443, "protocol": "TCP"}]}
    in_cluster = {"to": [{"namespaceSelector": {}}], "ports": [{"port": 8000}]}
    values = {"operator": {"networkPolicy": {
        "modelEgress": [in_cluster], "ingressCIDRs": ["172.16.0.0/28"],
    }}}  # fmt: skip
    policy = only(helm.template(values=values), "NetworkPolicy", OPERATOR)["spec"]
    assert policy["egress"][3:] == [in_cluster]
    assert policy["ingress"][0]["from"][1] == {"ipBlock": {"cidr": "172.16.0.0/28"}}
    off = {"operator": {"networkPolicy": {"enabled": False}}}
    assert not find(helm.template(values=off), "NetworkPolicy", OPERATOR)


def test_uninstall_first_deletes_sessions_and_pools_while_the_operator_still_runs(
    helm: Helm,
) -> None:
    rendered = helm.template()
    job = only(rendered, "Job", "sandfleet-pre-delete")
    assert job["metadata"]["annotations"]["helm.sh/hook"] == "pre-delete"
    script = only(rendered, "ConfigMap", "sandfleet-pre-delete")["data"]["pre_delete.py"]
    assert script == (REPO_ROOT / "charts/sandfleet/files/pre_delete.py").read_text()
    role = only(rendered, "ClusterRole", "sandfleet-system-sandfleet-pre-delete")
    assert role["rules"] == [
        {
            "apiGroups": ["sandfleet.dev"],
            "resources": ["sandboxsessions", "sandboxpools"],
            "verbs": ["list", "delete"],
        }
    ]
    for kind in ("ServiceAccount", "ConfigMap", "ClusterRole", "ClusterRoleBinding"):
        hooked = only(rendered, kind, next(
            m["metadata"]["name"] for m in find(rendered, kind)
            if m["metadata"]["name"].endswith("pre-delete")))  # fmt: skip
        assert int(hooked["metadata"]["annotations"]["helm.sh/hook-weight"]) < 0


def test_namespace_scoped_installs_put_the_template_into_the_served_namespaces(
    helm: Helm,
) -> None:
    rendered = helm.template(values={"operator": {"watchNamespaces": ["team-a", "team-b"]}})
    templates = find(rendered, "SandboxTemplate", "default")
    assert sorted(t["metadata"]["namespace"] for t in templates) == ["team-a", "team-b"]


def test_a_tenant_the_namespace_scoped_operator_does_not_serve_is_refused(helm: Helm) -> None:
    values = {"operator": {"watchNamespaces": ["team-a"]}, "tenants": [{"namespace": "team-b"}]}
    with pytest.raises(HelmError) as failure:
        helm.template(values=values)
    assert "tenant namespace team-b is not in operator.watchNamespaces" in failure.value.stderr


def test_host_aliases_stand_in_for_cluster_dns_where_there_is_none(helm: Helm) -> None:
    alias = {"ip": "10.96.0.1", "hostnames": ["kubernetes.default.svc"]}
    rendered = helm.template(values={"operator": {"hostAliases": [alias]}})
    assert _pod_spec(rendered)["hostAliases"] == [alias]
    assert "hostAliases" not in _pod_spec(helm.template())
