"""What `helm template` renders for `sandfleet serve` (serve.enabled): nothing by default; a
locked-down Deployment whose config file serve itself accepts, claiming through the gateway
Service as its own ServiceAccount, bound to the session-editor Role in one tenant namespace."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from sandfleet.api import GATEWAY_PORT
from sandfleet.serve.config import load_serve_config
from tests.cluster.harness.helm_cli import Helm, HelmError, only

SERVE = "sandfleet-serve"
MODELS = {
    "coder": {
        "upstream": {"base_url": "http://vllm.models:8000/v1", "model": "qwen",
                     "api_key_env": "UPSTREAM_KEY"},
        "pool": "warm",
        "max_turns": 12,
    }
}  # fmt: skip
ON: dict[str, Any] = {
    "tenants": [{"namespace": "team-a"}],
    "serve": {
        "enabled": True,
        "namespace": "team-a",
        "apiKeySecret": {"name": "serve-key"},
        "models": MODELS,
        "env": [
            {"name": "UPSTREAM_KEY", "valueFrom": {"secretKeyRef": {"name": "up", "key": "k"}}}
        ],
    },
}


def test_serve_is_off_by_default(helm: Helm) -> None:
    assert not [m for m in helm.template() if m["metadata"]["name"] == SERVE]


def test_its_config_is_one_serve_accepts_with_every_model_on_the_cluster(
    helm: Helm, tmp_path: Path
) -> None:
    rendered = helm.template(values=ON)
    path = tmp_path / "serve.yaml"
    path.write_text(only(rendered, "ConfigMap", SERVE)["data"]["serve.yaml"])
    config = load_serve_config(
        path, {"SANDFLEET_SERVE_API_KEY": "k", "UPSTREAM_KEY": "u"}, backend="kubernetes"
    )
    coder = config.models["coder"]
    assert (coder.spec.sandbox, coder.spec.pool, coder.agent.max_turns) == ("cluster", "warm", 12)
    assert (config.server.host, config.server.port, config.api_key) == ("0.0.0.0", 8080, "k")
    assert config.server.max_concurrent_per_tenant == 8
    gateway = config.gateway
    assert gateway.address == f"sandfleet-gateway.sandfleet-system.svc:{GATEWAY_PORT}"
    assert (gateway.namespace, gateway.token_env) == ("team-a", None)
    assert gateway.token_file == Path("/var/run/secrets/sandfleet/gateway/token")


def test_the_deployment_is_locked_down_and_holds_only_a_token_for_the_gateway(
    helm: Helm,
) -> None:
    rendered = helm.template(values=ON)
    spec: dict[str, Any] = only(rendered, "Deployment", SERVE)["spec"]["template"]["spec"]
    (container,) = spec["containers"]
    assert container["command"][-2:] == ["--backend", "kubernetes"]
    assert spec["automountServiceAccountToken"] is False
    assert spec["securityContext"]["runAsNonRoot"] is True
    assert spec["securityContext"]["seccompProfile"]["type"] == "RuntimeDefault"
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert container["securityContext"]["capabilities"]["drop"] == ["ALL"]
    (projected,) = [v for v in spec["volumes"] if "projected" in v]
    assert [s["serviceAccountToken"]["path"] for s in projected["projected"]["sources"]] == [
        "token"
    ]
    env = {item["name"]: item for item in container["env"]}
    assert env["SANDFLEET_SERVE_API_KEY"]["valueFrom"]["secretKeyRef"]["name"] == "serve-key"
    assert "UPSTREAM_KEY" in env
    # Its only rights: the tenant Role, in the tenant's namespace.
    binding = only(rendered, "RoleBinding", SERVE)
    assert binding["metadata"]["namespace"] == "team-a"
    assert binding["roleRef"]["name"] == "sandfleet-session-editor"
    assert not [m for m in rendered if m["kind"].startswith("Cluster") and SERVE in str(m)]
    assert only(rendered, "Service", SERVE)["spec"]["sessionAffinity"] == "ClientIP"
    policy = only(rendered, "NetworkPolicy", SERVE)["spec"]
    egress_ports = {p["port"] for rule in policy["egress"] for p in rule.get("ports", [])}
    assert egress_ports == {53, 50052, 443}  # DNS, the gateway, HTTPS upstreams


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"gateway": {"enabled": False}}, "serve.enabled needs gateway.enabled"),
        ({"serve": {**ON["serve"], "namespace": "team-b"}}, "not a tenant namespace"),
        ({"serve": {**ON["serve"], "apiKeySecret": {"name": ""}}}, "serve.apiKeySecret.name"),
        ({"serve": {**ON["serve"], "models": {}}}, "serve.models is empty"),
    ],
)
def test_serve_refuses_installs_it_cannot_serve(
    helm: Helm, values: dict[str, Any], message: str
) -> None:
    with pytest.raises(HelmError) as failure:
        helm.template(values={**ON, **values})
    assert message in str(failure.value)


def test_two_replicas_get_a_disruption_budget_one_gets_none(helm: Helm) -> None:
    assert not [m for m in helm.template(values=ON) if m["kind"] == "PodDisruptionBudget"
                and m["metadata"]["name"] == SERVE]  # fmt: skip
    two = helm.template(values={**ON, "serve": {**ON["serve"], "replicas": 2}})
    assert only(two, "PodDisruptionBudget", SERVE)["spec"]["maxUnavailable"] == 1


def test_with_client_identity_no_key_is_needed_and_clients_tokens_claim(
    helm: Helm, tmp_path: Path
) -> None:
    values = {**ON, "serve": {**ON["serve"], "identity": "client", "apiKeySecret": {"name": ""}}}
    rendered = helm.template(values=values)
    path = tmp_path / "serve.yaml"
    path.write_text(only(rendered, "ConfigMap", SERVE)["data"]["serve.yaml"])
    config = load_serve_config(path, {"UPSTREAM_KEY": "u"}, backend="kubernetes")
    assert (config.gateway.identity, config.api_key, config.server.api_key_env) == (
        "client", None, None,
    )  # fmt: skip
    spec = only(rendered, "Deployment", SERVE)["spec"]["template"]["spec"]
    assert "SANDFLEET_SERVE_API_KEY" not in {e["name"] for e in spec["containers"][0]["env"]}


CLIENT = {**ON["serve"], "identity": "client", "apiKeySecret": {"name": ""}}


def test_with_client_identity_it_serves_the_tenants_served_models_with_least_privilege(
    helm: Helm, tmp_path: Path
) -> None:
    values = {**ON, "tenants": [{"namespace": "team-a"}, {"namespace": "team-b"}],
              "serve": {**CLIENT, "models": {}}}  # fmt: skip
    rendered = helm.template(values=values)
    path = tmp_path / "serve.yaml"
    path.write_text(only(rendered, "ConfigMap", SERVE)["data"]["serve.yaml"])
    config = load_serve_config(path, {}, backend="kubernetes")
    assert config.models == {}  # the ServedModels alone
    assert config.served_models is not None
    assert config.served_models.namespaces == ["team-a", "team-b"]
    spec = only(rendered, "Deployment", SERVE)["spec"]["template"]["spec"]
    assert spec["automountServiceAccountToken"] is True  # the API server: watch, reviews
    roles = [m for m in rendered if m["kind"] == "Role" and m["metadata"]["name"] ==
             f"{SERVE}-served-models"]  # fmt: skip
    assert sorted(r["metadata"]["namespace"] for r in roles) == ["team-a", "team-b"]
    rules = {(tuple(r["resources"]), tuple(r["verbs"])) for r in roles[0]["rules"]}
    assert rules == {
        (("servedmodels",), ("get", "list", "watch")),
        (("servedmodels/status",), ("patch",)),
        (("sandboxpools", "sandboxtemplates"), ("get",)),
        (("secrets",), ("get",)),  # by name only: never list or watch
    }
    (cluster_role,) = [m for m in rendered if m["kind"] == "ClusterRole" and SERVE in str(m)]
    assert {r["resources"][0] for r in cluster_role["rules"]} == {
        "tokenreviews", "subjectaccessreviews",
    }  # fmt: skip
    policy = only(rendered, "NetworkPolicy", SERVE)["spec"]
    egress_ports = {p["port"] for rule in policy["egress"] for p in rule.get("ports", [])}
    assert {443, 6443} <= egress_ports  # the API server
    editor = next(m for m in rendered if m["kind"] == "Role"
              and m["metadata"]["name"] == "sandfleet-session-editor")  # fmt: skip
    (tenant_rule,) = [r for r in editor["rules"] if r["resources"] == ["servedmodels"]]
    assert {"create", "list", "update", "delete"} <= set(tenant_rule["verbs"])


def test_served_models_off_keeps_serve_off_the_api_server(helm: Helm) -> None:
    rendered = helm.template(values={**ON, "serve": {**CLIENT, "servedModels": False}})
    spec = only(rendered, "Deployment", SERVE)["spec"]["template"]["spec"]
    assert spec["automountServiceAccountToken"] is False
    assert "served_models" not in only(rendered, "ConfigMap", SERVE)["data"]["serve.yaml"]
    assert not [m for m in rendered if m["kind"].startswith("Cluster") and SERVE in str(m)]
