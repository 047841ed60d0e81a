"""Issue 26, item 6, as the attack on the real node: a sandbox with egress `Internet` tried
port 53 everywhere, because the policy opened it to every destination, and reached a
listener on the node (10.244.0.1:53). Now, from a sandbox pod built and fenced exactly as
the operator builds them, port 53 (TCP and UDP) of the node and of another pod is closed,
while the cluster resolver's pods stay reachable, directly and through their Service.

The test node runs no cluster DNS (pods use the node's resolver, see tests/cluster/README.md),
so a stand-in resolver answers on port 53: a pod carrying the resolver's labels in a
namespace of its own, which the platform defaults name as the resolver's (on a real cluster:
kube-system, k8s-app=kube-dns, the defaults).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import secrets
import socket
import threading
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest

from sandfleet.api import EgressMode
from sandfleet.clients.runtime.client import RuntimeClient
from sandfleet.fleet.naming import label_value, token_secret_name
from sandfleet.fleet.resources import (
    ObjectRef,
    PlatformDefaults,
    resolve_pod_template,
    session_pod,
    session_token_secret,
)
from sandfleet.operator.network_policies import session_network_policy
from tests.cluster.harness.cluster_access import ClusterUnderTest
from tests.cluster.harness.kube_api import JsonObject, KubeApi
from tests.cluster.harness.probe_pods import operator_image, probe_pod
from tests.cluster.harness.sandbox_pods import RUNTIME_PORT, wait_ready

pytestmark = pytest.mark.cluster

RESOLVER_LABELS = {"k8s-app": "kube-dns"}
CONTROL_PORT = 8053
"""A port no egress mode but All opens: once it is closed, the sandbox's policy holds."""

# Answers on TCP 53, TCP 8053 and UDP 53 with its own name, so the sandbox can tell who
# answered. Binding port 53 as a non-root user needs the (namespaced, safe) sysctl below.
_LISTENER = """
import socket, threading
NAME = {name!r}.encode()
def tcp(port):
    server = socket.create_server(("", port))
    while True:
        conn, _ = server.accept()
        with conn:
            conn.sendall(NAME)
def udp():
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind(("", 53))
    while True:
        _, peer = sock.recvfrom(512)
        sock.sendto(NAME, peer)
for port in (53, {control}):
    threading.Thread(target=tcp, args=(port,), daemon=True).start()
udp()
"""

# Run inside the sandbox: what each address answers on TCP and UDP port 53.
_PROBE = f"""
import json, socket, sys, time
def tcp(ip, port):
    try:
        with socket.create_connection((ip, port), timeout=3) as conn:
            conn.settimeout(3)
            return "answer:" + conn.recv(64).decode()
    except OSError as error:
        return type(error).__name__
def udp(ip):
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.settimeout(3)
        try:
            sock.sendto(b"query", (ip, 53))
            return "answer:" + sock.recv(64).decode()
        except OSError as error:
            return type(error).__name__
targets, control = json.loads(sys.argv[1]), sys.argv[2]
deadline = time.monotonic() + 30
while tcp(control, {CONTROL_PORT}).startswith("answer") and time.monotonic() < deadline:
    time.sleep(0.5)  # the policy is not in force yet
found = {{"control": tcp(control, {CONTROL_PORT})}}
for name, ip in targets.items():
    found[name] = {{"tcp": tcp(ip, 53), "udp": udp(ip)}}
print(json.dumps(found))
"""


def _listener(name: str, image: str, pull: str, labels: dict[str, str]) -> JsonObject:
    manifest = probe_pod(
        name, image, _LISTENER.format(name=name, control=CONTROL_PORT), pull, labels=labels
    )
    manifest["spec"]["securityContext"]["sysctls"] = [
        {"name": "net.ipv4.ip_unprivileged_port_start", "value": "0"}
    ]
    manifest["spec"]["containers"][0]["readinessProbe"] = {
        "tcpSocket": {"port": 53},
        "periodSeconds": 1,
    }
    return manifest


@contextlib.contextmanager
def _node_listener(address: str) -> Iterator[list[str]]:
    """TCP and UDP port 53 on the node's bridge address, as the red team had; records what
    reached it."""
    reached: list[str] = []
    tcp = socket.create_server((address, 53))
    udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    udp.bind((address, 53))
    for sock in (tcp, udp):
        sock.settimeout(0.2)
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            with contextlib.suppress(TimeoutError):
                conn, peer = tcp.accept()
                with conn:
                    reached.append(f"tcp from {peer[0]}")
                    conn.sendall(b"node")
            with contextlib.suppress(TimeoutError):
                _, peer = udp.recvfrom(512)
                reached.append(f"udp from {peer[0]}")
                udp.sendto(b"node", peer)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield reached
    finally:
        stop.set()
        thread.join(5)
        tcp.close()
        udp.close()


@pytest.fixture
async def resolver_namespace(kube: KubeApi) -> AsyncIterator[str]:
    name = f"sf-test-dns-{secrets.token_hex(4)}"
    body = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}
    await kube.checked("POST", "/api/v1/namespaces", body)
    await kube.wait_for(
        f"/api/v1/namespaces/{name}/serviceaccounts/default", lambda r: r.status == 200, 30
    )
    yield name
    await kube.request("DELETE", f"/api/v1/namespaces/{name}")


async def _internet_sandbox(
    kube: KubeApi, namespace: str, defaults: PlatformDefaults
) -> tuple[JsonObject, str]:
    """A session's token Secret, NetworkPolicy (egress Internet) and pod, as built for the
    operator; the Ready pod and its token."""
    owner_body = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "session-1"}}
    created = await kube.checked("POST", f"/api/v1/namespaces/{namespace}/configmaps", owner_body)
    session = ObjectRef(namespace, "session-1", created["metadata"]["uid"], "ConfigMap", "v1")
    token = secrets.token_urlsafe(32)
    await kube.checked(
        "POST", f"/api/v1/namespaces/{namespace}/secrets", session_token_secret(session, token)
    )
    await kube.checked(
        "POST",
        f"/apis/networking.k8s.io/v1/namespaces/{namespace}/networkpolicies",
        session_network_policy(session, EgressMode.INTERNET, defaults),
    )
    pod = session_pod(
        session, resolve_pod_template(None, defaults), token_secret_name(session.name), defaults
    )
    await kube.checked("POST", f"/api/v1/namespaces/{namespace}/pods", pod)
    selector = f"sandfleet.dev/session={label_value(session.name)}"
    (ready,) = await wait_ready(kube, namespace, selector, 1, timeout_s=120)
    return ready, token


async def _resolver_service(kube: KubeApi, namespace: str) -> str:
    body: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "resolver"},
        "spec": {
            "selector": RESOLVER_LABELS,
            "ports": [
                {"name": "dns", "protocol": "UDP", "port": 53},
                {"name": "dns-tcp", "protocol": "TCP", "port": 53},
            ],
        },
    }
    created = await kube.checked("POST", f"/api/v1/namespaces/{namespace}/services", body)
    cluster_ip: str = created["spec"]["clusterIP"]
    return cluster_ip


async def test_egress_internet_reaches_port_53_of_the_resolver_only(
    kube: KubeApi,
    namespace: str,
    resolver_namespace: str,
    runtime_image: str,
    cluster_under_test: ClusterUnderTest,
) -> None:
    if not cluster_under_test.local:
        pytest.skip("needs the test node's own address and its pod IPs from the test process")
    pull = cluster_under_test.image_pull_policy
    image = operator_image(cluster_under_test)
    defaults = PlatformDefaults(
        image=runtime_image,
        image_pull_policy=pull,
        dns_policy="Default",  # the test node has no cluster DNS
        operator_namespace="sandfleet-system",
        operator_pod_labels={"app.kubernetes.io/name": "sandfleet-operator"},
        dns_namespace=resolver_namespace,
        dns_pod_labels=RESOLVER_LABELS,
    )
    pods = "/api/v1/namespaces/{}/pods"
    await asyncio.gather(
        kube.checked(
            "POST",
            pods.format(resolver_namespace),
            _listener("resolver", image, pull, {**RESOLVER_LABELS, "dns-test": "1"}),
        ),
        # The resolver's labels in the wrong namespace, and another pod: neither is the resolver.
        kube.checked(
            "POST",
            pods.format(namespace),
            _listener("decoy", image, pull, {**RESOLVER_LABELS, "dns-test": "1"}),
        ),
    )
    service_ip = await _resolver_service(kube, resolver_namespace)
    (resolver,) = await wait_ready(kube, resolver_namespace, "dns-test=1", 1, timeout_s=90)
    (decoy,) = await wait_ready(kube, namespace, "dns-test=1", 1, timeout_s=90)
    sandbox, token = await _internet_sandbox(kube, namespace, defaults)
    node_ip = sandbox["status"]["hostIP"]
    targets = {
        "resolver": resolver["status"]["podIP"],
        "resolver-service": service_ip,
        "decoy": decoy["status"]["podIP"],
        "node": node_ip,
    }

    client = RuntimeClient(f"{sandbox['status']['podIP']}:{RUNTIME_PORT}", token, rpc_timeout_s=150)
    try:
        with _node_listener(node_ip) as reached_node:
            await client.upload(_PROBE.encode(), "/tmp/probe.py")
            answer = await client.run_command(
                f"python3 /tmp/probe.py '{json.dumps(targets)}' {targets['decoy']}",
                timeout_s=120,
            )
    finally:
        await client.close()

    assert answer.exit_code == 0, answer
    found = json.loads(answer.stdout)
    assert not found["control"].startswith("answer"), found  # the policy is in force
    assert found["resolver"] == {"tcp": "answer:resolver", "udp": "answer:resolver"}, found
    assert found["resolver-service"] == {"tcp": "answer:resolver", "udp": "answer:resolver"}
    for closed in ("decoy", "node"):
        assert not found[closed]["tcp"].startswith("answer"), found
        assert not found[closed]["udp"].startswith("answer"), found
    assert reached_node == []
