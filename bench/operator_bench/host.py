"""What the machine says about a process: RSS, CPU seconds, load, and rival operators."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import time
from pathlib import Path

from tests.cluster.harness.layout import Layout

CLUSTER_PROCESSES = (
    "kube-apiserver", "etcd", "kube-scheduler", "kube-controller-manager", "kwok", "kubelet",
    "kube-proxy", "kube-router", "containerd",
)  # fmt: skip


def rss_mib(pid: int) -> float | None:
    """VmRSS of `pid` in MiB; None once the process is gone."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


def open_sockets(pid: int) -> int | None:
    """Sockets the process holds open (its connections to the API server, mostly)."""
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return None
    count = 0
    for fd in fds:
        with contextlib.suppress(OSError):
            count += os.readlink(f"/proc/{pid}/fd/{fd}").startswith("socket:")
    return count


def schedstat(pid: int) -> tuple[float, float] | None:
    """(seconds on a CPU, seconds runnable but waiting for one) summed over its threads.

    The wait is what tells a starved process (2 shared cores, a high load average) from an
    idle one: both show little CPU use."""
    run = wait = 0
    try:
        for task in os.listdir(f"/proc/{pid}/task"):
            with contextlib.suppress(OSError):
                fields = Path(f"/proc/{pid}/task/{task}/schedstat").read_text().split()
                run, wait = run + int(fields[0]), wait + int(fields[1])
    except OSError:
        return None
    return run / 1e9, wait / 1e9


def load_average() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def cluster_pids() -> dict[str, int]:
    """The local test cluster's control-plane processes, by name (empty for another cluster)."""
    state = Layout.default().state_file
    try:
        processes = json.loads(state.read_text())["processes"]
    except (OSError, ValueError, KeyError):
        return {}
    return {p["name"]: int(p["pid"]) for p in processes if p["name"] in CLUSTER_PROCESSES}


def other_operators(mine: set[int]) -> list[int]:
    """Pids of sandfleet operators this bench did not start. A cluster-wide one (the e2e
    tests run one) reconciles the bench's sessions too, and the numbers would mean little."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) in mine:
            continue
        try:
            argv = Path(f"/proc/{entry}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"sandfleet.operator" in argv or any(a.endswith(b"sandfleet-operator") for a in argv):
            found.append(int(entry))
    return found


@dataclasses.dataclass
class CpuMeter:
    """CPU use of a set of processes between start() and read(), in cores (1.0 = one core
    busy all along), and how long they waited for a CPU while runnable (same unit)."""

    pids: dict[str, int]
    _start: dict[str, tuple[float, float]] = dataclasses.field(default_factory=dict)
    _wall: float = 0.0

    def start(self) -> None:
        self._wall = time.monotonic()
        self._start = {
            name: stat for name, pid in self.pids.items() if (stat := schedstat(pid)) is not None
        }

    def read(self, per: int | None = None) -> dict[str, dict[str, float]]:
        """Per process: cores used (1.0 = one core busy all along), cores' worth of time spent
        runnable but waiting for a CPU, and with `per`, CPU milliseconds per item (session)."""
        wall = max(time.monotonic() - self._wall, 1e-6)
        usage = {}
        for name, (run, wait) in self._start.items():
            now = schedstat(self.pids[name])
            if now is None:
                continue
            usage[name] = {
                "cpu": round((now[0] - run) / wall, 2),
                "runqueue_wait": round((now[1] - wait) / wall, 2),
            }
            if per:
                usage[name]["cpu_ms_each"] = round((now[0] - run) / per * 1000, 2)
        return usage
