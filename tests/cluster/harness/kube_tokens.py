"""Identities for the cluster tests: a ServiceAccount token and a kubeconfig that uses it."""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import yaml

from sandfleet.kube import KubeClient, KubeConfig, resource_path

JsonObject = dict[str, Any]


async def service_account_token(kube: KubeClient, namespace: str, name: str) -> str:
    """A new ServiceAccount's token (TokenRequest API, ten minutes)."""
    await kube.create(
        resource_path("v1", "serviceaccounts", namespace),
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": name}},
    )
    request = {
        "apiVersion": "authentication.k8s.io/v1",
        "kind": "TokenRequest",
        "spec": {"expirationSeconds": 600},
    }
    answer = await kube.create(
        resource_path("v1", "serviceaccounts", namespace, name, "token"), request
    )
    token: str = answer["status"]["token"]
    return token


def token_kubeconfig(directory: Path, admin: KubeConfig, user: JsonObject) -> Path:
    """A kubeconfig for the admin's API server (and its CA) with another `user`."""
    assert admin.ca_file is not None
    certificate_authority = Path(admin.ca_file).read_bytes()
    document = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "c",
                "cluster": {
                    "server": admin.server,
                    "certificate-authority-data": base64.b64encode(certificate_authority).decode(),
                },
            }
        ],
        "users": [{"name": "sa", "user": user}],
        "contexts": [{"name": "sa", "context": {"cluster": "c", "user": "sa"}}],
        "current-context": "sa",
    }
    path = directory / "sa.kubeconfig"
    path.write_text(yaml.safe_dump(document))
    return path
