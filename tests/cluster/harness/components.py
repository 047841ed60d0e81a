"""Command lines of the cluster's processes: etcd, the control plane, containerd, the kubelet,
kube-proxy, the NetworkPolicy enforcer (kube-router's firewall) and kwok."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path

from tests.cluster.harness.certs import Pki
from tests.cluster.harness.layout import (
    BRIDGE_GATEWAY,
    KWOK_NODE_ANNOTATION,
    KWOK_POD_SUBNET,
    KWOK_STAGES,
    NODE_NAME,
    SERVICE_SUBNET,
    Layout,
    Ports,
)


@dataclasses.dataclass(frozen=True, slots=True)
class Component:
    """One process to start, plus how to tell it is ready: an https/http URL answering 200,
    or a check of what it did to the host (for a component that serves no health endpoint)."""

    name: str
    argv: list[str]
    health_url: str | None = None
    ready: Callable[[], bool] | None = None
    nice: int = 0
    """Run at this niceness (`nice -n`): for background work that must not slow the rest."""


def etcd(layout: Layout, ports: Ports) -> Component:
    client = f"http://127.0.0.1:{ports.etcd_client}"
    peer = f"http://127.0.0.1:{ports.etcd_peer}"
    return Component(
        name="etcd",
        argv=[
            str(layout.binary("etcd")),
            "--name=sandfleet-test",
            f"--data-dir={layout.etcd_data}",
            f"--listen-client-urls={client}",
            f"--advertise-client-urls={client}",
            f"--listen-peer-urls={peer}",
            f"--initial-advertise-peer-urls={peer}",
            f"--initial-cluster=sandfleet-test={peer}",
            # Throwaway data: durability buys nothing here and fsync dominates write latency.
            "--unsafe-no-fsync",
            "--quota-backend-bytes=4294967296",
            "--log-level=warn",
        ],
        health_url=f"{client}/health",
    )


def kube_apiserver(layout: Layout, ports: Ports, pki: Pki) -> Component:
    return Component(
        name="kube-apiserver",
        argv=[
            str(layout.binary("kube-apiserver")),
            f"--etcd-servers=http://127.0.0.1:{ports.etcd_client}",
            # The bridge address: the host and the pods both reach it, and the endpoint
            # reconciler publishes it as the `kubernetes` Service's endpoint (kube-proxy then
            # routes the in-cluster KUBERNETES_SERVICE_HOST there).
            f"--bind-address={BRIDGE_GATEWAY}",
            f"--advertise-address={BRIDGE_GATEWAY}",
            f"--secure-port={ports.apiserver}",
            f"--service-cluster-ip-range={SERVICE_SUBNET}",
            f"--tls-cert-file={pki.apiserver.cert}",
            f"--tls-private-key-file={pki.apiserver.key}",
            f"--client-ca-file={pki.ca.cert}",
            f"--service-account-key-file={pki.service_account_pub}",
            f"--service-account-signing-key-file={pki.service_account_key}",
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
            "--authorization-mode=Node,RBAC",
            f"--kubelet-client-certificate={pki.apiserver_kubelet_client.cert}",
            f"--kubelet-client-key={pki.apiserver_kubelet_client.key}",
            f"--kubelet-certificate-authority={pki.ca.cert}",
            # The node's Hostname address resolves to loopback, where the kubelet listens.
            "--kubelet-preferred-address-types=Hostname",
            "--allow-privileged=true",
            "--profiling=false",
            "--max-requests-inflight=800",
            "--max-mutating-requests-inflight=400",
        ],
        health_url=f"https://{BRIDGE_GATEWAY}:{ports.apiserver}/readyz",
    )


def kube_controller_manager(layout: Layout, ports: Ports, pki: Pki, kubeconfig: Path) -> Component:
    return Component(
        name="kube-controller-manager",
        argv=[
            str(layout.binary("kube-controller-manager")),
            f"--kubeconfig={kubeconfig}",
            f"--authentication-kubeconfig={kubeconfig}",
            f"--authorization-kubeconfig={kubeconfig}",
            "--bind-address=127.0.0.1",
            f"--secure-port={ports.controller_manager}",
            "--leader-elect=false",
            "--use-service-account-credentials=true",
            f"--service-account-private-key-file={pki.service_account_key}",
            f"--root-ca-file={pki.ca.cert}",
            f"--cluster-signing-cert-file={pki.ca.cert}",
            f"--cluster-signing-key-file={pki.ca.key}",
            f"--service-cluster-ip-range={SERVICE_SUBNET}",
            "--kube-api-qps=100",
            "--kube-api-burst=200",
            "--concurrent-gc-syncs=20",
            "--profiling=false",
        ],
        health_url=f"https://127.0.0.1:{ports.controller_manager}/healthz",
    )


def kube_scheduler(layout: Layout, ports: Ports, kubeconfig: Path) -> Component:
    return Component(
        name="kube-scheduler",
        argv=[
            str(layout.binary("kube-scheduler")),
            f"--kubeconfig={kubeconfig}",
            f"--authentication-kubeconfig={kubeconfig}",
            f"--authorization-kubeconfig={kubeconfig}",
            "--bind-address=127.0.0.1",
            f"--secure-port={ports.scheduler}",
            "--leader-elect=false",
            "--profiling=false",
        ],
        health_url=f"https://127.0.0.1:{ports.scheduler}/healthz",
    )


def containerd(layout: Layout, config: Path) -> Component:
    return Component(
        name="containerd",
        argv=["containerd", f"--config={config}", "--log-level=warn"],
    )


def kubelet(layout: Layout, ports: Ports, config: Path, kubeconfig: Path) -> Component:
    return Component(
        name="kubelet",
        argv=[
            str(layout.binary("kubelet")),
            f"--config={config}",
            f"--kubeconfig={kubeconfig}",
            f"--root-dir={layout.kubelet_root}",
            f"--cert-dir={layout.pki_dir / 'kubelet'}",
            f"--hostname-override={NODE_NAME}",
            # The InternalIP pods can reach (status.hostIP), not the machine's outward address.
            f"--node-ip={BRIDGE_GATEWAY}",
            "--v=1",
        ],
        health_url=f"http://127.0.0.1:{ports.kubelet_healthz}/healthz",
    )


def kube_proxy(layout: Layout, ports: Ports, config: Path) -> Component:
    """Services for real: iptables rules (Debian's iptables, nf_tables backend) on the host."""
    return Component(
        name="kube-proxy",
        argv=[str(layout.binary("kube-proxy")), f"--config={config}", "--v=1"],
        # 200 once the first full sync of the rules is done.
        health_url=f"http://127.0.0.1:{ports.kube_proxy_healthz}/healthz",
    )


def kube_router(layout: Layout, kubeconfig: Path, ready: Callable[[], bool]) -> Component:
    """NetworkPolicy enforcement: kube-router with only its firewall (iptables + ipset).

    Routing, the service proxy (kube-proxy does that) and its CNI stay off. Its health server
    would listen on every interface, so it is off: `ready` checks its iptables chains instead.
    It rewrites every local pod's chains on each pod event (seconds of iptables-restore with
    hundreds of pods), so it runs niced: pod start-up keeps the CPU, policies follow a little
    later under load.
    """
    return Component(
        name="kube-router",
        argv=[
            str(layout.kube_router_binary),
            f"--kubeconfig={kubeconfig}",
            f"--hostname-override={NODE_NAME}",
            "--run-firewall=true",
            "--run-router=false",
            "--run-service-proxy=false",
            "--run-loadbalancer=false",
            "--enable-cni=false",
            "--enable-ipv4=true",
            "--enable-ipv6=false",
            f"--service-cluster-ip-range={SERVICE_SUBNET}",
            "--health-port=0",
            "--metrics-port=0",
            "--iptables-sync-period=5m",
            "--v=1",
        ],
        ready=ready,
        nice=10,
    )


def kwok(layout: Layout, kubeconfig: Path) -> Component:
    """Fake nodes for scale tests: kwok plays the kubelet for nodes annotated as its own."""
    return Component(
        name="kwok",
        argv=[
            str(layout.kwok_binary),
            f"--kubeconfig={kubeconfig}",
            f"--config={KWOK_STAGES}",
            "--manage-all-nodes=false",
            f"--manage-nodes-with-annotation-selector={KWOK_NODE_ANNOTATION}=fake",
            f"--cidr={KWOK_POD_SUBNET}",
            "--node-ip=10.127.0.1",
            # Renew each fake node's Lease as a kubelet does: without a heartbeat the node
            # lifecycle controller marks a fake node unreachable after its grace period and
            # every pod on it NotReady (seen under load, when 2,000 pods took longer than that).
            "--node-lease-duration-seconds=40",
        ],
    )
