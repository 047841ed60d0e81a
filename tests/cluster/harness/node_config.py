"""Configuration of the one real node: containerd, the bridge CNI network, the kubelet and
kube-proxy (files), and kube-router's access to the API (RBAC objects)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.cluster.harness.certs import Pki
from tests.cluster.harness.layout import (
    BRIDGE_GATEWAY,
    BRIDGE_NAME,
    CGROUP_ROOT,
    MAX_PODS,
    NODE_NAME,
    PAUSE_IMAGE,
    POD_SUBNET,
    SERVICE_SUBNET,
    Layout,
    Ports,
)

KUBE_ROUTER_USER = "system:kube-router"
"""The client certificate's CN kube-router authenticates with (certs.py)."""
KUBE_ROUTER_ROLE = "sandfleet-test:kube-router"
_RBAC = "/apis/rbac.authorization.k8s.io/v1"

CNI_BIN_DIR = "/usr/lib/cni"
"""Where Debian's containernetworking-plugins installs the plugins."""


def write_containerd_config(layout: Layout) -> Path:
    """containerd 1.6 (Debian bookworm) with its own root, state and socket under the run dir."""
    # restrict_oom_score_adj: root in these VMs may not lower oom_score_adj; without it runc
    # fails every container with "can't get final child's PID from pipe: EOF".
    # netns_mounts_under_state_dir: network namespaces live (and are cleaned) under our state
    # dir instead of the host's shared /var/run/netns.
    config = f"""\
version = 2
root = "{layout.containerd_root}"
state = "{layout.containerd_state}"
oom_score = 0

[grpc]
  address = "{layout.containerd_socket}"

[ttrpc]
  address = "{layout.containerd_socket}.ttrpc"

[plugins."io.containerd.internal.v1.opt"]
  path = "{layout.run_dir / "containerd" / "opt"}"

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{PAUSE_IMAGE}"
  restrict_oom_score_adj = true
  netns_mounts_under_state_dir = true
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  enable_selinux = false
  disable_apparmor = true
  max_concurrent_downloads = 1

  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"

    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"

      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
        BinaryName = "/usr/sbin/runc"

  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "{CNI_BIN_DIR}"
    conf_dir = "{layout.cni_conf_dir}"
    max_conf_num = 1
"""
    path = layout.run_dir / "containerd" / "config.toml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(config)
    return path


def write_cni_config(layout: Layout) -> Path:
    """A bridge network whose gateway address the cluster tool sets itself.

    isGateway stays false so the plugin never turns on IP forwarding for the whole host (the
    cluster tool enables it for the bridge alone). Pods get a route to the Service range via
    the host, where kube-proxy's rules translate it, and no default route: they reach the host,
    each other and Services, and nothing beyond this machine.
    """
    network = {
        "cniVersion": "1.0.0",
        "name": "sandfleet-test",
        "plugins": [
            {
                "type": "bridge",
                "bridge": BRIDGE_NAME,
                "isGateway": False,
                "ipMasq": False,
                "hairpinMode": True,
                "ipam": {
                    "type": "host-local",
                    "dataDir": str(layout.cni_ipam_dir),
                    "ranges": [
                        [
                            {
                                "subnet": POD_SUBNET,
                                "rangeStart": "10.244.0.10",
                                "gateway": BRIDGE_GATEWAY,
                            }
                        ]
                    ],
                    "routes": [{"dst": SERVICE_SUBNET, "gw": BRIDGE_GATEWAY}],
                },
            },
            {"type": "loopback"},
        ],
    }
    layout.cni_conf_dir.mkdir(parents=True, exist_ok=True)
    path = layout.cni_conf_dir / "10-sandfleet.conflist"
    path.write_text(json.dumps(network, indent=2))
    return path


def write_kubelet_config(layout: Layout, ports: Ports, pki: Pki) -> Path:
    """KubeletConfiguration for a loopback-only node that holds hundreds of small pods."""
    config = {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        "address": "127.0.0.1",
        "port": ports.kubelet,
        "healthzBindAddress": "127.0.0.1",
        "healthzPort": ports.kubelet_healthz,
        "readOnlyPort": 0,
        "tlsCertFile": str(pki.kubelet_serving.cert),
        "tlsPrivateKeyFile": str(pki.kubelet_serving.key),
        "authentication": {
            "anonymous": {"enabled": False},
            "webhook": {"enabled": True},
            "x509": {"clientCAFile": str(pki.ca.cert)},
        },
        "authorization": {"mode": "Webhook"},
        "containerRuntimeEndpoint": f"unix://{layout.containerd_socket}",
        "cgroupDriver": "cgroupfs",
        "cgroupRoot": f"/{CGROUP_ROOT}",
        # These VMs boot with cgroup v1; the kubelet refuses it unless told otherwise.
        "failCgroupV1": False,
        "failSwapOn": False,
        "maxPods": MAX_PODS,
        "podPidsLimit": 4096,
        "podLogsDir": str(layout.run_dir / "pod-logs"),
        "volumePluginDir": str(layout.run_dir / "volume-plugins"),
        "staticPodPath": "",
        "resolvConf": "/etc/resolv.conf",
        "serializeImagePulls": False,
        # Images are imported, never pulled: the kubelet must not garbage-collect them.
        "imageGCHighThresholdPercent": 100,
        "imageGCLowThresholdPercent": 99,
        "evictionHard": {"memory.available": "200Mi", "nodefs.available": "2%"},
        "kubeAPIQPS": 100,
        "kubeAPIBurst": 200,
        "registryPullQPS": 0,
        "nodeStatusUpdateFrequency": "10s",
        "shutdownGracePeriod": "0s",
        "localStorageCapacityIsolation": True,
        "protectKernelDefaults": False,
        "makeIPTablesUtilChains": False,
    }
    path = layout.run_dir / "kubelet-config.json"
    path.write_text(json.dumps(config, indent=2))
    return path


def write_kube_proxy_config(layout: Layout, ports: Ports, kubeconfig: Path) -> Path:
    """KubeProxyConfiguration: iptables mode, touching no more of the host than it must.

    Health and metrics on loopback; NodePorts only on the bridge address (never on the
    machine's outward interface, nor on 127.0.0.1, which would need route_localnet); the
    conntrack sysctls left as the host has them.
    """
    config = {
        "apiVersion": "kubeproxy.config.k8s.io/v1alpha1",
        "kind": "KubeProxyConfiguration",
        "clientConnection": {"kubeconfig": str(kubeconfig), "qps": 50, "burst": 100},
        "hostnameOverride": NODE_NAME,
        "bindAddress": BRIDGE_GATEWAY,
        "healthzBindAddress": f"127.0.0.1:{ports.kube_proxy_healthz}",
        "metricsBindAddress": f"127.0.0.1:{ports.kube_proxy_metrics}",
        "mode": "iptables",
        "clusterCIDR": POD_SUBNET,
        "detectLocalMode": "ClusterCIDR",
        "nodePortAddresses": [f"{BRIDGE_GATEWAY}/32"],
        "iptables": {"localhostNodePorts": False, "syncPeriod": "30s", "minSyncPeriod": "1s"},
        "conntrack": {
            "maxPerCore": 0,
            "min": 0,
            "tcpEstablishedTimeout": "0s",
            "tcpCloseWaitTimeout": "0s",
        },
    }
    layout.kube_proxy_config.write_text(json.dumps(config, indent=2))
    return layout.kube_proxy_config


def kube_router_access() -> list[tuple[str, dict[str, Any]]]:
    """(path to POST, object): read-only access to what kube-router's informers watch (it
    starts them all, even with only its firewall on): pods, namespaces, nodes, Services and
    their endpoints, NetworkPolicies; and events to record what it did."""
    read = ["get", "list", "watch"]
    role = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": {"name": KUBE_ROUTER_ROLE},
        "rules": [
            {
                "apiGroups": [""],
                "resources": ["pods", "namespaces", "nodes", "services", "endpoints"],
                "verbs": read,
            },
            {"apiGroups": ["discovery.k8s.io"], "resources": ["endpointslices"], "verbs": read},
            {"apiGroups": ["networking.k8s.io"], "resources": ["networkpolicies"], "verbs": read},
            {"apiGroups": ["", "events.k8s.io"], "resources": ["events"], "verbs": ["create"]},
        ],
    }
    binding = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": {"name": KUBE_ROUTER_ROLE},
        "roleRef": {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": "ClusterRole",
            "name": KUBE_ROUTER_ROLE,
        },
        "subjects": [
            {"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": KUBE_ROUTER_USER}
        ],
    }
    return [(f"{_RBAC}/clusterroles", role), (f"{_RBAC}/clusterrolebindings", binding)]
