"""Many sandbox pods on the one node: start latency and memory per pod, measured and recorded."""

from __future__ import annotations

import asyncio
import statistics
import time

import pytest

from tests.cluster.harness.cluster_access import ClusterUnderTest
from tests.cluster.harness.kube_api import JsonObject, KubeApi
from tests.cluster.harness.measurements import MIB, pod_working_sets, record, used_memory_bytes
from tests.cluster.harness.sandbox_pods import failure_of, is_ready, runtime_pod
from tests.support.stats import percentile

pytestmark = [pytest.mark.cluster, pytest.mark.slow]

LATENCY_PODS = 50
DENSITY_PODS = 200


async def start_pods(
    kube: KubeApi, namespace: str, manifests: list[JsonObject], timeout_s: float
) -> tuple[dict[str, float], dict[str, float]]:
    """Create the pods at once; return seconds from each create to Running and to Ready.

    A watch sees each transition as it happens (list polling would quantize the latency).
    The API server may end a watch early: an ERROR event ("Too large resource version" when
    its watch cache lags the list, as after the 200-pod test's deletions) or a closed stream.
    Then the pods are listed again and watched from there, as an informer does.
    """
    pods = f"/api/v1/namespaces/{namespace}/pods"
    created: dict[str, float] = {}
    running: dict[str, float] = {}
    ready: dict[str, float] = {}
    started = time.monotonic()
    deadline = started + timeout_s
    rewatches: list[str] = []

    def seen(pod: JsonObject) -> None:
        name, now = pod["metadata"]["name"], time.monotonic()
        if name not in created:
            return  # an earlier batch's pod
        failure = failure_of(pod)
        assert failure is None, failure
        if (pod.get("status") or {}).get("phase") == "Running":
            running.setdefault(name, now - created[name])
        if is_ready(pod):
            ready.setdefault(name, now - created[name])

    async def create(manifest: JsonObject) -> None:
        created[manifest["metadata"]["name"]] = time.monotonic()
        await kube.checked("POST", pods, manifest)

    listing = await kube.checked("GET", pods)
    creating = asyncio.gather(*(create(m) for m in manifests))
    try:
        while len(ready) < len(manifests) and time.monotonic() < deadline:
            if rewatches:
                listing = await kube.checked("GET", pods)
                for pod in listing["items"]:
                    seen(pod)
            version = listing["metadata"]["resourceVersion"]
            left = max(1, int(deadline - time.monotonic()))
            watch = kube.watch(f"{pods}?resourceVersion={version}", left)
            try:
                async for event in watch:
                    if event["type"] == "ERROR":
                        rewatches.append(str(event["object"].get("message", event["object"])))
                        break
                    if event["type"] in {"ADDED", "MODIFIED"}:
                        seen(event["object"])
                    if len(ready) == len(manifests) or time.monotonic() > deadline:
                        break
                else:
                    rewatches.append("the watch ended")
            finally:
                await watch.aclose()
    finally:
        await creating
    elapsed = time.monotonic() - started
    assert len(ready) == len(manifests), (
        f"{len(ready)}/{len(manifests)} ready after {elapsed:.0f}s (limit {timeout_s}s);"
        f" watches ended early: {rewatches[:5]}"
    )
    return running, ready


def manifests(
    image: str, cluster_under_test: ClusterUnderTest, count: int, prefix: str
) -> list[JsonObject]:
    return [
        runtime_pod(f"{prefix}-{i}", image, f"token-{i}", cluster_under_test.image_pull_policy)
        for i in range(count)
    ]


async def delete_all_pods(kube: KubeApi, namespace: str) -> None:
    pods = f"/api/v1/namespaces/{namespace}/pods"
    await kube.checked("DELETE", pods)
    await kube.wait_for(pods, lambda r: not r.body.get("items"), timeout_s=600, interval_s=2)


def summarize(seconds: dict[str, float]) -> dict[str, float]:
    values = list(seconds.values())
    return {
        "p50_s": round(percentile(values, 0.5), 2),
        "p99_s": round(percentile(values, 0.99), 2),
        "max_s": round(max(values), 2),
    }


SEQUENTIAL_PODS = 10


@pytest.mark.timeout(900)
async def test_sandbox_pods_started_one_at_a_time_become_ready(
    kube: KubeApi, namespace: str, runtime_image: str, cluster_under_test: ClusterUnderTest
) -> None:
    running: dict[str, float] = {}
    ready: dict[str, float] = {}
    for manifest in manifests(runtime_image, cluster_under_test, SEQUENTIAL_PODS, "single"):
        one_running, one_ready = await start_pods(kube, namespace, [manifest], timeout_s=120)
        running |= one_running
        ready |= one_ready

    record(
        "pod-start-latency-sequential",
        {"pods": SEQUENTIAL_PODS, "to_running": summarize(running), "to_ready": summarize(ready)},
    )
    await delete_all_pods(kube, namespace)


@pytest.mark.timeout(900)
async def test_fifty_sandbox_pods_created_at_once_all_become_ready(
    kube: KubeApi, namespace: str, runtime_image: str, cluster_under_test: ClusterUnderTest
) -> None:
    batch = manifests(runtime_image, cluster_under_test, LATENCY_PODS, "latency")

    running, ready = await start_pods(kube, namespace, batch, timeout_s=600)

    record(
        "pod-start-latency",
        {"pods": LATENCY_PODS, "to_running": summarize(running), "to_ready": summarize(ready)},
    )
    await delete_all_pods(kube, namespace)


DENSITY_WAVE = 25
"""Pods started together in the density test: 200 Python agents starting at once on two
shared cores only measure the scheduler of the host, and starve everyone else on it."""


@pytest.mark.timeout(1800)
async def test_two_hundred_sandbox_pods_run_on_the_node_at_once(
    kube: KubeApi, namespace: str, runtime_image: str, cluster_under_test: ClusterUnderTest
) -> None:
    if not cluster_under_test.local:
        pytest.skip("node memory is measured on this machine: local cluster only")
    before = used_memory_bytes()
    batch = manifests(runtime_image, cluster_under_test, DENSITY_PODS, "density")
    running: dict[str, float] = {}
    ready: dict[str, float] = {}
    started = time.monotonic()

    for wave in range(0, DENSITY_PODS, DENSITY_WAVE):
        wave_running, wave_ready = await start_pods(
            kube, namespace, batch[wave : wave + DENSITY_WAVE], timeout_s=600
        )
        running |= wave_running
        ready |= wave_ready

    all_ready_s = time.monotonic() - started
    pods = (await kube.checked("GET", f"/api/v1/namespaces/{namespace}/pods"))["items"]
    assert sum(map(is_ready, pods)) == DENSITY_PODS  # all 200 at once, none restarted
    assert not [f for f in map(failure_of, pods) if f]
    working_sets = list(pod_working_sets([p["metadata"]["uid"] for p in pods]).values())
    node_delta_per_pod = (used_memory_bytes() - before) / DENSITY_PODS
    record(
        "density",
        {
            "pods": DENSITY_PODS,
            "wave": DENSITY_WAVE,
            "seconds_to_all_ready": round(all_ready_s, 1),
            "to_running": summarize(running),
            "to_ready": summarize(ready),
            "node_memory_per_pod_mib": round(node_delta_per_pod / MIB, 1),
            "working_set_per_pod_mib": {
                "mean": round(statistics.mean(working_sets) / MIB, 1),
                "p50": round(percentile([float(w) for w in working_sets], 0.5) / MIB, 1),
                "max": round(max(working_sets) / MIB, 1),
            },
        },
    )
    await delete_all_pods(kube, namespace)

    # A sandbox that idles must stay small, or a node holds far fewer than maxPods of them.
    assert statistics.mean(working_sets) < 64 * MIB
