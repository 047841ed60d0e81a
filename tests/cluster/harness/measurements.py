"""Numbers the cluster tests report: host memory, and where results are kept."""

from __future__ import annotations

import json
from pathlib import Path

from tests.cluster.harness.layout import CGROUP_ROOT, Layout

MIB = 1024 * 1024


def used_memory_bytes() -> int:
    """Host memory in use (MemTotal - MemAvailable): what the node's pods cost the machine."""
    fields = {}
    for line in Path("/proc/meminfo").read_text().splitlines():
        key, value = line.split(":", 1)
        fields[key] = int(value.split()[0]) * 1024
    return fields["MemTotal"] - fields["MemAvailable"]


def record(name: str, result: dict[str, object]) -> None:
    """Keep the numbers next to the cache (README quotes them) and show them in the log."""
    directory = Layout.default().cache / "results"
    directory.mkdir(parents=True, exist_ok=True)
    (directory / f"{name}.json").write_text(json.dumps(result, indent=2))
    print(f"\n{name}: {json.dumps(result)}")


def _memory_cgroup_root() -> Path:
    v1 = Path("/sys/fs/cgroup/memory") / CGROUP_ROOT
    return v1 if v1.exists() else Path("/sys/fs/cgroup") / CGROUP_ROOT


def pod_working_sets(pod_uids: list[str]) -> dict[str, int]:
    """Working set of each pod's cgroup, computed the way the kubelet does: usage minus the
    inactive file cache (reclaimable), from the cgroupfs tree under the kubelet's cgroup root.
    """
    directories = {p.name: p for p in _memory_cgroup_root().rglob("pod*") if p.is_dir()}
    working_sets = {}
    for uid in pod_uids:
        directory = directories[f"pod{uid}"]
        stat = dict(
            (key, int(value))
            for key, value in (
                line.split() for line in (directory / "memory.stat").read_text().splitlines()
            )
        )
        if (directory / "memory.usage_in_bytes").exists():  # cgroup v1
            usage = int((directory / "memory.usage_in_bytes").read_text())
            inactive = stat.get("total_inactive_file", 0)
        else:
            usage = int((directory / "memory.current").read_text())
            inactive = stat.get("inactive_file", 0)
        working_sets[uid] = max(0, usage - inactive)
    return working_sets
