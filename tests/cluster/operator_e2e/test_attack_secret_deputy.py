"""The operator as a confused deputy, attacked on the real cluster (issue #26, item 1).

A tenant ServiceAccount holding only the tenant Role (no Secrets) creates managed sessions
that name a Secret of its namespace it cannot read, and a model endpoint it controls: a
listener on this host, reachable from the operator process. The operator must never read the
Secret for it nor call the listener: the listener receives nothing, the session fails with a
reason naming what is missing. The Secret's owner labelling it and the platform's allowlist
naming the endpoint (the harness allows http://127.0.0.1:*) make it work as before.
"""

from __future__ import annotations

import base64
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.cluster.harness.cluster_access import ClusterUnderTest
from tests.cluster.harness.gateway_clients import tenant_token
from tests.cluster.harness.kube_api import ApiError, KubeApi
from tests.cluster.harness.operator_harness import (
    OperatorProcess,
    condition,
    create_session,
    phase_is,
    service_account_kubeconfig,
    wait_session,
)
from tests.support.scripted_openai import Reply, ScriptedOpenAIServer, submit

pytestmark = pytest.mark.cluster

DB_PASSWORD = "db-password-the-tenant-must-never-see"
NOT_ALLOWED_HOST = "127.0.0.2"
"""Reachable from the operator like 127.0.0.1, but not on the harness's allowlist."""


@pytest.fixture
async def tenant(
    kube: KubeApi, namespace: str, cluster_under_test: ClusterUnderTest, tmp_path: Path
) -> AsyncIterator[KubeApi]:
    """The API as ServiceAccount "tenant", which holds only the tenant Role."""
    await tenant_token(kube, namespace)
    path = service_account_kubeconfig(
        kube, cluster_under_test.kubeconfig, namespace, "tenant", tmp_path / "tenant.kubeconfig"
    )
    yield KubeApi.from_kubeconfig(path)


async def make_secret(kube: KubeApi, namespace: str, name: str, labels: dict[str, str]) -> None:
    body = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": name, "labels": labels},
        "data": {"password": base64.b64encode(DB_PASSWORD.encode()).decode()},
    }
    await kube.checked("POST", f"/api/v1/namespaces/{namespace}/secrets", body)


def managed(listener: ScriptedOpenAIServer, secret: str) -> dict[str, object]:
    return {
        "agent": {
            "model": "m",
            "prompt": "go",
            "maxTurns": 3,
            "baseURL": listener.base_url,
            "apiKeySecretRef": {"name": secret, "key": "password"},
        }
    }


async def failed_with(kube: KubeApi, namespace: str, name: str, reason: str) -> str:
    body = await wait_session(kube, namespace, name, phase_is("Succeeded", "Failed"), 60)
    assert body["status"]["phase"] == "Failed", body["status"]
    completed = condition(body, "Completed")
    assert completed["reason"] == reason, completed
    assert not body["status"].get("podName"), "no sandbox is made for a refused session"
    return str(completed["message"])


async def test_a_tenant_cannot_have_the_operator_send_a_secret_to_its_listener(
    kube: KubeApi, namespace: str, operator: OperatorProcess, tenant: KubeApi
) -> None:
    secrets_path = f"/api/v1/namespaces/{namespace}/secrets"
    await make_secret(kube, namespace, "db-credentials", {})
    await make_secret(kube, namespace, "model-key", {"sandfleet.dev/model-credentials": "true"})
    denied = await tenant.request("GET", f"{secrets_path}/db-credentials")
    assert denied.status == 403, "the tenant really cannot read Secrets"

    async with (
        ScriptedOpenAIServer([Reply(tool_calls=[submit()])] * 3) as allowed_listener,
        ScriptedOpenAIServer([Reply(tool_calls=[submit()])], host=NOT_ALLOWED_HOST) as elsewhere,
    ):
        # An unlabelled Secret, even to an allowed endpoint: never read, never sent.
        await create_session(
            tenant, namespace, "steal", managed(allowed_listener, "db-credentials")
        )
        message = await failed_with(kube, namespace, "steal", "SecretNotLabelled")
        assert "sandfleet.dev/model-credentials=true" in message
        # A labelled key to an endpoint the admin did not allow: never called.
        await create_session(tenant, namespace, "exfil", managed(elsewhere, "model-key"))
        message = await failed_with(kube, namespace, "exfil", "EndpointNotAllowed")
        assert elsewhere.base_url in message
        # Userinfo tricks do not even reach the operator: the API server refuses them.
        trick = {"agent": {"model": "m", "prompt": "go", "baseURL": (
            f"http://127.0.0.1:{allowed_listener.port}@{NOT_ALLOWED_HOST}:{elsewhere.port}/v1"
        )}}  # fmt: skip
        with pytest.raises(ApiError) as refused:
            await create_session(tenant, namespace, "trick", trick)
        assert refused.value.status == 422
        # A file from a Secret nobody let sessions use: never copied into a sandbox.
        files = {
            "files": [
                {"path": "loot", "secretKeyRef": {"name": "db-credentials", "key": "password"}}
            ]
        }
        await create_session(tenant, namespace, "copy", files)
        message = await failed_with(kube, namespace, "copy", "SecretNotLabelled")
        assert "sandfleet.dev/session-files=true" in message

        assert allowed_listener.requests == []
        assert elsewhere.requests == []

        # The owner's label and the admin's allowlist: works as before, key and all.
        await create_session(tenant, namespace, "fine", managed(allowed_listener, "model-key"))
        body = await wait_session(kube, namespace, "fine", phase_is("Succeeded", "Failed"), 120)
        assert body["status"]["phase"] == "Succeeded", body["status"]
        headers = allowed_listener.chat_requests[0].headers
        assert headers["authorization"] == f"Bearer {DB_PASSWORD}"
    assert elsewhere.requests == []
    assert all(DB_PASSWORD not in line for line in operator.log_lines())
