"""Where the test cluster keeps its binaries, images and per-run state, and which ports it uses."""

from __future__ import annotations

import dataclasses
import json
import os
import re
from pathlib import Path

CLUSTER_DIR = Path(__file__).resolve().parent.parent
"""tests/cluster: the build folders and kwok-stages.yaml beside the tests (this is its harness/)."""
REPO_ROOT = CLUSTER_DIR.parent.parent
KUBEBUILD_GO_MOD = CLUSTER_DIR / "kubebuild" / "go.mod"
KWOKBUILD_GO_MOD = CLUSTER_DIR / "kwokbuild" / "go.mod"
NETPOLBUILD_GO_MOD = CLUSTER_DIR / "netpolbuild" / "go.mod"
KWOK_STAGES = CLUSTER_DIR / "kwok-stages.yaml"
KWOK_NODE_ANNOTATION = "kwok.x-k8s.io/node"
"""Nodes annotated `kwok.x-k8s.io/node: fake` are kwok's: their pods run without containers."""
KWOK_POD_SUBNET = "10.128.0.0/16"
"""Addresses kwok writes into fake pods' status; nothing ever listens on them."""

NODE_NAME = "localhost"
"""The node's name is also its Hostname address: the API server reaches the loopback-only
kubelet (logs, exec, stats) through a name that resolves to 127.0.0.1 without touching
/etc/hosts. The kubelet refuses a loopback --node-ip, so an InternalIP cannot do this."""
BRIDGE_NAME = "sfbr0"
CGROUP_ROOT = "sandfleet-test"
"""Top-level cgroup the kubelet nests its pods in, so cleanup removes exactly what it made."""
POD_SUBNET = "10.244.0.0/22"
"""1022 pod addresses on one node; pods reach the host, each other and Services, nothing else."""
BRIDGE_GATEWAY = "10.244.0.1"
"""The host's address on the pod bridge, the one address of the node that pods can reach: the
API server listens here (and is the `kubernetes` Service's endpoint), it is the node's
InternalIP, and pods route the Service range through it."""
BRIDGE_ADDRESS = f"{BRIDGE_GATEWAY}/22"
SERVICE_SUBNET = "10.96.0.0/24"
"""ClusterIPs, routed by kube-proxy's iptables rules on the host."""
KUBERNETES_SERVICE_IP = "10.96.0.1"
"""The first address of SERVICE_SUBNET: the `kubernetes` Service in-cluster clients use."""
MAX_PODS = 600
PAUSE_IMAGE = "sandfleet.local/pause:1"


def _required_version(go_mod: Path, module: str) -> str:
    pattern = rf"^\s*(?:require\s+)?{re.escape(module)} (v\S+)"
    match = re.search(pattern, go_mod.read_text(), re.M)
    if match is None:
        raise RuntimeError(f"no {module} requirement in {go_mod}")
    return match.group(1)


def kubernetes_release() -> str:
    """The pinned release: the k8s.io/kubernetes version the build module requires."""
    return _required_version(KUBEBUILD_GO_MOD, "k8s.io/kubernetes")


def kwok_version() -> str:
    return _required_version(KWOKBUILD_GO_MOD, "sigs.k8s.io/kwok")


def kube_router_version() -> str:
    return _required_version(NETPOLBUILD_GO_MOD, "github.com/cloudnativelabs/kube-router/v2")


def cache_root() -> Path:
    """Outside the repository, so fresh clones on one machine share the slow builds."""
    configured = os.environ.get("SANDFLEET_CLUSTER_CACHE")
    if configured:
        return Path(configured)
    return Path.home() / ".cache" / "sandfleet" / "cluster"


@dataclasses.dataclass(frozen=True, slots=True)
class Ports:
    """Loopback ports of one cluster, all derived from one base to dodge other users' servers."""

    base: int

    @property
    def apiserver(self) -> int:
        return self.base + 43

    @property
    def etcd_client(self) -> int:
        return self.base + 79

    @property
    def etcd_peer(self) -> int:
        return self.base + 80

    @property
    def kubelet(self) -> int:
        return self.base + 50

    @property
    def kubelet_healthz(self) -> int:
        return self.base + 48

    @property
    def scheduler(self) -> int:
        return self.base + 59

    @property
    def kube_proxy_healthz(self) -> int:
        return self.base + 56

    @property
    def kube_proxy_metrics(self) -> int:
        return self.base + 49

    @property
    def controller_manager(self) -> int:
        return self.base + 57

    @classmethod
    def from_environment(cls) -> Ports:
        return cls(base=int(os.environ.get("SANDFLEET_CLUSTER_PORT_BASE", "16400")))


@dataclasses.dataclass(frozen=True, slots=True)
class Layout:
    """Paths of the cache (kept between runs) and of one run's state (removed on stop)."""

    cache: Path
    release: str

    @classmethod
    def default(cls) -> Layout:
        return cls(cache=cache_root(), release=kubernetes_release())

    @property
    def bin_dir(self) -> Path:
        return self.cache / "bin" / self.release

    def binary(self, name: str) -> Path:
        return self.bin_dir / name

    @property
    def kwok_binary(self) -> Path:
        """Built by setup.sh unless SANDFLEET_CLUSTER_KWOK=0; the cluster starts it if present."""
        return self.cache / "bin" / f"kwok-{kwok_version()}" / "kwok"

    @property
    def kube_router_binary(self) -> Path:
        """The NetworkPolicy enforcer (kube-router's firewall only), built by setup.sh unless
        SANDFLEET_CLUSTER_NETPOL=0; the cluster starts it if present."""
        return self.cache / "bin" / f"kube-router-{kube_router_version()}" / "kube-router"

    @property
    def images_dir(self) -> Path:
        return self.cache / "images"

    @property
    def images_index(self) -> Path:
        """Written by setup.sh: {role: {"ref": image name, "archive": file in images_dir}}."""
        return self.images_dir / "index.json"

    @property
    def run_dir(self) -> Path:
        return self.cache / "run"

    @property
    def state_file(self) -> Path:
        """Pids and binaries of the running cluster; its presence means 'maybe running'."""
        return self.run_dir / "state.json"

    @property
    def pki_dir(self) -> Path:
        return self.run_dir / "pki"

    @property
    def logs_dir(self) -> Path:
        return self.run_dir / "logs"

    @property
    def kept_logs_dir(self) -> Path:
        """Logs of runs whose tests failed, copied here before the run directory goes."""
        return self.cache / "failed-runs"

    @property
    def admin_kubeconfig(self) -> Path:
        return self.run_dir / "admin.kubeconfig"

    @property
    def etcd_data(self) -> Path:
        return self.run_dir / "etcd"

    @property
    def containerd_root(self) -> Path:
        return self.run_dir / "containerd" / "root"

    @property
    def containerd_state(self) -> Path:
        return self.run_dir / "containerd" / "state"

    @property
    def containerd_socket(self) -> Path:
        return self.run_dir / "containerd" / "containerd.sock"

    @property
    def cni_conf_dir(self) -> Path:
        return self.run_dir / "cni" / "net.d"

    @property
    def cni_ipam_dir(self) -> Path:
        return self.run_dir / "cni" / "ipam"

    @property
    def kubelet_root(self) -> Path:
        return self.run_dir / "kubelet"

    @property
    def kube_proxy_config(self) -> Path:
        return self.run_dir / "kube-proxy-config.json"

    def read_images(self) -> dict[str, Image]:
        """Images setup.sh built, by role ("pause", "runtime", "operator"); empty when nothing
        was built."""
        if not self.images_index.exists():
            return {}
        raw: dict[str, dict[str, str]] = json.loads(self.images_index.read_text())
        return {
            role: Image(ref=entry["ref"], archive=self.images_dir / entry["archive"])
            for role, entry in raw.items()
        }


@dataclasses.dataclass(frozen=True, slots=True)
class Image:
    """An image by its name in containerd and the archive it is imported from."""

    ref: str
    archive: Path
