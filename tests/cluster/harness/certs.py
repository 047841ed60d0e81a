"""The test cluster's PKI (one CA, a certificate per component) and kubeconfigs, via openssl."""

from __future__ import annotations

import base64
import dataclasses
import json
import subprocess
from pathlib import Path

from tests.cluster.harness.layout import BRIDGE_GATEWAY, KUBERNETES_SERVICE_IP, NODE_NAME

_CURVE = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
_DAYS = "3650"


@dataclasses.dataclass(frozen=True, slots=True)
class KeyPair:
    cert: Path
    key: Path


@dataclasses.dataclass(frozen=True, slots=True)
class Pki:
    """Every file the components are started with."""

    ca: KeyPair
    apiserver: KeyPair
    apiserver_kubelet_client: KeyPair
    admin: KeyPair
    controller_manager: KeyPair
    scheduler: KeyPair
    kubelet_client: KeyPair
    kubelet_serving: KeyPair
    kube_proxy: KeyPair
    kube_router: KeyPair
    service_account_key: Path
    service_account_pub: Path


def _openssl(*args: str) -> None:
    subprocess.run(["openssl", *args], check=True, capture_output=True)


def _issue(
    directory: Path,
    name: str,
    ca: KeyPair,
    *,
    subject: str,
    usage: str,
    alt_names: str | None = None,
) -> KeyPair:
    """A leaf certificate signed by the CA in one openssl call (OpenSSL 3 `req -x509 -CA`)."""
    pair = KeyPair(cert=directory / f"{name}.crt", key=directory / f"{name}.key")
    extensions = [
        "-addext",
        "basicConstraints=critical,CA:FALSE",
        "-addext",
        "keyUsage=critical,digitalSignature,keyEncipherment",
        "-addext",
        f"extendedKeyUsage={usage}",
    ]
    if alt_names:
        extensions += ["-addext", f"subjectAltName={alt_names}"]
    _openssl(
        "req", "-x509", *_CURVE, "-keyout", str(pair.key), "-out", str(pair.cert),
        "-CA", str(ca.cert), "-CAkey", str(ca.key), "-days", _DAYS, "-subj", subject,
        *extensions,
    )  # fmt: skip
    return pair


def create_pki(directory: Path) -> Pki:
    """Generate a fresh PKI for one run.

    The API server's certificate names every address it is reached at: loopback, the bridge
    address it listens on (pods, and the host's kubeconfigs) and the `kubernetes` Service.
    """
    directory.mkdir(parents=True, exist_ok=True)
    ca = KeyPair(cert=directory / "ca.crt", key=directory / "ca.key")
    _openssl(
        "req", "-x509", *_CURVE, "-keyout", str(ca.key), "-out", str(ca.cert), "-days", _DAYS,
        "-subj", "/CN=sandfleet-test-cluster-ca",
        "-addext", "basicConstraints=critical,CA:TRUE",
        "-addext", "keyUsage=critical,keyCertSign,cRLSign",
    )  # fmt: skip
    service_account_key = directory / "service-account.key"
    service_account_pub = directory / "service-account.pub"
    _openssl(
        "genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256",
        "-out", str(service_account_key),
    )  # fmt: skip
    _openssl("pkey", "-in", str(service_account_key), "-pubout", "-out", str(service_account_pub))
    apiserver_names = ",".join(
        [
            "IP:127.0.0.1",
            f"IP:{BRIDGE_GATEWAY}",
            f"IP:{KUBERNETES_SERVICE_IP}",
            "DNS:localhost",
            "DNS:kubernetes",
            "DNS:kubernetes.default",
            "DNS:kubernetes.default.svc",
            "DNS:kubernetes.default.svc.cluster.local",
        ]
    )
    return Pki(
        ca=ca,
        apiserver=_issue(
            directory,
            "apiserver",
            ca,
            subject="/CN=kube-apiserver",
            usage="serverAuth",
            alt_names=apiserver_names,
        ),
        apiserver_kubelet_client=_issue(
            directory,
            "apiserver-kubelet-client",
            ca,
            subject="/O=system:masters/CN=kube-apiserver-kubelet-client",
            usage="clientAuth",
        ),
        admin=_issue(
            directory,
            "admin",
            ca,
            subject="/O=system:masters/CN=sandfleet-admin",
            usage="clientAuth",
        ),
        controller_manager=_issue(
            directory,
            "controller-manager",
            ca,
            subject="/CN=system:kube-controller-manager",
            usage="clientAuth",
        ),
        scheduler=_issue(
            directory, "scheduler", ca, subject="/CN=system:kube-scheduler", usage="clientAuth"
        ),
        kubelet_client=_issue(
            directory,
            "kubelet-client",
            ca,
            subject=f"/O=system:nodes/CN=system:node:{NODE_NAME}",
            usage="clientAuth",
        ),
        kubelet_serving=_issue(
            directory,
            "kubelet-serving",
            ca,
            subject=f"/CN={NODE_NAME}",
            usage="serverAuth",
            alt_names=f"IP:127.0.0.1,DNS:{NODE_NAME},DNS:localhost",
        ),
        # The default RBAC binds system:node-proxier to the user system:kube-proxy.
        kube_proxy=_issue(
            directory, "kube-proxy", ca, subject="/CN=system:kube-proxy", usage="clientAuth"
        ),
        # Read-only access granted by cluster.py (ClusterRole sandfleet-test:netpol).
        kube_router=_issue(
            directory, "kube-router", ca, subject="/CN=system:kube-router", usage="clientAuth"
        ),
        service_account_key=service_account_key,
        service_account_pub=service_account_pub,
    )


def _b64(path: Path) -> str:
    return base64.b64encode(path.read_bytes()).decode()


def write_kubeconfig(path: Path, server: str, ca: Path, client: KeyPair, user: str) -> Path:
    """A self-contained kubeconfig (JSON is valid YAML) with the credentials inlined."""
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "sandfleet-test",
                "cluster": {"server": server, "certificate-authority-data": _b64(ca)},
            }
        ],
        "users": [
            {
                "name": user,
                "user": {
                    "client-certificate-data": _b64(client.cert),
                    "client-key-data": _b64(client.key),
                },
            }
        ],
        "contexts": [
            {"name": "sandfleet-test", "context": {"cluster": "sandfleet-test", "user": user}}
        ],
        "current-context": "sandfleet-test",
    }
    path.write_text(json.dumps(config, indent=2))
    path.chmod(0o600)
    return path
