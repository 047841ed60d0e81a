"""An exec credential plugin kubeconfig (what EKS, GKE and AKS hand out) against the real API
server: the plugin (tests/support/kube_exec_plugin.py, a real script) prints a ServiceAccount
token made with the TokenRequest API; KubeClient authenticates with it, and fetches a fresh one
when the server rejects the first."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from sandfleet.clients.gateway.target import resolve_gateway
from sandfleet.kube import KubeClient, KubeConfig, resource_path
from tests.cluster.harness.cluster_access import ClusterUnderTest
from tests.cluster.harness.kube_tokens import service_account_token, token_kubeconfig
from tests.support.kube_exec_plugin import ExecPlugin

pytestmark = pytest.mark.cluster

SELF_REVIEW = "/apis/authentication.k8s.io/v1/selfsubjectreviews"


@pytest.fixture
async def admin(cluster_under_test: ClusterUnderTest) -> KubeClient:
    """The admin kubeconfig's client (opened by each test with `async with`)."""
    return KubeClient(await asyncio.to_thread(KubeConfig.load, cluster_under_test.kubeconfig))


async def _viewer(admin: KubeClient, namespace: str, name: str) -> str:
    """A ServiceAccount that may read the namespace (ClusterRole view), and its token."""
    token = await service_account_token(admin, namespace, name)
    await admin.create(
        resource_path("rbac.authorization.k8s.io/v1", "rolebindings", namespace),
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": {"name": f"{name}-view"},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": "view",
            },
            "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": namespace}],
        },
    )
    return token


async def test_an_exec_plugin_token_authenticates_and_lists(
    admin: KubeClient, namespace: str, tmp_path: Path
) -> None:
    async with admin:
        token = await _viewer(admin, namespace, "plugin-user")
        await admin.create(
            resource_path("v1", "configmaps", namespace),
            {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "seen"}},
        )
        plugin = ExecPlugin(tmp_path)
        plugin.set("token", token)
        path = token_kubeconfig(tmp_path, admin.config, plugin.user())

    config = await asyncio.to_thread(KubeConfig.load, path)
    async with KubeClient(config) as as_plugin:
        me = await as_plugin.create(
            SELF_REVIEW, {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"}
        )
        names = [
            item["metadata"]["name"]
            for item in await as_plugin.list(resource_path("v1", "configmaps", namespace))
        ]

    assert me["status"]["userInfo"]["username"] == f"system:serviceaccount:{namespace}:plugin-user"
    assert "seen" in names
    assert plugin.runs == 1
    # The gateway client takes the caller's token through the same credentials.
    gateway = await asyncio.to_thread(resolve_gateway, "gw:1", kubeconfig=path, environ={})
    assert gateway.current_token() == token


async def test_a_plugin_token_the_server_rejects_is_fetched_again(
    admin: KubeClient, namespace: str, tmp_path: Path
) -> None:
    async with admin:
        token = await _viewer(admin, namespace, "renewed-user")
        plugin = ExecPlugin(tmp_path)
        plugin.set("token", "revoked-or-expired")
        path = token_kubeconfig(tmp_path, admin.config, plugin.user())

    config = await asyncio.to_thread(KubeConfig.load, path)  # run 1: the rejected token
    plugin.set("token", token)
    async with KubeClient(config) as as_plugin:
        listed = await as_plugin.list(resource_path("v1", "configmaps", namespace))

    assert isinstance(listed, list)
    assert plugin.runs == 2  # one 401, one refresh, one retry
