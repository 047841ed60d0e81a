"""Start and stop the single-node test cluster:
`python -m tests.cluster.harness.cluster up|down|status`.

`images` imports what setup.sh built into a running cluster (no restart); `check` lists what
is missing to start one.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import dataclasses
import json
import os
import shutil
import ssl
import sys
import time
from pathlib import Path

if __package__ in (None, ""):
    # Run as a file (python tests/cluster/harness/cluster.py): make `tests.cluster` importable.
    sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

from tests.cluster.harness import components, host_network, node_config, node_host, processes
from tests.cluster.harness.certs import Pki, create_pki, write_kubeconfig
from tests.cluster.harness.kube_api import KubeApi, condition_is_true
from tests.cluster.harness.layout import BRIDGE_GATEWAY, NODE_NAME, Image, Layout, Ports
from tests.cluster.harness.processes import ClusterStartError, Running

REQUIRED_COMMANDS = (
    "containerd", "runc", "ctr", "openssl", "ip", "umount", "iptables", "iptables-restore",
)  # fmt: skip
CNI_PLUGINS = ("bridge", "host-local", "loopback")
BINARIES = (
    "etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubelet", "kube-proxy",
)  # fmt: skip
IMAGE_ROLES = ("pause", "runtime", "operator")
STOP_ORDER = (
    "kwok",
    "kube-router",
    "kube-proxy",
    "kube-controller-manager",
    "kube-scheduler",
    "kubelet",
    "containerd",
    "kube-apiserver",
    "etcd",
)


@dataclasses.dataclass(frozen=True, slots=True)
class ClusterInfo:
    kubeconfig: Path
    images: dict[str, str]
    """Image role ("runtime", "operator", "pause") -> name the node has it under."""
    start_seconds: float


def missing_prerequisites(layout: Layout) -> list[str]:
    """Why a local cluster cannot start here; empty when it can."""
    problems = []
    if os.geteuid() != 0:
        problems.append("needs root (containerd, mounts, cgroups, a bridge)")
    commands = [c for c in REQUIRED_COMMANDS if shutil.which(c) is None]
    if commands:
        problems.append(
            f"missing commands {commands} (Debian: containerd runc iproute2 iptables openssl)"
        )
    plugins = [p for p in CNI_PLUGINS if not Path(node_config.CNI_BIN_DIR, p).exists()]
    if plugins:
        problems.append(f"missing CNI plugins {plugins} (Debian: containernetworking-plugins)")
    binaries = [b for b in BINARIES if not layout.binary(b).exists()]
    if binaries:
        problems.append(f"no {binaries} in {layout.bin_dir}")
    images = layout.read_images()
    absent = [r for r in IMAGE_ROLES if r not in images or not images[r].archive.exists()]
    if absent:
        problems.append(f"no {absent} image archives in {layout.images_dir}")
    if binaries or absent:
        problems.append("build them with: bash tests/cluster/setup.sh")
    return problems


def _record(layout: Layout, running: list[Running], ports: Ports) -> None:
    state = {"ports_base": ports.base, "processes": [dataclasses.asdict(r) for r in running]}
    layout.state_file.write_text(json.dumps(state, indent=2))


def _read_state(layout: Layout) -> list[Running]:
    try:
        state = json.loads(layout.state_file.read_text())
    except (OSError, json.JSONDecodeError):
        return []
    return [Running(**entry) for entry in state["processes"]]


def _kubeconfigs(layout: Layout, ports: Ports, pki: Pki) -> dict[str, Path]:
    # The API server listens on the bridge address only (where pods reach it too).
    server = f"https://{BRIDGE_GATEWAY}:{ports.apiserver}"
    return {
        "admin": write_kubeconfig(layout.admin_kubeconfig, server, pki.ca.cert, pki.admin, "admin"),
        "kcm": write_kubeconfig(
            layout.run_dir / "kcm.kubeconfig",
            server,
            pki.ca.cert,
            pki.controller_manager,
            "system:kube-controller-manager",
        ),
        "scheduler": write_kubeconfig(
            layout.run_dir / "scheduler.kubeconfig",
            server,
            pki.ca.cert,
            pki.scheduler,
            "system:kube-scheduler",
        ),
        "kubelet": write_kubeconfig(
            layout.run_dir / "kubelet.kubeconfig",
            server,
            pki.ca.cert,
            pki.kubelet_client,
            f"system:node:{NODE_NAME}",
        ),
        "kube-proxy": write_kubeconfig(
            layout.run_dir / "kube-proxy.kubeconfig",
            server,
            pki.ca.cert,
            pki.kube_proxy,
            "system:kube-proxy",
        ),
        "kube-router": write_kubeconfig(
            layout.run_dir / "kube-router.kubeconfig",
            server,
            pki.ca.cert,
            pki.kube_router,
            node_config.KUBE_ROUTER_USER,
        ),
    }


def _health_context(pki: Pki) -> ssl.SSLContext:
    # The scheduler and controller manager serve self-signed certificates made at start.
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    context.load_cert_chain(str(pki.admin.cert), str(pki.admin.key))
    return context


def _import_images(layout: Layout, images: dict[str, Image]) -> None:
    for image in images.values():
        node_host.import_image(layout, image.archive)


def import_missing_images(layout: Layout) -> list[str]:
    """Import the images setup.sh last built into the RUNNING node's containerd, without
    restarting anything; returns the refs imported (none when the node has them all).

    Runtime image refs carry a hash of their sources, so a ref the node already holds is
    the same image; a rebuilt one arrives under a new ref next to the old one.
    """
    images = layout.read_images()
    present = node_host.image_refs(layout)
    missing = {role: image for role, image in images.items() if image.ref not in present}
    _import_images(layout, missing)
    return [image.ref for image in missing.values()]


def _wait_node_schedulable(api: KubeApi, deadline: float) -> None:
    """Ready, and the node-lifecycle controller has lifted the not-ready taints."""
    while time.monotonic() < deadline:
        response = api.request_sync("GET", f"/api/v1/nodes/{NODE_NAME}")
        if response.status == 200:
            taints = (response.body.get("spec") or {}).get("taints")
            if condition_is_true(response.body, "Ready") and not taints:
                return
        time.sleep(0.25)
    raise ClusterStartError(f"node {NODE_NAME} not schedulable in time")


def _service_and_policy_components(
    layout: Layout, ports: Ports, api: KubeApi, kubeconfigs: dict[str, Path]
) -> list[components.Component]:
    """kube-proxy, and kube-router's firewall when it was built (after granting its access)."""
    proxy_config = node_config.write_kube_proxy_config(layout, ports, kubeconfigs["kube-proxy"])
    started = [components.kube_proxy(layout, ports, proxy_config)]
    if layout.kube_router_binary.exists():
        for path, body in node_config.kube_router_access():
            api.checked_sync("POST", path, body)
        started.append(
            components.kube_router(
                layout,
                kubeconfigs["kube-router"],
                ready=lambda: host_network.chain_exists("KUBE-ROUTER-FORWARD"),
            )
        )
    return started


def _wait_default_service_account(api: KubeApi, deadline: float) -> None:
    while time.monotonic() < deadline:
        path = "/api/v1/namespaces/default/serviceaccounts/default"
        if api.request_sync("GET", path).status == 200:
            return
        time.sleep(0.25)
    raise ClusterStartError("the service account controller never created default/default")


def running_kubeconfig(layout: Layout) -> Path | None:
    """The admin kubeconfig of a local cluster that is already up (started by `cluster up`)."""
    if not layout.state_file.exists():
        return None
    records = _read_state(layout)
    if records and all(processes.is_alive(r) for r in records):
        return layout.admin_kubeconfig
    return None


def up(layout: Layout, ports: Ports, timeout_s: float = 180.0) -> ClusterInfo:
    """Start etcd, the control plane, containerd, the kubelet, kube-proxy and (when built)
    kube-router's NetworkPolicy firewall; return once pods can run and Services route."""
    started = time.monotonic()
    deadline = started + timeout_s
    if layout.state_file.exists():
        alive = [r for r in _read_state(layout) if processes.is_alive(r)]
        if alive:
            raise ClusterStartError(
                f"a cluster from {layout.cache} is already running "
                f"({', '.join(f'{r.name}={r.pid}' for r in alive)}); stop it with "
                "`python -m tests.cluster.harness.cluster down` (one local cluster per machine)"
            )
        down(layout)  # a previous run died without stopping: clean up after it first
    images = layout.read_images()
    layout.run_dir.mkdir(parents=True, exist_ok=True)
    pki = create_pki(layout.pki_dir)
    kubeconfigs = _kubeconfigs(layout, ports, pki)
    containerd_config = node_config.write_containerd_config(layout)
    node_config.write_cni_config(layout)
    kubelet_config = node_config.write_kubelet_config(layout, ports, pki)
    # Rules a run killed without `down` left would make kube-router look ready at once.
    host_network.remove_cluster_rules()
    host_network.create_bridge()
    node_host.create_cgroup_root()
    context = _health_context(pki)
    running: list[Running] = []

    def launch(component: components.Component) -> None:
        record, process = processes.start(component, layout.logs_dir)
        running.append(record)
        _record(layout, running, ports)
        processes.wait_healthy(component, record, process, context, deadline - time.monotonic())

    pool = concurrent.futures.ThreadPoolExecutor(max_workers=1)
    try:
        launch(components.containerd(layout, containerd_config))
        node_host.wait_for_socket(layout.containerd_socket, deadline)
        # Images go in while the control plane comes up; the kubelet needs them only for pods.
        importer = pool.submit(_import_images, layout, images)
        launch(components.etcd(layout, ports))
        launch(components.kube_apiserver(layout, ports, pki))
        launch(components.kube_controller_manager(layout, ports, pki, kubeconfigs["kcm"]))
        launch(components.kube_scheduler(layout, ports, kubeconfigs["scheduler"]))
        launch(components.kubelet(layout, ports, kubelet_config, kubeconfigs["kubelet"]))
        if layout.kwok_binary.exists():
            launch(components.kwok(layout, kubeconfigs["admin"]))
        api = KubeApi.from_kubeconfig(kubeconfigs["admin"])
        _wait_node_schedulable(api, deadline)
        # Both read the node's InternalIP (the bridge address), so they start once it exists.
        for component in _service_and_policy_components(layout, ports, api, kubeconfigs):
            launch(component)
        _wait_default_service_account(api, deadline)
        importer.result(timeout=max(0.0, deadline - time.monotonic()))
    except BaseException:
        pool.shutdown(wait=True)
        down(layout, keep_logs=True)
        raise
    pool.shutdown(wait=False)
    return ClusterInfo(
        kubeconfig=kubeconfigs["admin"],
        images={role: image.ref for role, image in images.items()},
        start_seconds=time.monotonic() - started,
    )


def down(layout: Layout, keep_logs: bool = False) -> Path | None:
    """Stop every recorded process by pid and undo what the node did to the host.

    Returns where the logs were kept (keep_logs), else None. Safe to call repeatedly.
    """
    by_name = {record.name: record for record in _read_state(layout)}
    for name in STOP_ORDER:
        record = by_name.get(name)
        if record is None:
            continue
        if name == "containerd" and processes.is_alive(record):
            # Containers first, while containerd can still delete them cleanly.
            node_host.remove_all_containers(layout)
        processes.stop(record)
    for leftover in node_host.leftover_shims(layout):
        processes.stop(leftover, grace_s=2.0)
    node_host.kill_cgroup_processes()
    node_host.unmount_under(layout.run_dir)
    filter_problems = host_network.remove_cluster_rules()
    host_network.delete_bridge()
    busy = node_host.remove_cgroup_root()
    kept = None
    if keep_logs and layout.logs_dir.exists():
        kept = layout.kept_logs_dir / time.strftime("%Y%m%d-%H%M%S")
        kept.parent.mkdir(parents=True, exist_ok=True)
        shutil.copytree(layout.logs_dir, kept)
    remaining = node_host.unmount_under(layout.run_dir)
    if remaining:
        raise RuntimeError(f"could not unmount {remaining}; left {layout.run_dir} in place")
    shutil.rmtree(layout.run_dir, ignore_errors=True)
    if busy:
        raise RuntimeError(f"cgroups still busy after stop: {busy}")
    if filter_problems:
        raise RuntimeError(f"packet-filter rules left behind: {filter_problems}")
    return kept


def _status(layout: Layout) -> int:
    records = _read_state(layout)
    if not records:
        print("not running")
        return 1
    for record in records:
        print(
            f"{record.name:26} pid {record.pid:7} {'up' if processes.is_alive(record) else 'DOWN'}"
        )
    print(f"KUBECONFIG={layout.admin_kubeconfig}")
    return 0


def _images(layout: Layout) -> int:
    if running_kubeconfig(layout) is None:
        print("no running cluster: `up` imports the images when it starts")
        return 0
    started = time.monotonic()
    imported = import_missing_images(layout)
    for ref in imported:
        print(f"imported {ref} into the running cluster")
    if not imported:
        print("the running cluster already has every image")
    for role, image in layout.read_images().items():
        print(f"image {role}: {image.ref}")
    print(f"images checked in {time.monotonic() - started:.1f}s")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("command", choices=["up", "down", "status", "check", "images"])
    parser.add_argument("--keep-logs", action="store_true", help="down: copy logs aside first")
    args = parser.parse_args()
    layout = Layout.default()
    if args.command == "check":
        problems = missing_prerequisites(layout)
        print("\n".join(problems) if problems else "ready")
        return 1 if problems else 0
    if args.command == "status":
        return _status(layout)
    if args.command == "images":
        return _images(layout)
    if args.command == "down":
        kept = down(layout, keep_logs=args.keep_logs)
        print(f"stopped; logs kept in {kept}" if kept else "stopped")
        return 0
    problems = missing_prerequisites(layout)
    if problems:
        print("cannot start:\n  " + "\n  ".join(problems), file=sys.stderr)
        return 1
    info = up(layout, Ports.from_environment())
    print(f"cluster up in {info.start_seconds:.1f}s")
    for role, ref in info.images.items():
        print(f"image {role}: {ref}")
    print(f"export KUBECONFIG={info.kubeconfig}")
    print(f"kubectl: {layout.binary('kubectl')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
