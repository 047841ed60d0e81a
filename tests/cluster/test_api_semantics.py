"""The API server behaviours the operator relies on, checked against a real one."""

from __future__ import annotations

import asyncio
import time

import pytest

from tests.cluster.harness.kube_api import ApiError, JsonObject, KubeApi, condition_is_true

pytestmark = pytest.mark.cluster

GROUP = "tests.sandfleet.dev"
CRD_NAME = f"widgets.{GROUP}"
CRD: JsonObject = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": CRD_NAME},
    "spec": {
        "group": GROUP,
        "scope": "Namespaced",
        "names": {"plural": "widgets", "singular": "widget", "kind": "Widget"},
        "versions": [
            {
                "name": "v1",
                "served": True,
                "storage": True,
                "subresources": {"status": {}},
                "schema": {
                    "openAPIV3Schema": {
                        "type": "object",
                        "properties": {
                            "spec": {
                                "type": "object",
                                "required": ["size"],
                                "properties": {
                                    "size": {"type": "integer", "minimum": 1},
                                    "color": {"type": "string", "enum": ["red", "blue"]},
                                },
                            },
                            "status": {
                                "type": "object",
                                "properties": {"phase": {"type": "string"}},
                            },
                        },
                    }
                },
            }
        ],
    },
}


@pytest.fixture
async def widgets(kube: KubeApi, namespace: str) -> str:
    """The Widget CRD (created once, established), as the collection path in `namespace`."""
    created = await kube.request(
        "POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", CRD
    )
    assert created.status in (201, 409), created.body
    await kube.wait_for(
        f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{CRD_NAME}",
        lambda r: condition_is_true(r.body, "Established"),
        timeout_s=30,
    )
    path = f"/apis/{GROUP}/v1/namespaces/{namespace}/widgets"
    # Discovery of a new CRD reaches every API server handler a moment after Established.
    await kube.wait_for(path, lambda r: r.status == 200, timeout_s=30)
    return path


def widget(name: str, **spec: object) -> JsonObject:
    return {"apiVersion": f"{GROUP}/v1", "kind": "Widget", "metadata": {"name": name}, "spec": spec}


async def test_status_is_written_only_through_the_status_subresource(
    kube: KubeApi, widgets: str
) -> None:
    created = await kube.checked("POST", widgets, {**widget("a", size=1), "status": {"phase": "X"}})
    assert "status" not in created  # status in a create is dropped when the subresource is on

    with_status = {**created, "status": {"phase": "Running"}, "spec": {"size": 5}}
    updated = await kube.checked("PUT", f"{widgets}/a/status", with_status)
    assert updated["status"] == {"phase": "Running"}
    assert updated["spec"] == {"size": 1}  # the status endpoint ignores spec changes

    main = {**updated, "status": {"phase": "Ignored"}, "spec": {"size": 2}}
    replaced = await kube.checked("PUT", f"{widgets}/a", main)
    assert replaced["spec"] == {"size": 2}
    assert replaced["status"] == {"phase": "Running"}  # and the main endpoint ignores status


async def test_unknown_fields_are_pruned_and_invalid_values_are_rejected(
    kube: KubeApi, widgets: str
) -> None:
    created = await kube.checked("POST", widgets, widget("b", size=3, shape="round"))
    assert created["spec"] == {"size": 3}

    with pytest.raises(ApiError) as too_small:
        await kube.checked("POST", widgets, widget("c", size=0))
    assert too_small.value.status == 422
    with pytest.raises(ApiError) as bad_enum:
        await kube.checked("POST", widgets, widget("d", size=1, color="green"))
    assert bad_enum.value.status == 422
    with pytest.raises(ApiError) as missing:
        await kube.checked("POST", widgets, widget("e", color="red"))
    assert missing.value.status == 422


async def test_an_update_with_a_stale_resource_version_gets_409_conflict(
    kube: KubeApi, widgets: str
) -> None:
    stale = await kube.checked("POST", widgets, widget("f", size=1))
    fresh = await kube.checked("PUT", f"{widgets}/f", {**stale, "spec": {"size": 2}})
    assert fresh["metadata"]["resourceVersion"] != stale["metadata"]["resourceVersion"]

    conflict = await kube.request("PUT", f"{widgets}/f", {**stale, "spec": {"size": 3}})

    assert conflict.status == 409
    assert conflict.body["reason"] == "Conflict"
    assert (await kube.checked("GET", f"{widgets}/f"))["spec"] == {"size": 2}


async def test_a_finalizer_holds_deletion_until_it_is_removed(kube: KubeApi, widgets: str) -> None:
    body = widget("g", size=1)
    body["metadata"]["finalizers"] = ["tests.sandfleet.dev/hold"]
    await kube.checked("POST", widgets, body)

    await kube.checked("DELETE", f"{widgets}/g")
    held = await kube.checked("GET", f"{widgets}/g")
    assert "deletionTimestamp" in held["metadata"]

    patch = {"metadata": {"finalizers": None}}
    await kube.checked("PATCH", f"{widgets}/g", patch, content_type="application/merge-patch+json")
    await kube.wait_for(f"{widgets}/g", lambda r: r.status == 404, timeout_s=10)


async def test_a_namespace_scoped_service_account_is_forbidden_by_rbac(
    kube: KubeApi, namespace: str
) -> None:
    review = {
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SubjectAccessReview",
        "spec": {
            "user": f"system:serviceaccount:{namespace}:default",
            "resourceAttributes": {"namespace": namespace, "verb": "create", "resource": "pods"},
        },
    }
    denied = await kube.checked(
        "POST", "/apis/authorization.k8s.io/v1/subjectaccessreviews", review
    )
    assert denied["status"]["allowed"] is False

    role = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "Role",
        "metadata": {"name": "pod-maker"},
        "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["create"]}],
    }
    binding = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": {"name": "pod-maker"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "pod-maker"},
        "subjects": [{"kind": "ServiceAccount", "name": "default", "namespace": namespace}],
    }
    rbac = f"/apis/rbac.authorization.k8s.io/v1/namespaces/{namespace}"
    await kube.checked("POST", f"{rbac}/roles", role)
    await kube.checked("POST", f"{rbac}/rolebindings", binding)

    # The authorizer reads RBAC from an informer cache: a new binding counts a moment later.
    deadline = time.monotonic() + 10
    while True:
        allowed = await kube.checked(
            "POST", "/apis/authorization.k8s.io/v1/subjectaccessreviews", review
        )
        if allowed["status"]["allowed"] or time.monotonic() > deadline:
            break
        await asyncio.sleep(0.2)
    assert allowed["status"]["allowed"] is True


async def test_a_watch_from_a_listed_resource_version_delivers_every_later_change(
    kube: KubeApi, namespace: str
) -> None:
    configmaps = f"/api/v1/namespaces/{namespace}/configmaps"
    listed = await kube.checked("GET", configmaps)
    watch = kube.watch(f"{configmaps}?resourceVersion={listed['metadata']['resourceVersion']}", 30)
    body = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "w"}, "data": {"k": "1"}}
    await kube.checked("POST", configmaps, body)
    await kube.checked(
        "PATCH",
        f"{configmaps}/w",
        {"data": {"k": "2"}},
        content_type="application/merge-patch+json",
    )
    seen = []
    async for event in watch:
        if event["object"]["metadata"].get("name") == "w":
            seen.append((event["type"], event["object"]["data"]["k"]))
        if len(seen) == 2:
            break
    await watch.aclose()
    assert seen == [("ADDED", "1"), ("MODIFIED", "2")]
