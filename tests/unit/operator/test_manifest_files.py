"""The CRDs, the examples and the RBAC manifests agree with each other and with the API
(no cluster); the CRDs against the sandfleet.api models: tests/unit/api/test_crd_parity.py."""

from __future__ import annotations

import functools
import typing
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pydantic
import pytest
import yaml

from sandfleet import api
from sandfleet.api import SandboxPoolSpec, SandboxSessionSpec, SandboxTemplateSpec

MANIFESTS = Path(__file__).resolve().parents[3] / "manifests"
Schema = dict[str, Any]

CRD_FILES = {
    api.SESSION_KIND: MANIFESTS / "crds" / f"{api.SESSION_PLURAL}.{api.GROUP}.yaml",
    api.TEMPLATE_KIND: MANIFESTS / "crds" / f"{api.TEMPLATE_PLURAL}.{api.GROUP}.yaml",
    api.POOL_KIND: MANIFESTS / "crds" / f"{api.POOL_PLURAL}.{api.GROUP}.yaml",
    api.SERVED_MODEL_KIND: MANIFESTS / "crds" / f"{api.SERVED_MODEL_PLURAL}.{api.GROUP}.yaml",
}
PLURALS = {
    api.SESSION_KIND: api.SESSION_PLURAL,
    api.TEMPLATE_KIND: api.TEMPLATE_PLURAL,
    api.POOL_KIND: api.POOL_PLURAL,
    api.SERVED_MODEL_KIND: api.SERVED_MODEL_PLURAL,
}
SHORT_NAMES = {
    api.SESSION_KIND: "sbx", api.TEMPLATE_KIND: "sbxt", api.POOL_KIND: "sbxp",
    api.SERVED_MODEL_KIND: "sbxm",
}  # fmt: skip
SPEC_MODELS: dict[str, type[pydantic.BaseModel]] = {
    api.SESSION_KIND: SandboxSessionSpec,
    api.TEMPLATE_KIND: SandboxTemplateSpec,
    api.POOL_KIND: SandboxPoolSpec,
    api.SERVED_MODEL_KIND: api.ServedModelSpec,
}
ALL_CRD_FILES = sorted((MANIFESTS / "crds").glob("*.yaml"))
EXAMPLES = sorted((MANIFESTS / "examples").glob("*.yaml"))


def documents(path: Path) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc]


@functools.cache
def crd(kind: str) -> dict[str, Any]:
    (only,) = documents(CRD_FILES[kind])
    return only


def version(kind: str) -> dict[str, Any]:
    (only,) = crd(kind)["spec"]["versions"]
    return typing.cast(dict[str, Any], only)


def schema(kind: str) -> Schema:
    return typing.cast(Schema, version(kind)["schema"]["openAPIV3Schema"])


def nodes(node: Schema, path: str, via: str = "root") -> Iterator[tuple[str, Schema, str]]:
    """Every schema node below (and including) node: (readable path, node, how it was reached:
    root, property, items or values)."""
    yield path, node, via
    for name, child in node.get("properties", {}).items():
        yield from nodes(child, f"{path}.{name}", "property")
    if "items" in node:
        yield from nodes(node["items"], f"{path}[]", "items")
    if isinstance(node.get("additionalProperties"), dict):
        yield from nodes(node["additionalProperties"], f"{path}{{}}", "values")


def all_schemas() -> Iterator[tuple[str, Schema]]:
    for path in ALL_CRD_FILES:
        for doc in documents(path):
            for v in doc["spec"]["versions"]:
                yield f"{doc['metadata']['name']}/{v['name']}", v["schema"]["openAPIV3Schema"]


# ---- the CRDs on their own -------------------------------------------------------------


@pytest.mark.parametrize("kind", CRD_FILES)
def test_each_crd_is_a_namespaced_sandfleet_kind_kubectl_finds_by_short_name(kind: str) -> None:
    spec = crd(kind)["spec"]
    assert crd(kind)["metadata"]["name"] == f"{PLURALS[kind]}.{api.GROUP}"
    assert (spec["group"], spec["scope"]) == (api.GROUP, "Namespaced")
    assert spec["names"]["kind"] == kind
    assert spec["names"]["plural"] == PLURALS[kind]
    assert spec["names"]["shortNames"] == [SHORT_NAMES[kind]]
    assert spec["names"]["categories"] == ["sandfleet"]
    assert (version(kind)["name"], version(kind)["served"], version(kind)["storage"]) == (
        api.VERSION,
        True,
        True,
    )


@pytest.mark.parametrize(("name", "root"), list(all_schemas()), ids=[n for n, _ in all_schemas()])
def test_every_schema_node_has_a_type_and_a_description(name: str, root: Schema) -> None:
    # Structural: the API server prunes, defaults and validates by type.
    assert [p for p, n, _ in nodes(root, name) if "type" not in n] == []
    # What kubectl explain shows: every field, and every object inside a list or map (plain
    # list items and map values are described by their list or map). The API server allows
    # nothing but a type on metadata.
    undescribed = [
        p
        for p, n, via in nodes(root, name)
        if "description" not in n
        and p != f"{name}.metadata"
        and (via in ("root", "property") or "properties" in n)
    ]
    assert undescribed == []


@pytest.mark.parametrize("kind", CRD_FILES)
def test_no_sandfleet_field_escapes_pruning(kind: str) -> None:
    preserved = [
        p for p, n, _ in nodes(schema(kind), kind) if "x-kubernetes-preserve-unknown-fields" in n
    ]
    assert preserved == []


def test_session_printer_columns_show_phase_readiness_turns_and_pod() -> None:
    columns = {c["name"]: c for c in version(api.SESSION_KIND)["additionalPrinterColumns"]}
    default_view = [n for n, c in columns.items() if not c.get("priority")]
    assert default_view == ["Phase", "Ready", "Turns", "Pod", "Age"]
    assert columns["Ready"]["jsonPath"] == '.status.conditions[?(@.type=="Ready")].status'
    assert columns["Turns"]["jsonPath"] == ".status.agent.turns"
    assert columns["Age"]["jsonPath"] == ".metadata.creationTimestamp"


def test_pool_printer_columns_show_desired_and_ready_replicas() -> None:
    columns = version(api.POOL_KIND)["additionalPrinterColumns"]
    default_view = [(c["name"], c["jsonPath"]) for c in columns if not c.get("priority")]
    assert default_view == [
        ("Desired", ".spec.replicas"),
        ("Ready", ".status.replicas"),
        ("Age", ".metadata.creationTimestamp"),
    ]


def test_sessions_and_pools_have_a_status_subresource_and_pools_scale() -> None:
    assert version(api.SESSION_KIND)["subresources"] == {"status": {}}
    assert version(api.POOL_KIND)["subresources"] == {
        "status": {},
        "scale": {
            "specReplicasPath": ".spec.replicas",
            "statusReplicasPath": ".status.replicas",
            "labelSelectorPath": ".status.selector",
        },
    }


def test_status_has_every_field_the_operator_writes() -> None:
    status = schema(api.SESSION_KIND)["properties"]["status"]["properties"]
    assert set(status) == {
        "phase", "observedGeneration", "conditions", "podName", "podIP", "nodeName",
        "poolName", "tokenSecretName", "startTime", "readyTime", "completionTime",
        "restarts", "reclaimReason", "trajectory", "agent", "snapshot",
    }  # fmt: skip
    assert set(status["agent"]["properties"]) == {
        "turns", "promptTokens", "completionTokens", "stopReason", "result", "answerFromFile",
        "error",
    }  # fmt: skip
    assert status["agent"]["properties"]["result"]["maxLength"] == 4096
    assert status["phase"]["enum"] == [p.value for p in api.Phase]
    pool_status = schema(api.POOL_KIND)["properties"]["status"]["properties"]
    assert set(pool_status) == {
        "replicas", "startingReplicas", "claims", "selector", "observedGeneration", "conditions",
    }  # fmt: skip
    for conditions in (status["conditions"], pool_status["conditions"]):
        assert conditions["x-kubernetes-list-type"] == "map"
        assert conditions["x-kubernetes-list-map-keys"] == ["type"]
        assert set(conditions["items"]["properties"]) == {
            "type", "status", "reason", "message", "lastTransitionTime", "observedGeneration",
        }  # fmt: skip


def test_pod_settings_are_the_same_schema_wherever_they_appear() -> None:
    def without_descriptions(node: Any) -> Any:
        if isinstance(node, dict):
            return {k: without_descriptions(v) for k, v in node.items() if k != "description"}
        return node

    session_pod = schema(api.SESSION_KIND)["properties"]["spec"]["properties"]["template"]
    pool_pod = schema(api.POOL_KIND)["properties"]["spec"]["properties"]["template"]
    template_pod = dict(schema(api.TEMPLATE_KIND)["properties"]["spec"]["properties"]["pod"])
    template_pod.pop("default")
    assert without_descriptions(session_pod) == without_descriptions(pool_pod)
    assert without_descriptions(session_pod) == without_descriptions(template_pod)


def test_spec_fields_of_a_running_session_are_immutable_except_lifecycle() -> None:
    rules = schema(api.SESSION_KIND)["properties"]["spec"]["x-kubernetes-validations"]
    immutable = {r["fieldPath"].lstrip(".") for r in rules if "oldSelf" in r["rule"]}
    assert immutable == {"agent", "template", "templateRef", "poolRef", "files", "env", "network"}


# ---- the examples ----------------------------------------------------------------------


def example_objects() -> list[tuple[str, dict[str, Any]]]:
    return [
        (f"{path.name}:{doc['metadata']['name']}", doc)
        for path in EXAMPLES
        for doc in documents(path)
        if doc["apiVersion"] == api.API_VERSION
    ]


@pytest.mark.parametrize(("name", "obj"), example_objects(), ids=[n for n, _ in example_objects()])
def test_every_example_parses_into_its_spec_model(name: str, obj: dict[str, Any]) -> None:
    SPEC_MODELS[obj["kind"]].model_validate(obj["spec"])
    assert "namespace" not in obj["metadata"], name  # applied with kubectl -n


def unknown_fields(value: Any, node: Schema, path: str) -> Iterator[str]:
    """Fields of value the schema does not know: the API server would silently drop them."""
    if isinstance(value, dict) and "properties" in node:
        for key, child in value.items():
            if key not in node["properties"]:
                yield f"{path}.{key}"
            else:
                yield from unknown_fields(child, node["properties"][key], f"{path}.{key}")
    elif isinstance(value, list) and "items" in node:
        for index, item in enumerate(value):
            yield from unknown_fields(item, node["items"], f"{path}[{index}]")


@pytest.mark.parametrize(("name", "obj"), example_objects(), ids=[n for n, _ in example_objects()])
def test_examples_use_only_fields_the_crd_knows(name: str, obj: dict[str, Any]) -> None:
    spec_schema = schema(obj["kind"])["properties"]["spec"]
    assert list(unknown_fields(obj["spec"], spec_schema, name)) == []


def test_examples_show_every_way_to_use_the_api() -> None:
    specs = {name.split(":")[1]: (obj["kind"], obj["spec"]) for name, obj in example_objects()}
    kinds = [kind for kind, _ in specs.values()]
    sessions = [
        SandboxSessionSpec.model_validate(spec)
        for kind, spec in specs.values()
        if kind == api.SESSION_KIND
    ]
    assert api.TEMPLATE_KIND in kinds and api.POOL_KIND in kinds
    assert any(not s.managed and s.pool_ref is None and s.template_ref is None for s in sessions)
    assert any(s.pool_ref is not None for s in sessions)
    assert any(s.template_ref is not None and s.managed for s in sessions)
    managed = [
        s
        for s in sessions
        if s.agent is not None
        and s.agent.api_key_secret_ref is not None
        and any(f.config_map_key_ref is not None for f in s.files)
    ]
    assert managed, "a managed session with apiKeySecretRef and files from a ConfigMap"
    config_maps = {
        doc["metadata"]["name"]: doc["data"]
        for path in EXAMPLES
        for doc in documents(path)
        if doc["kind"] == "ConfigMap"
    }
    for file in (f for s in managed for f in s.files if f.config_map_key_ref is not None):
        ref = file.config_map_key_ref
        assert ref is not None and ref.key in config_maps[ref.name]


# ---- RBAC and kopf peering -------------------------------------------------------------

SESSIONS, POOLS, TEMPLATES = api.SESSION_PLURAL, api.POOL_PLURAL, api.TEMPLATE_PLURAL
OPERATOR_CALLS = {
    (group, resource, verb)
    for group, resources, verbs in [
        (api.GROUP, [SESSIONS, POOLS, TEMPLATES], ["get", "list", "watch", "patch"]),
        (api.GROUP, [SESSIONS], ["delete"]),
        (api.GROUP, [f"{SESSIONS}/status", f"{POOLS}/status"], ["get", "patch"]),
        (api.GROUP, [f"{SESSIONS}/finalizers", f"{POOLS}/finalizers"], ["update"]),
        ("", ["pods"], ["get", "list", "watch", "create", "patch", "delete"]),
        ("", ["secrets"], ["get", "list", "create", "delete"]),
        ("", ["configmaps"], ["get"]),
        ("networking.k8s.io", ["networkpolicies"], ["get", "list", "create", "delete"]),
        ("", ["events"], ["create", "patch"]),
        ("events.k8s.io", ["events"], ["create", "patch"]),
        ("kopf.dev", ["kopfpeerings", "clusterkopfpeerings"], ["get", "list", "watch", "patch"]),
        ("apiextensions.k8s.io", ["customresourcedefinitions"], ["list", "watch"]),
        ("", ["namespaces"], ["list", "watch"]),
        # The HTTP port's callers: their tokens and their RBAC (/trajectories, /metrics).
        ("authentication.k8s.io", ["tokenreviews"], ["create"]),
        ("authorization.k8s.io", ["subjectaccessreviews"], ["create"]),
    ]
    for resource in resources
    for verb in verbs
}
"""What the operator calls (OPERATOR.md): the ClusterRole must grant this and nothing more."""
GATEWAY_CALLS = {
    (group, resource, verb)
    for group, resources, verbs in [
        ("authentication.k8s.io", ["tokenreviews"], ["create"]),
        ("authorization.k8s.io", ["subjectaccessreviews"], ["create"]),
        ("", ["pods"], ["get", "list", "watch", "patch", "delete"]),
        (api.GROUP, [SESSIONS], ["get", "list", "watch", "create", "patch", "delete"]),
        (api.GROUP, [POOLS, TEMPLATES], ["get", "list", "watch"]),
        ("", ["secrets"], ["get"]),
    ]
    for resource in resources
    for verb in verbs
}
"""What the gateway calls: its ClusterRole grants this and nothing more (no pod create, no
Secret list, no status writes: those stay the operator's)."""


def _granted(path: Path) -> list[tuple[str, str, str]]:
    (role,) = documents(path)
    assert all("resourceNames" not in rule and "*" not in str(rule) for rule in role["rules"])
    return [
        (group, resource, verb)
        for rule in role["rules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    ]


def test_cluster_role_grants_exactly_the_calls_the_operator_makes() -> None:
    (role,) = documents(MANIFESTS / "rbac" / "cluster-role.yaml")
    granted = [
        (group, resource, verb)
        for rule in role["rules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    ]
    assert len(granted) == len(set(granted))  # no rule repeats another
    assert set(granted) == OPERATOR_CALLS
    assert all("resourceNames" not in rule and "*" not in str(rule) for rule in role["rules"])


def test_the_binding_gives_the_role_to_the_operators_service_account() -> None:
    namespace, account, _gateway, *_ledger = documents(MANIFESTS / "rbac" / "service-account.yaml")
    (binding,) = documents(MANIFESTS / "rbac" / "cluster-role-binding.yaml")
    (role,) = documents(MANIFESTS / "rbac" / "cluster-role.yaml")
    assert namespace["kind"] == "Namespace" and account["kind"] == "ServiceAccount"
    assert account["metadata"] == {**account["metadata"], "name": "sandfleet-operator",
                                   "namespace": namespace["metadata"]["name"]}  # fmt: skip
    assert namespace["metadata"]["name"] == "sandfleet-system"
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "ClusterRole",
        "name": role["metadata"]["name"],
    }
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "sandfleet-operator", "namespace": "sandfleet-system"}
    ]


def test_gateway_cluster_role_grants_exactly_the_calls_the_gateway_makes() -> None:
    granted = _granted(MANIFESTS / "rbac" / "gateway-cluster-role.yaml")
    assert len(granted) == len(set(granted))  # no rule repeats another
    assert set(granted) == GATEWAY_CALLS


def test_the_quota_ledger_role_grants_leases_of_the_gateways_namespace_only() -> None:
    *_identities, role, binding = documents(MANIFESTS / "rbac" / "service-account.yaml")
    assert (role["kind"], role["metadata"]["namespace"]) == ("Role", "sandfleet-system")
    assert role["rules"] == [
        {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"],
         "verbs": ["get", "create", "update"]},
    ]  # fmt: skip
    assert binding["roleRef"]["name"] == role["metadata"]["name"]
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "sandfleet-gateway", "namespace": "sandfleet-system"}
    ]


def test_the_gateway_binding_gives_its_role_to_the_gateways_service_account() -> None:
    namespace, _operator, account, *_ledger = documents(MANIFESTS / "rbac" / "service-account.yaml")
    (binding,) = documents(MANIFESTS / "rbac" / "gateway-cluster-role-binding.yaml")
    (role,) = documents(MANIFESTS / "rbac" / "gateway-cluster-role.yaml")
    assert account["kind"] == "ServiceAccount"
    assert account["metadata"]["name"] == "sandfleet-gateway"
    assert account["metadata"]["namespace"] == namespace["metadata"]["name"]
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "ClusterRole",
        "name": role["metadata"]["name"],
    }
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "sandfleet-gateway", "namespace": "sandfleet-system"}
    ]


def test_kopf_peering_crds_define_both_peering_kinds_kopf_looks_for() -> None:
    found = {
        (d["spec"]["group"], d["spec"]["names"]["plural"], d["spec"]["scope"])
        for d in documents(MANIFESTS / "crds" / "kopf-peering.yaml")
    }
    assert found == {
        ("kopf.dev", "clusterkopfpeerings", "Cluster"),
        ("kopf.dev", "kopfpeerings", "Namespaced"),
    }
