"""The CRDs in manifests/crds against the real API server: served, examples accepted, defaults
filled in, invalid specs rejected with a readable message, status and scale subresources."""

from __future__ import annotations

import asyncio
import os
import secrets
import shutil
import time
from pathlib import Path
from typing import Any, NamedTuple

import pytest
import yaml

from sandfleet import api
from tests.cluster.harness.cluster_access import ClusterUnderTest, unavailable
from tests.cluster.harness.kube_api import JsonObject, KubeApi, condition_is_true
from tests.cluster.harness.layout import Layout

pytestmark = pytest.mark.cluster

MANIFESTS = Path(__file__).resolve().parents[2] / "manifests"
CRDS_PATH = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
PLURALS = {
    api.SESSION_KIND: api.SESSION_PLURAL,
    api.TEMPLATE_KIND: api.TEMPLATE_PLURAL,
    api.POOL_KIND: api.POOL_PLURAL,
    api.SERVED_MODEL_KIND: api.SERVED_MODEL_PLURAL,
}


def documents(path: Path) -> list[JsonObject]:
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc]


def crd_documents() -> list[JsonObject]:
    return [doc for path in sorted((MANIFESTS / "crds").glob("*.yaml")) for doc in documents(path)]


def served_schema_is(kube: KubeApi, crd: JsonObject) -> bool:
    """Whether the API server publishes this CRD's current schema: a replaced CRD's handlers
    and its OpenAPI are rebuilt a moment after the update is stored."""
    spec = crd["spec"]
    version = spec["versions"][0]
    published = kube.request_sync("GET", f"/openapi/v3/apis/{spec['group']}/{version['name']}")
    if published.status != 200:
        return False
    key = ".".join([*reversed(spec["group"].split(".")), version["name"], spec["names"]["kind"]])
    served = published.body.get("components", {}).get("schemas", {}).get(key)
    wanted = version["schema"]["openAPIV3Schema"]["properties"]
    # The published spec and status schemas are the CRD's, verbatim.
    return served is not None and all(
        served["properties"].get(part) == wanted.get(part) for part in ("spec", "status")
    )


def install(kube: KubeApi, crd: JsonObject, timeout_s: float = 60) -> None:
    """Create the CRD or replace it with this version; return once it is served as written."""
    path = f"{CRDS_PATH}/{crd['metadata']['name']}"
    deadline = time.monotonic() + timeout_s
    while True:  # another test session may install at the same time: retry on a conflict
        current = kube.request_sync("GET", path)
        if current.status == 404:
            answer = kube.request_sync("POST", CRDS_PATH, crd)
        else:
            version = current.body["metadata"]["resourceVersion"]
            body = {**crd, "metadata": {**crd["metadata"], "resourceVersion": version}}
            answer = kube.request_sync("PUT", path, body)
        if answer.status < 300:
            break
        assert answer.status == 409 and time.monotonic() < deadline, answer.body
    while not (
        condition_is_true(kube.request_sync("GET", path).body, "Established")
        and (crd["spec"]["group"] != api.GROUP or served_schema_is(kube, crd))
    ):
        assert time.monotonic() < deadline, f"{path} not established and served"
        time.sleep(0.2)


@pytest.fixture(scope="module")
def crds(kube: KubeApi) -> list[JsonObject]:
    """Every CRD in manifests/crds, installed and served; left installed for other tests."""
    installed = crd_documents()
    for crd in installed:
        install(kube, crd)
    return installed


def collection(namespace: str, kind: str) -> str:
    return f"/apis/{api.API_VERSION}/namespaces/{namespace}/{PLURALS[kind]}"


def session(name: str, **spec: Any) -> JsonObject:
    return {
        "apiVersion": api.API_VERSION,
        "kind": api.SESSION_KIND,
        "metadata": {"name": name},
        "spec": spec,
    }


def contains(stored: Any, given: Any) -> bool:
    """stored has everything given has (the API server may add defaults, never drop a field)."""
    if isinstance(given, dict):
        return isinstance(stored, dict) and all(
            k in stored and contains(stored[k], v) for k, v in given.items()
        )
    if isinstance(given, list):
        return (
            isinstance(stored, list)
            and len(stored) == len(given)
            and all(contains(s, g) for s, g in zip(stored, given, strict=True))
        )
    return bool(stored == given)


AGENT = {"model": "m", "prompt": "p"}


async def test_the_crds_are_served_with_short_names_categories_and_subresources(
    kube: KubeApi, crds: list[JsonObject]
) -> None:
    discovery = await kube.checked("GET", f"/apis/{api.API_VERSION}")
    resources = {r["name"]: r for r in discovery["resources"]}
    assert resources[api.SESSION_PLURAL]["shortNames"] == ["sbx"]
    assert resources[api.TEMPLATE_PLURAL]["shortNames"] == ["sbxt"]
    assert resources[api.POOL_PLURAL]["shortNames"] == ["sbxp"]
    assert all(resources[p]["categories"] == ["sandfleet"] for p in PLURALS.values())
    assert {f"{api.SESSION_PLURAL}/status", f"{api.POOL_PLURAL}/status"} <= set(resources)
    assert resources[f"{api.POOL_PLURAL}/scale"]["kind"] == "Scale"
    peering = await kube.checked("GET", "/apis/kopf.dev/v1")
    assert {r["name"] for r in peering["resources"]} == {"kopfpeerings", "clusterkopfpeerings"}


@pytest.mark.parametrize("example", sorted((MANIFESTS / "examples").glob("*.yaml")), ids=str)
async def test_every_example_is_accepted_and_stored_without_losing_a_field(
    kube: KubeApi, crds: list[JsonObject], namespace: str, example: Path
) -> None:
    for doc in documents(example):
        if doc["apiVersion"] == api.API_VERSION:
            path = collection(namespace, doc["kind"])
        else:
            path = f"/api/{doc['apiVersion']}/namespaces/{namespace}/{doc['kind'].lower()}s"
        dry = await kube.checked("POST", f"{path}?dryRun=All", doc)
        created = await kube.checked("POST", path, doc)
        stored = await kube.checked("GET", f"{path}/{doc['metadata']['name']}")
        for answer in (dry, created, stored):
            assert contains(
                answer.get("spec", answer.get("data")), doc.get("spec", doc.get("data"))
            )


async def test_the_api_server_fills_in_the_defaults(
    kube: KubeApi, crds: list[JsonObject], namespace: str
) -> None:
    files = [{"path": "a", "content": "x"}]
    body = session("defaults", template={}, agent=AGENT, network={}, files=files)
    spec = (await kube.checked("POST", collection(namespace, api.SESSION_KIND), body))["spec"]
    assert spec["agent"] == {
        **AGENT,
        "maxTurns": 100,
        "toolTimeoutSeconds": 120,
        "recordTokens": False,
    }
    assert spec["template"] == {"workdir": api.DEFAULT_WORKDIR}
    assert spec["network"] == {"egress": api.EgressMode.NONE.value}
    assert spec["files"] == [{"path": "a", "content": "x", "mode": 0o644}]
    assert "lifecycle" not in spec  # unset lifecycle values fall back to the template's
    pool = {"apiVersion": api.API_VERSION, "kind": api.POOL_KIND, "metadata": {"name": "p"}}
    stored_pool = await kube.checked("POST", collection(namespace, api.POOL_KIND), pool)
    assert stored_pool["spec"] == {"replicas": 1, "recycle": False, "maxUses": 20}
    template = {**pool, "kind": api.TEMPLATE_KIND, "spec": {}}
    stored = await kube.checked("POST", collection(namespace, api.TEMPLATE_KIND), template)
    assert stored["spec"] == {
        "pod": {"workdir": api.DEFAULT_WORKDIR},
        "network": {"egress": "None"},
        "lifecycle": {},
    }


class Rejection(NamedTuple):
    case: str
    kind: str
    spec: JsonObject
    expected: list[str]
    """Parts of the API server's message: the field path and what is wrong with it."""


INVALID = [
    Rejection(
        "unknown egress mode",
        api.SESSION_KIND,
        {"network": {"egress": "Intranet"}},
        ['spec.network.egress: Unsupported value: "Intranet"', '"None", "Internet", "All"'],
    ),
    Rejection(
        "negative maxTurns",
        api.SESSION_KIND,
        {"agent": {**AGENT, "maxTurns": -1}},
        ["spec.agent.maxTurns", "should be greater than or equal to 1"],
    ),
    Rejection(
        "missing agent prompt",
        api.SESSION_KIND,
        {"agent": {"model": "m"}},
        ["spec.agent.prompt: Required value"],
    ),
    Rejection(
        "template and poolRef",
        api.SESSION_KIND,
        {"template": {"image": "busybox"}, "poolRef": {"name": "warm"}},
        ["spec.poolRef", "set at most one of templateRef, template and poolRef"],
    ),
    Rejection(
        "file with two sources",
        api.SESSION_KIND,
        {"files": [{"path": "a", "content": "x", "configMapKeyRef": {"name": "c", "key": "k"}}]},
        ["spec.files[0]", "exactly one of content, configMapKeyRef and secretKeyRef"],
    ),
    Rejection(
        "file without a source",
        api.SESSION_KIND,
        {"files": [{"path": "a"}]},
        ["spec.files[0]", "exactly one of content, configMapKeyRef and secretKeyRef"],
    ),
    Rejection(
        "two files at one path",
        api.SESSION_KIND,
        {"files": [{"path": "a", "content": "x"}, {"path": "a", "content": "y"}]},
        ["spec.files[1]: Duplicate value"],
    ),
    Rejection(
        "file mode beyond 0777",
        api.SESSION_KIND,
        {"files": [{"path": "a", "content": "x", "mode": 0o1000}]},
        ["spec.files[0].mode", "should be less than or equal to 511"],
    ),
    Rejection(
        "env name that is no shell variable",
        api.SESSION_KIND,
        {"env": [{"name": "MY-VAR", "value": "1"}]},
        ["spec.env[0].name", "should match"],
    ),
    Rejection(
        "temperature that is no decimal",
        api.SESSION_KIND,
        {"agent": {**AGENT, "temperature": "warm"}},
        ["spec.agent.temperature", "should match"],
    ),
    Rejection(
        "topP that is no decimal",
        api.SESSION_KIND,
        {"agent": {**AGENT, "topP": "high"}},
        ["spec.agent.topP", "should match"],
    ),
    Rejection(
        "extraBody that is an object, not JSON text",
        api.SESSION_KIND,
        {"agent": {**AGENT, "extraBody": {"top_k": 20}}},
        ["spec.agent.extraBody", "must be of type string"],
    ),
    Rejection(
        "relative workdir",
        api.SESSION_KIND,
        {"template": {"workdir": "testbed"}},
        ["spec.template.workdir", "should match '^/'"],
    ),
    Rejection(
        "pool with templateRef and template",
        api.POOL_KIND,
        {"templateRef": {"name": "t"}, "template": {}},
        ["spec.template", "set at most one of templateRef and template"],
    ),
    Rejection(
        "negative pool replicas",
        api.POOL_KIND,
        {"replicas": -1},
        ["spec.replicas", "should be greater than or equal to 0"],
    ),
]


@pytest.mark.parametrize("rejection", INVALID, ids=[r.case for r in INVALID])
async def test_an_invalid_spec_is_rejected_with_a_readable_message(
    kube: KubeApi, crds: list[JsonObject], rejection: Rejection
) -> None:
    body = {
        "apiVersion": api.API_VERSION,
        "kind": rejection.kind,
        "metadata": {"name": "x"},
        "spec": rejection.spec,
    }
    path = f"{collection('default', rejection.kind)}?dryRun=All"  # nothing is ever stored
    answer = await kube.request("POST", path, body)
    assert answer.status == 422, answer.body
    for part in rejection.expected:
        assert part in answer.body["message"], answer.body["message"]


async def test_what_a_session_asked_for_cannot_change_but_its_lifecycle_can(
    kube: KubeApi, crds: list[JsonObject], namespace: str
) -> None:
    sessions = collection(namespace, api.SESSION_KIND)
    spec = {"templateRef": {"name": "t"}, "env": [{"name": "A", "value": "1"}], "agent": AGENT}
    spec["files"] = [{"path": "a", "content": "x"}]
    managed = await kube.checked("POST", sessions, session("managed", **spec))
    await kube.checked("POST", sessions, session("raw", poolRef={"name": "warm"}))
    changes = [
        ("managed", "agent", {"agent": {"maxTurns": 5}}),
        ("managed", "agent", {"agent": None}),
        ("raw", "agent", {"agent": AGENT}),
        ("managed", "templateRef", {"templateRef": {"name": "other"}}),
        ("managed", "template", {"templateRef": None, "template": {"image": "busybox"}}),
        ("raw", "poolRef", {"poolRef": None}),
        ("managed", "env", {"env": [{"name": "A", "value": "2"}]}),
        ("raw", "env", {"env": [{"name": "A", "value": "1"}]}),
        ("managed", "files", {"files": None}),
        ("managed", "network", {"network": {"egress": "All"}}),
    ]
    for name, field, change in changes:
        answer = await kube.request("PATCH", f"{sessions}/{name}", {"spec": change},
                                    content_type="application/merge-patch+json")  # fmt: skip
        assert answer.status == 422, (name, change, answer.body)
        assert f"spec.{field} is immutable" in answer.body["message"]
    allowed = {"lifecycle": {"idleTimeoutSeconds": 60}}
    patched = await kube.checked("PATCH", f"{sessions}/managed", {"spec": allowed},
                                 content_type="application/merge-patch+json")  # fmt: skip
    assert patched["spec"]["lifecycle"] == {"idleTimeoutSeconds": 60}
    assert patched["metadata"]["generation"] == managed["metadata"]["generation"] + 1


FULL_STATUS: JsonObject = {
    "phase": "Running",
    "observedGeneration": 1,
    "conditions": [
        {
            "type": "Ready",
            "status": "True",
            "reason": "RuntimeBound",
            "message": "bound to runtime",
            "lastTransitionTime": "2026-01-02T03:04:05Z",
            "observedGeneration": 1,
        },
        {"type": "Completed", "status": "False", "reason": "Running"},
    ],
    "podName": "s-1",
    "podIP": "10.244.0.7",
    "nodeName": "localhost",
    "poolName": "warm",
    "tokenSecretName": "s-1-token",
    "startTime": "2026-01-02T03:04:00Z",
    "readyTime": "2026-01-02T03:04:05Z",
    "completionTime": "2026-01-02T03:09:05Z",
    "restarts": 1,
    "reclaimReason": "ttl",
    "trajectory": "file:///var/lib/sandfleet/trajectories/ns/s/uid.jsonl",
    "agent": {
        "turns": 7,
        "promptTokens": 12000,
        "completionTokens": 900,
        "stopReason": "submitted",
        "result": "done",
        "error": "",
    },
}


async def test_status_is_written_only_through_the_status_subresource(
    kube: KubeApi, crds: list[JsonObject], namespace: str
) -> None:
    sessions = collection(namespace, api.SESSION_KIND)
    merge = "application/merge-patch+json"
    created = await kube.checked("POST", sessions, {**session("s", agent=AGENT), "status": {}})
    assert "status" not in created
    written = await kube.checked(
        "PATCH", f"{sessions}/s/status", {"status": FULL_STATUS}, content_type=merge
    )
    assert written["status"] == FULL_STATUS  # every field the operator writes survives pruning

    respec = {"spec": {"lifecycle": {"ttlSecondsAfterFinished": 5}}, "status": {"phase": "Failed"}}
    updated = await kube.checked("PATCH", f"{sessions}/s", respec, content_type=merge)
    assert updated["status"] == FULL_STATUS
    assert updated["metadata"]["generation"] == 2

    wrong = await kube.request(
        "PATCH", f"{sessions}/s/status", {"status": {"phase": "Done"}}, content_type=merge
    )
    assert wrong.status == 422
    assert 'status.phase: Unsupported value: "Done"' in wrong.body["message"]


async def test_a_pool_scales_through_the_scale_subresource(
    kube: KubeApi, crds: list[JsonObject], namespace: str
) -> None:
    pools = collection(namespace, api.POOL_KIND)
    merge = "application/merge-patch+json"
    pool = {"apiVersion": api.API_VERSION, "kind": api.POOL_KIND, "metadata": {"name": "warm"}}
    await kube.checked("POST", pools, {**pool, "spec": {"replicas": 2}})
    selector = f"{api.Label.POOL}=warm,{api.Label.STATE}={api.PodState.IDLE}"
    status = {"replicas": 1, "startingReplicas": 1, "claims": 3, "selector": selector}
    await kube.checked("PATCH", f"{pools}/warm/status", {"status": status}, content_type=merge)

    scale = await kube.checked("GET", f"{pools}/warm/scale")
    assert scale["spec"] == {"replicas": 2}
    assert scale["status"] == {"replicas": 1, "selector": selector}
    await kube.checked(
        "PATCH", f"{pools}/warm/scale", {"spec": {"replicas": 5}}, content_type=merge
    )
    assert (await kube.checked("GET", f"{pools}/warm"))["spec"]["replicas"] == 5


async def test_kopf_can_announce_and_retire_peers_in_a_cluster_peering(
    kube: KubeApi, crds: list[JsonObject]
) -> None:
    path = "/apis/kopf.dev/v1/clusterkopfpeerings"
    name = f"sf-test-{secrets.token_hex(4)}"
    merge = "application/merge-patch+json"
    body = {"apiVersion": "kopf.dev/v1", "kind": "ClusterKopfPeering", "metadata": {"name": name}}
    await kube.checked("POST", path, body)
    try:
        peer = {"priority": 100, "lifetime": 60, "lastseen": "2026-01-02T03:04:05.123456+00:00"}
        # the patches kopf sends: an entry per replica identity, and null to remove one
        announced = await kube.checked(
            "PATCH", f"{path}/{name}", {"status": {"host@1": peer}}, content_type=merge
        )
        assert announced["status"] == {"host@1": peer}
        retired = await kube.checked(
            "PATCH", f"{path}/{name}", {"status": {"host@1": None}}, content_type=merge
        )
        assert retired.get("status", {}) == {}
    finally:
        await kube.request("DELETE", f"{path}/{name}")


async def test_kubectl_explain_teaches_the_agent_fields(
    cluster_under_test: ClusterUnderTest, crds: list[JsonObject], tmp_path: Path
) -> None:
    kubectl = Layout.default().binary("kubectl")
    if not kubectl.exists():
        found = shutil.which("kubectl")
        if found is None:
            unavailable("no kubectl: neither in the test cluster's cache nor on PATH")
        kubectl = Path(found)
    process = await asyncio.create_subprocess_exec(
        str(kubectl),
        f"--cache-dir={tmp_path}",  # never a discovery cache from an older schema
        "explain",
        "sandboxsession.spec.agent",
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env={**os.environ, "KUBECONFIG": str(cluster_under_test.kubeconfig)},
    )
    stdout, stderr = await asyncio.wait_for(process.communicate(), timeout=60)
    assert process.returncode == 0, stderr.decode()
    text = " ".join(stdout.decode().split())
    session_crd = next(c for c in crds if c["spec"]["names"]["kind"] == api.SESSION_KIND)
    agent = session_crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"][
        "properties"
    ]["agent"]
    assert " ".join(agent["description"].split()) in text
    max_turns = " ".join(agent["properties"]["maxTurns"]["description"].split())
    assert f"maxTurns <integer> {max_turns}" in text
    assert "prompt <string> -required-" in text
