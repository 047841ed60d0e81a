"""The suspend benchmark's set-up on the running test cluster: a fresh `sf-bench-suspend-*`
namespace, an operator process serving only it (production intervals, a snapshot volume in
the bench's folder), a warm SandboxPool of real runtime pods whose refill stays live, and a
watch of the namespace's sessions. Everything is removed afterwards. Never run while tests
use the cluster (take /tmp/sandfleet-cluster.lock)."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import dataclasses
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from bench.operator_bench.launcher import BenchOperator, running_cluster
from bench.operator_bench.namespaces import (
    create_namespace,
    delete_namespace,
    new_name,
    strip_finalizers,
)
from bench.suspend_bench.session_watch import SessionWatch
from sandfleet.api import API_VERSION, POOL_PLURAL, SESSION_KIND, SESSION_PLURAL, Label, PodState
from sandfleet.clients.runtime.client import RuntimeClient
from sandfleet.kube import KubeClient, KubeConfig, resource_path
from tests.cluster.harness.kube_api import KubeApi
from tests.cluster.harness.operator_harness import install_api, metrics_reader_token

POOL = "warm"


@dataclasses.dataclass
class SuspendBench:
    kube: KubeClient
    namespace: str
    operator: BenchOperator
    watch: SessionWatch
    pool_size: int
    store_dir: Path
    """The operator's snapshot volume (SANDFLEET_OPERATOR_SNAPSHOT_DIR)."""

    def path(self, name: str | None = None) -> str:
        return resource_path(API_VERSION, SESSION_PLURAL, self.namespace, name)

    async def create(self, name: str, spec: dict[str, Any]) -> None:
        body = {"apiVersion": API_VERSION, "kind": SESSION_KIND, "metadata": {"name": name},
                "spec": spec}  # fmt: skip
        await self.kube.create(self.path(), body)

    async def set_suspend(self, name: str, suspend: bool) -> None:
        await self.kube.patch(self.path(name), {"spec": {"suspend": suspend}})

    async def pool_idle(self) -> int:
        """Idle pool pods whose runtime is Ready (what a claim can take now)."""
        selector = f"{Label.POOL}={POOL},{Label.STATE}={PodState.IDLE}"
        pods = await self.kube.list(
            resource_path("v1", "pods", self.namespace), label_selector=selector
        )
        return sum(
            1 for pod in pods if _ready(pod) and not pod["metadata"].get("deletionTimestamp")
        )

    async def until_pool_full(self, timeout_s: float = 300.0) -> float:
        """Seconds until every pool pod is idle and Ready again (a resume is then warm)."""
        started = time.monotonic()
        while await self.pool_idle() < self.pool_size:
            if time.monotonic() - started > timeout_s:
                raise TimeoutError(f"pool {POOL} not full after {timeout_s}s")
            await asyncio.sleep(0.1)
        return time.monotonic() - started

    async def runtime(self, body: dict[str, Any]) -> RuntimeClient:
        """A runtime client for the session's sandbox, with its token (its Secret)."""
        status = body["status"]
        secret = await self.kube.get(
            resource_path("v1", "secrets", self.namespace, status["tokenSecretName"])
        )
        token = base64.b64decode(secret["data"]["token"]).decode()
        return RuntimeClient(f"{status['podIP']}:50051", token, rpc_timeout_s=300)


@contextlib.asynccontextmanager
async def suspend_bench_on_cluster(
    workdir: Path,
    *,
    pool_size: int,
    recycle: bool,
    operator_env: dict[str, str],
    cpu_request: str | None = None,
) -> AsyncIterator[SuspendBench]:
    """`cpu_request`: the pool pods' (None: the operator's default, 10m, which gets a
    sandbox almost no CPU on a busy node: its cgroup weight is a hundredth of a process's)."""
    _, admin_kubeconfig, images = running_cluster()
    await asyncio.to_thread(workdir.mkdir, parents=True, exist_ok=True)
    admin_api = KubeApi.from_kubeconfig(admin_kubeconfig)
    install_api(admin_api)
    namespace = new_name("suspend")
    config = KubeConfig.load(admin_kubeconfig)
    async with KubeClient(config, qps=1000, burst=2000, connection_limit=200) as kube:
        await create_namespace(kube, namespace)
        operator = BenchOperator(
            admin_kubeconfig, images["runtime"].ref, workdir, namespaces=[namespace],
            env=operator_env,
        )  # fmt: skip
        operator.metrics_token = metrics_reader_token(admin_api)
        try:
            await asyncio.to_thread(operator.start)
            spec: dict[str, Any] = {"replicas": pool_size, "recycle": recycle}
            if cpu_request is not None:
                spec["template"] = {"resources": {"requests": {"cpu": cpu_request}}}
            pool = {"apiVersion": API_VERSION, "kind": "SandboxPool", "metadata": {"name": POOL},
                    "spec": spec}  # fmt: skip
            await kube.create(resource_path(API_VERSION, POOL_PLURAL, namespace), pool)
            async with SessionWatch(kube, namespace) as watch:
                store = Path(operator._env["SANDFLEET_OPERATOR_SNAPSHOT_DIR"])
                yield SuspendBench(kube, namespace, operator, watch, pool_size, store)
        finally:
            await asyncio.to_thread(operator.stop)
            # No operator is left to run the finalizers: the namespace must not hang on them.
            await strip_finalizers(kube, namespace)
            await delete_namespace(kube, namespace)


def _ready(pod: dict[str, Any]) -> bool:
    conditions = (pod.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)
