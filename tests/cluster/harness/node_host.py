"""What the node changes on the host (cgroups, mounts, containers) and how it is undone; the
network side is host_network.py."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from pathlib import Path

from tests.cluster.harness.layout import CGROUP_ROOT, Layout
from tests.cluster.harness.processes import Running

CGROUP_V1_BASE = Path("/sys/fs/cgroup")


def _run(*argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, check=check, capture_output=True, text=True)


def _cgroup_controllers() -> list[Path]:
    """Every v1 hierarchy (cpu, memory, ...) or the single v2 one."""
    if (CGROUP_V1_BASE / "cgroup.controllers").exists():
        return [CGROUP_V1_BASE]
    return [
        path
        for path in CGROUP_V1_BASE.iterdir()
        if path.is_dir() and not path.is_symlink() and (path / "cgroup.procs").exists()
    ]


def create_cgroup_root() -> None:
    """The kubelet's cgroupRoot must exist in every hierarchy before it starts."""
    for controller in _cgroup_controllers():
        (controller / CGROUP_ROOT).mkdir(exist_ok=True)


def kill_cgroup_processes() -> list[int]:
    """SIGKILL whatever still runs in the kubelet's cgroup tree (containers of a crashed run
    whose shims are gone); every pid comes from our own cgroup, so nothing else is touched.
    """
    killed = []
    for controller in _cgroup_controllers():
        root = controller / CGROUP_ROOT
        if not root.exists():
            continue
        for procs in root.rglob("cgroup.procs"):
            for pid in procs.read_text().split():
                with contextlib.suppress(ProcessLookupError):
                    os.kill(int(pid), signal.SIGKILL)
                    killed.append(int(pid))
    return killed


def remove_cgroup_root(timeout_s: float = 10.0) -> list[str]:
    """rmdir the kubelet's cgroup trees depth-first; returns the ones still busy."""
    busy: list[str] = []
    for controller in _cgroup_controllers():
        root = controller / CGROUP_ROOT
        if not root.exists():
            continue
        directories = sorted(
            (p for p in root.rglob("*") if p.is_dir()), key=lambda p: len(p.parts), reverse=True
        )
        for directory in [*directories, root]:
            deadline = time.monotonic() + timeout_s
            while directory.exists():
                try:
                    directory.rmdir()
                except OSError:
                    # A cgroup whose last task just died stays busy for a moment.
                    if time.monotonic() > deadline:
                        busy.append(str(directory))
                        break
                    time.sleep(0.1)
    return busy


def mounts_under(prefix: Path) -> list[str]:
    """Mount points at or below prefix, deepest first, from /proc/self/mountinfo."""
    resolved = str(prefix.resolve())
    points = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        point = line.split()[4].replace("\\040", " ")
        if point == resolved or point.startswith(resolved + "/"):
            points.append(point)
    return sorted(set(points), key=lambda p: p.count("/"), reverse=True)


def unmount_under(prefix: Path) -> list[str]:
    """Unmount everything the node mounted below prefix; returns what would not go."""
    for point in mounts_under(prefix):
        if _run("umount", point, check=False).returncode != 0:
            _run("umount", "--lazy", point, check=False)
    return mounts_under(prefix)


def ctr(layout: Layout, *args: str, timeout_s: float = 120.0) -> subprocess.CompletedProcess[str]:
    """containerd's own CLI against this node's socket, in the CRI namespace."""
    return subprocess.run(
        ["ctr", "--address", str(layout.containerd_socket), "--namespace", "k8s.io", *args],
        check=False,
        capture_output=True,
        text=True,
        timeout=timeout_s,
    )


def import_image(layout: Layout, archive: Path) -> None:
    result = ctr(layout, "images", "import", str(archive), timeout_s=300)
    if result.returncode != 0:
        raise RuntimeError(f"ctr images import {archive} failed: {result.stderr.strip()}")


def image_refs(layout: Layout) -> set[str]:
    """Names of the images the node's containerd holds (digest-only entries left out)."""
    result = ctr(layout, "images", "list", "--quiet")
    if result.returncode != 0:
        raise RuntimeError(f"ctr images list failed: {result.stderr.strip()}")
    return {ref for ref in result.stdout.split() if not ref.startswith("sha256:")}


def remove_all_containers(layout: Layout) -> None:
    """Force-delete every task and container the kubelet left, so no shim outlives the node."""
    listed = ctr(layout, "containers", "list", "--quiet")
    ids = listed.stdout.split()
    if not ids:
        return
    ctr(layout, "tasks", "delete", "--force", *ids)
    ctr(layout, "containers", "delete", *ids)


def wait_for_socket(socket: Path, deadline: float) -> None:
    """containerd is up once its socket answers a version request."""
    while time.monotonic() < deadline:
        if socket.exists():
            probe = subprocess.run(
                ["ctr", "--address", str(socket), "version"], capture_output=True, check=False
            )
            if probe.returncode == 0:
                return
        time.sleep(0.1)
    raise RuntimeError(f"containerd socket {socket} never answered")


def leftover_shims(layout: Layout) -> list[Running]:
    """Shims still serving this node's containerd socket after it stopped (a crashed run).

    Matched on the exact socket path of this run directory, so nothing else is touched.
    """
    socket = str(layout.containerd_socket)
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            argv = (proc / "cmdline").read_bytes().split(b"\0")
            executable = os.readlink(proc / "exe")
        except OSError:
            continue
        if socket.encode() in argv and "containerd-shim" in Path(executable).name:
            found.append(Running("shim", int(proc.name), executable, ""))
    return found
