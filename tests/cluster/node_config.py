"""Configuration files of the one real node: containerd, the bridge CNI network and the kubelet."""

from __future__ import annotations

import json
from pathlib import Path

from tests.cluster.certs import Pki
from tests.cluster.layout import (
    BRIDGE_NAME,
    CGROUP_ROOT,
    MAX_PODS,
    PAUSE_IMAGE,
    POD_SUBNET,
    Layout,
    Ports,
)

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

    isGateway stays false so the plugin never turns on IP forwarding: pods can talk to the
    host over the bridge and to each other, and to nothing beyond this machine.
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
                    "ranges": [[{"subnet": POD_SUBNET, "rangeStart": "10.244.0.10"}]],
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
