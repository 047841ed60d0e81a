"""The gateway benchmarks' set-up on the real test cluster, shared by bench_gateway and
bench_rollouts --cluster: a fresh namespace, an operator process serving only it (with the
fleet's session key), `sandfleet-gateway` as its own process (as the gateway's
ServiceAccount, manifests/rbac), a tenant ServiceAccount's token and a SandboxPool of real
runtime pods. Everything is removed afterwards. Never run while tests use the cluster."""

from __future__ import annotations

import contextlib
import os
import secrets
import signal
from collections.abc import AsyncIterator
from pathlib import Path

from bench.gateway_bench.process import GatewayProcess
from bench.gateway_bench.rounds import POOL, GatewayBench
from bench.operator_bench.launcher import BenchOperator, running_cluster
from bench.operator_bench.namespaces import (
    create_namespace,
    delete_namespace,
    new_name,
    strip_finalizers,
)
from sandfleet.api import API_VERSION, POOL_PLURAL
from sandfleet.kube import KubeClient, KubeConfig, resource_path
from tests.cluster.harness.gateway_clients import tenant_token
from tests.cluster.harness.kube_api import KubeApi
from tests.cluster.harness.operator_harness import (
    OPERATOR_NAMESPACE,
    install_api,
    metrics_reader_token,
    service_account_kubeconfig,
)


@contextlib.asynccontextmanager
async def gateway_bench_on_cluster(
    name: str, pool_size: int, workdir: Path, *, pause_operator: bool, recycle: bool = False
) -> AsyncIterator[GatewayBench]:
    """A GatewayBench over a new `sf-bench-<name>-*` namespace whose pool of `pool_size`
    pods has been created (not yet full: `until_pool_full()` waits for it)."""
    _, admin_kubeconfig, images = running_cluster()
    admin_api = KubeApi.from_kubeconfig(admin_kubeconfig)
    install_api(admin_api)
    namespace = new_name(name)
    key_file = workdir / "session-key"
    key_file.write_text(secrets.token_urlsafe(48))
    async with KubeClient(KubeConfig.load(admin_kubeconfig), qps=1000, burst=2000) as kube:
        await create_namespace(kube, namespace)
        operator = BenchOperator(
            admin_kubeconfig, images["runtime"].ref, workdir, namespaces=[namespace],
            env={"SANDFLEET_OPERATOR_SESSION_KEY_FILE": str(key_file)},
        )  # fmt: skip
        gateway_kubeconfig = service_account_kubeconfig(
            admin_api, admin_kubeconfig, OPERATOR_NAMESPACE, "sandfleet-gateway",
            workdir / "gateway.kubeconfig", expiration_s=7200,
        )  # fmt: skip
        gateway = GatewayProcess(gateway_kubeconfig, key_file, [namespace], workdir)
        gateway.metrics_token = metrics_reader_token(admin_api)
        try:
            operator.start()
            gateway.start()
            token = await tenant_token(admin_api, namespace)
            pool = {"apiVersion": API_VERSION, "kind": "SandboxPool", "metadata": {"name": POOL},
                    "spec": {"replicas": pool_size, "recycle": recycle}}  # fmt: skip
            await kube.create(resource_path(API_VERSION, POOL_PLURAL, namespace), pool)
            yield GatewayBench(
                kube, namespace, gateway, operator, token, pool_size,
                pause_operator=pause_operator,
                api_metrics=lambda: str(admin_api.request_sync("GET", "/metrics").body["message"]),
            )  # fmt: skip
        finally:
            os.kill(operator.pid, signal.SIGCONT)  # a round may have left it paused
            gateway.stop()
            operator.stop()
            # No operator is left to run the finalizers: the namespace must not hang on them.
            await strip_finalizers(kube, namespace)
            await delete_namespace(kube, namespace)
