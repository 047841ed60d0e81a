"""sandfleet.kube.KubeClient against the real API server: CRUD, errors, pages, watch, auth, QPS."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from sandfleet.kube import (
    ConflictError,
    ForbiddenError,
    InvalidError,
    KubeClient,
    KubeConfig,
    NotFoundError,
    UnauthorizedError,
    WatchEvent,
    resource_path,
)
from tests.cluster.harness.cluster_access import ClusterUnderTest
from tests.cluster.harness.kube_tokens import service_account_token, token_kubeconfig

pytestmark = pytest.mark.cluster

JsonObject = dict[str, Any]


@pytest.fixture
async def client(cluster_under_test: ClusterUnderTest) -> AsyncIterator[KubeClient]:
    async with KubeClient(KubeConfig.load(cluster_under_test.kubeconfig)) as kube:
        yield kube


def configmap(name: str, labels: dict[str, str] | None = None, **data: str) -> JsonObject:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "labels": labels or {}},
        "data": data,
    }


async def test_a_configmap_is_created_read_listed_replaced_and_deleted(
    client: KubeClient, namespace: str
) -> None:
    collection = resource_path("v1", "configmaps", namespace)
    path = resource_path("v1", "configmaps", namespace, "settings")

    created = await client.create(collection, configmap("settings", {"app": "crud"}, colour="red"))
    fetched = await client.get(path)
    listed = await client.list(collection, label_selector="app=crud")

    assert created["metadata"]["uid"] == fetched["metadata"]["uid"]
    assert fetched["data"] == {"colour": "red"}
    assert [(i["kind"], i["apiVersion"], i["metadata"]["name"]) for i in listed] == [
        ("ConfigMap", "v1", "settings")
    ]

    fetched["data"] = {"colour": "blue"}
    replaced = await client.replace(path, fetched)
    assert replaced["data"] == {"colour": "blue"}
    assert replaced["metadata"]["resourceVersion"] != fetched["metadata"]["resourceVersion"]

    await client.delete(path)
    with pytest.raises(NotFoundError, match='configmaps "settings" not found') as caught:
        await client.get(path)
    assert caught.value.status == 404
    assert caught.value.reason == "NotFound"

    await client.delete(path)  # missing_ok by default: already gone is fine
    with pytest.raises(NotFoundError):
        await client.delete(path, missing_ok=False)


async def eventually(
    check: Callable[[], Awaitable[bool]], what: str, timeout_s: float = 60
) -> None:
    """Poll check() until it holds; the garbage collector works in the background."""
    deadline = time.monotonic() + timeout_s
    while not await check():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout_s}s: {what}")
        await asyncio.sleep(0.2)


async def test_delete_passes_the_propagation_policy_to_the_garbage_collector(
    client: KubeClient, namespace: str
) -> None:
    collection = resource_path("v1", "configmaps", namespace)

    async def owner_and_dependent(name: str) -> tuple[str, str]:
        owner = await client.create(collection, configmap(f"{name}-owner"))
        reference = {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "name": owner["metadata"]["name"],
            "uid": owner["metadata"]["uid"],
        }
        dependent = configmap(f"{name}-dependent")
        dependent["metadata"]["ownerReferences"] = [reference]
        await client.create(collection, dependent)
        return (
            resource_path("v1", "configmaps", namespace, f"{name}-owner"),
            resource_path("v1", "configmaps", namespace, f"{name}-dependent"),
        )

    async def gone(path: str) -> bool:
        try:
            await client.get(path)
        except NotFoundError:
            return True
        return False

    async def orphaned(path: str) -> bool:
        return not (await client.get(path))["metadata"].get("ownerReferences")

    kept_owner, kept = await owner_and_dependent("orphan")
    await client.delete(kept_owner, propagation="Orphan", grace_period_s=0)
    await eventually(lambda: gone(kept_owner), "the orphaning owner is deleted")
    await eventually(lambda: orphaned(kept), "the dependent loses its owner reference")

    removed_owner, removed = await owner_and_dependent("background")
    await client.delete(removed_owner, propagation="Background")
    await eventually(lambda: gone(removed), "the dependent is collected")
    assert await gone(removed_owner)


async def test_merge_json_and_strategic_patches_each_change_the_object(
    client: KubeClient, namespace: str
) -> None:
    await client.create(resource_path("v1", "configmaps", namespace), configmap("p", a="1", b="2"))
    path = resource_path("v1", "configmaps", namespace, "p")

    merged = await client.patch(path, {"data": {"a": "10", "b": None}})
    assert merged["data"] == {"a": "10"}

    json_patched = await client.patch(
        path,
        [
            {"op": "test", "path": "/data/a", "value": "10"},
            {"op": "add", "path": "/data/c", "value": "3"},
            {"op": "add", "path": "/metadata/labels", "value": {"patched": "json"}},
        ],
        kind="json",
    )
    assert json_patched["data"] == {"a": "10", "c": "3"}
    assert json_patched["metadata"]["labels"] == {"patched": "json"}

    strategic = await client.patch(
        path,
        {"metadata": {"labels": {"patched": "strategic"}}, "data": {"d": "4"}},
        kind="strategic",
    )
    assert strategic["metadata"]["labels"] == {"patched": "strategic"}
    assert strategic["data"] == {"a": "10", "c": "3", "d": "4"}


async def test_a_failed_json_patch_test_op_is_an_api_error_with_the_reason(
    client: KubeClient, namespace: str
) -> None:
    await client.create(resource_path("v1", "configmaps", namespace), configmap("t", a="1"))
    path = resource_path("v1", "configmaps", namespace, "t")

    with pytest.raises(InvalidError, match="rejected our request") as caught:
        await client.patch(path, [{"op": "test", "path": "/data/a", "value": "2"}], kind="json")
    assert caught.value.status == 422


async def test_creating_a_taken_name_raises_conflict_already_exists(
    client: KubeClient, namespace: str
) -> None:
    collection = resource_path("v1", "configmaps", namespace)
    await client.create(collection, configmap("twice"))

    with pytest.raises(ConflictError, match='configmaps "twice" already exists') as caught:
        await client.create(collection, configmap("twice"))

    assert (caught.value.status, caught.value.reason) == (409, "AlreadyExists")
    assert caught.value.body["details"]["name"] == "twice"


async def test_an_invalid_object_raises_invalid_naming_the_rejected_field(
    client: KubeClient, namespace: str
) -> None:
    collection = resource_path("v1", "configmaps", namespace)

    with pytest.raises(InvalidError) as caught:
        await client.create(collection, configmap("Not_A_DNS_Name"))

    error = caught.value
    assert (error.status, error.reason) == (422, "Invalid")
    assert "metadata.name" in error.message
    assert "Not_A_DNS_Name" in error.message
    assert any(cause.startswith("metadata.name: ") for cause in error.causes)


async def test_a_stale_resource_version_in_a_merge_patch_raises_conflict(
    client: KubeClient, namespace: str
) -> None:
    """The warm-pool claim is a compare-and-swap: only one of two claimers may win."""
    await client.create(resource_path("v1", "configmaps", namespace), configmap("slot", owner=""))
    path = resource_path("v1", "configmaps", namespace, "slot")
    seen = (await client.get(path))["metadata"]["resourceVersion"]

    first = {"metadata": {"resourceVersion": seen}, "data": {"owner": "first"}}
    second = {"metadata": {"resourceVersion": seen}, "data": {"owner": "second"}}
    await client.patch(path, first)
    with pytest.raises(ConflictError, match="the object has been modified") as caught:
        await client.patch(path, second)

    assert caught.value.reason == "Conflict"
    assert (await client.get(path))["data"] == {"owner": "first"}


async def test_list_follows_continue_pages_to_the_last_item(
    client: KubeClient, namespace: str
) -> None:
    collection = resource_path("v1", "configmaps", namespace)
    names = [f"item-{i:02d}" for i in range(30)]
    await asyncio.gather(
        *(client.create(collection, configmap(n, {"set": "paged"})) for n in names)
    )

    first_page = await client.request(
        "GET", collection, params={"labelSelector": "set=paged", "limit": "7"}
    )
    items, version = await client.list_with_version(
        collection, label_selector="set=paged", page_size=7
    )

    assert len(first_page["items"]) == 7
    assert first_page["metadata"]["continue"]  # the server really pages at this size
    assert sorted(i["metadata"]["name"] for i in items) == names
    assert int(version) >= max(int(i["metadata"]["resourceVersion"]) for i in items)
    assert await client.list(collection, label_selector="set=paged", page_size=7) == items


async def collect_until_deleted(
    kube: KubeClient, path: str, version: str, selector: str
) -> list[WatchEvent]:
    events = []
    async for event in kube.watch(
        path, resource_version=version, label_selector=selector, timeout_s=60
    ):
        if event.type != "BOOKMARK":
            events.append(event)
        if event.type == "DELETED":
            break
    return events


async def test_watch_delivers_added_modified_and_deleted_for_its_label_selector(
    client: KubeClient, namespace: str
) -> None:
    collection = resource_path("v1", "configmaps", namespace)
    _, version = await client.list_with_version(collection, label_selector="watched=yes")
    watching = asyncio.create_task(
        collect_until_deleted(client, collection, version, "watched=yes")
    )

    await client.create(collection, configmap("ignored", {"watched": "no"}))
    await client.create(collection, configmap("seen", {"watched": "yes"}, step="1"))
    await client.patch(
        resource_path("v1", "configmaps", namespace, "seen"), {"data": {"step": "2"}}
    )
    await client.delete(resource_path("v1", "configmaps", namespace, "seen"))
    events = await asyncio.wait_for(watching, timeout=60)

    assert [(e.type, e.object["metadata"]["name"]) for e in events] == [
        ("ADDED", "seen"),
        ("MODIFIED", "seen"),
        ("DELETED", "seen"),
    ]
    assert events[1].object["data"] == {"step": "2"}
    versions = [int(e.resource_version) for e in events]
    assert versions == sorted(versions)
    assert versions[0] > int(version)


async def test_a_bookmark_carries_the_version_past_changes_the_selector_filtered_out(
    client: KubeClient, namespace: str
) -> None:
    collection = resource_path("v1", "configmaps", namespace)
    _, version = await client.list_with_version(collection, label_selector="wanted=yes")
    unwanted = await client.create(collection, configmap("unwanted", {"wanted": "no"}))

    # The API server sends a bookmark about 2 s before a watch's timeoutSeconds runs out,
    # then ends the stream, which ends the iteration. A loaded server can miss that window:
    # like any consumer, watch again from where the last stream stopped.
    bookmarks: list[WatchEvent] = []
    for _ in range(3):
        async for event in client.watch(
            collection, resource_version=version, label_selector="wanted=yes", timeout_s=4
        ):
            assert event.type == "BOOKMARK", event
            bookmarks.append(event)
            version = event.resource_version
        if bookmarks:
            break

    assert bookmarks, "no bookmark in three watches"
    assert bookmarks[-1].object["kind"] == "ConfigMap"
    assert int(bookmarks[-1].resource_version) >= int(unwanted["metadata"]["resourceVersion"])


async def test_a_service_account_token_authenticates_but_is_forbidden_without_rbac(
    client: KubeClient, namespace: str, tmp_path: Path
) -> None:
    token = await service_account_token(client, namespace, "no-rights")
    config = KubeConfig.load(token_kubeconfig(tmp_path, client.config, {"token": token}))

    async with KubeClient(config) as limited:
        with pytest.raises(ForbiddenError) as caught:
            await limited.list(resource_path("v1", "configmaps", namespace))

    error = caught.value
    assert (error.status, error.reason) == (403, "Forbidden")
    assert f"system:serviceaccount:{namespace}:no-rights" in error.message
    assert 'cannot list resource "configmaps"' in error.message


async def test_a_rotated_token_file_is_picked_up_by_a_running_client(
    client: KubeClient, namespace: str, tmp_path: Path
) -> None:
    token_file = tmp_path / "token"
    token_file.write_text("not-a-valid-token")
    config = KubeConfig.load(token_kubeconfig(tmp_path, client.config, {"tokenFile": "token"}))
    review = {
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SelfSubjectAccessReview",
        "spec": {"resourceAttributes": {"namespace": namespace, "verb": "get", "resource": "pods"}},
    }
    path = "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews"

    async with KubeClient(config) as as_token_file:
        with pytest.raises(UnauthorizedError):
            await as_token_file.create(path, review)

        rotated = tmp_path / "token.new"
        rotated.write_text(await service_account_token(client, namespace, "rotated"))
        rotated.replace(token_file)
        answer = await as_token_file.create(path, review)

    assert answer["status"]["allowed"] is False  # authenticated now, and still without RBAC


async def test_many_concurrent_gets_all_complete_at_no_more_than_the_qps_limit(
    cluster_under_test: ClusterUnderTest, namespace: str
) -> None:
    config = KubeConfig.load(cluster_under_test.kubeconfig)
    async with KubeClient(config, qps=100, burst=20) as kube:
        await kube.create(resource_path("v1", "configmaps", namespace), configmap("hot", n="1"))
        path = resource_path("v1", "configmaps", namespace, "hot")
        minimum = kube.rate_limiter.minimum_duration(200)

        started = time.monotonic()
        answers = await asyncio.gather(*(kube.get(path) for _ in range(200)))
        elapsed = time.monotonic() - started

    assert minimum == pytest.approx(1.8)
    assert elapsed >= minimum
    assert [a["data"] for a in answers] == [{"n": "1"}] * 200
