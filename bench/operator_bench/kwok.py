"""kwok fake nodes for the scale rounds: pods bound to them turn Running and Ready at once.

The nodes carry only the bench's own label and, besides kwok's taint, a taint of the bench's
own: the bench's template selects only them, and pods of anyone else (a kwok scale test
running beside it tolerates kwok's taint and selects type=kwok) never land on them.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from sandfleet.kube import KubeClient, resource_path
from tests.cluster.harness.layout import KWOK_NODE_ANNOTATION

NODE_LABEL = "sandfleet.dev/bench-node"
NODE_LABEL_VALUE = "kwok"
PODS_PER_NODE = 1000
"""allocatable.pods of a kwok node (tests/cluster/kwok-stages.yaml)."""


def fake_node(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "annotations": {KWOK_NODE_ANNOTATION: "fake"},
            "labels": {"kubernetes.io/hostname": name, NODE_LABEL: NODE_LABEL_VALUE},
        },
        "spec": {
            "taints": [
                {"key": KWOK_NODE_ANNOTATION, "value": "fake", "effect": "NoSchedule"},
                {"key": NODE_LABEL, "value": NODE_LABEL_VALUE, "effect": "NoSchedule"},
            ]
        },
    }


def kwok_pod_settings() -> dict[str, Any]:
    """SandboxTemplate.spec.pod that puts a session's pod on the bench's fake nodes."""
    return {
        "nodeSelector": {NODE_LABEL: NODE_LABEL_VALUE},
        "tolerations": [
            {"key": KWOK_NODE_ANNOTATION, "operator": "Exists"},
            {"key": NODE_LABEL, "operator": "Equal", "value": NODE_LABEL_VALUE},
        ],
    }


def nodes_for(sessions: int) -> int:
    """Room for every session's pod plus one node of headroom."""
    return -(-sessions // PODS_PER_NODE) + 1


def _node_ready(node: dict[str, Any]) -> bool:
    conditions = (node.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


async def create_fake_nodes(kube: KubeClient, names: list[str], timeout_s: float = 120) -> None:
    """Create (or keep) the nodes and wait until kwok reports them Ready."""
    existing = {
        n["metadata"]["name"]
        for n in await kube.list(resource_path("v1", "nodes"), label_selector=NODE_LABEL)
    }
    for name in names:
        if name not in existing:
            await kube.create(resource_path("v1", "nodes"), fake_node(name))
    deadline = time.monotonic() + timeout_s
    for name in names:
        while not _node_ready(await kube.get(resource_path("v1", "nodes", name=name))):
            if time.monotonic() > deadline:
                raise TimeoutError(f"kwok did not make node {name} Ready in {timeout_s}s")
            await asyncio.sleep(0.5)


async def delete_fake_nodes(kube: KubeClient) -> list[str]:
    """Delete every node with the bench label; returns their names."""
    nodes = await kube.list(resource_path("v1", "nodes"), label_selector=NODE_LABEL)
    names = [n["metadata"]["name"] for n in nodes]
    await asyncio.gather(*(kube.delete(resource_path("v1", "nodes", name=n)) for n in names))
    return names
