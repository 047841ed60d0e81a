"""Resource use of the sandbox (memory, processes) and the activity clock behind idle reclaim."""

from __future__ import annotations

import dataclasses
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Literal

MemorySource = Literal["cgroup", "proc"]

_PAGE_SIZE = os.sysconf("SC_PAGE_SIZE")
# Fields of /proc/<pid>/stat after the ")" that closes the command name (proc(5) numbering
# minus 3): state is field 3, ppid field 4, rss (pages) field 24.
_STAT_PPID = 1
_STAT_RSS = 21


class ActivityClock:
    """When the runtime started and when a tool was last used.

    Idle time is measured on the monotonic clock, so a wall-clock step (NTP) cannot make a
    sandbox look idle or busy; the reported timestamps are wall-clock.
    """

    __slots__ = (
        "_clock",
        "_last_activity_monotonic",
        "_monotonic",
        "last_activity_unix",
        "started_monotonic",
        "started_unix",
    )

    def __init__(
        self,
        clock: Callable[[], float] = time.time,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self._clock = clock
        self._monotonic = monotonic
        self.started_unix = clock()
        self.started_monotonic = monotonic()
        self.last_activity_unix = self.started_unix
        self._last_activity_monotonic = self.started_monotonic

    def touch(self) -> None:
        """Records a tool call now (safe from any thread: two plain attribute stores)."""
        self.last_activity_unix = self._clock()
        self._last_activity_monotonic = self._monotonic()

    @property
    def uptime_s(self) -> float:
        return max(0.0, self._monotonic() - self.started_monotonic)

    @property
    def idle_s(self) -> float:
        return max(0.0, self._monotonic() - self._last_activity_monotonic)


@dataclasses.dataclass(frozen=True, slots=True)
class StatsSnapshot:
    memory_current_bytes: int
    memory_peak_bytes: int
    memory_source: MemorySource
    """"cgroup": the sandbox's memory cgroup; "proc": summed RSS of the runtime's process tree."""
    process_count: int
    """The root process and all its descendants."""
    uptime_s: float
    last_activity_unix: float
    idle_s: float


def collect_stats(
    activity: ActivityClock,
    *,
    cgroup_memory: Callable[[], tuple[int, int] | None] | None = None,
    root_pid: int | None = None,
) -> StatsSnapshot:
    """Memory from the cgroup when readable (`cgroup_memory` replaces the lookup), otherwise
    from /proc; processes below `root_pid` (default: this process), itself included."""
    tree = scan_process_tree(os.getpid() if root_pid is None else root_pid)
    cgroup = (cgroup_memory or read_cgroup_memory)()
    if cgroup is not None:
        current, peak = cgroup
        source: MemorySource = "cgroup"
    else:
        current, peak, source = tree.rss_bytes, tree.peak_rss_bytes(), "proc"
    return StatsSnapshot(
        memory_current_bytes=current,
        memory_peak_bytes=max(peak, current),
        memory_source=source,
        process_count=len(tree.pids),
        uptime_s=activity.uptime_s,
        last_activity_unix=activity.last_activity_unix,
        idle_s=activity.idle_s,
    )


def read_cgroup_memory(
    proc_self_cgroup: Path = Path("/proc/self/cgroup"),
    cgroup_root: Path = Path("/sys/fs/cgroup"),
) -> tuple[int, int] | None:
    """(current, peak) bytes of this process's memory cgroup, or None when not readable.

    cgroup v2 (memory.current / memory.peak) wins over v1 (memory.usage_in_bytes /
    memory.max_usage_in_bytes); hybrid hosts list both. When the cgroup directory named in
    /proc/self/cgroup does not exist, the mount is the container's own cgroup (no cgroup
    namespace), so its root is read instead. Without memory.peak (kernels before 5.19) the
    peak is the current value.
    """
    try:
        lines = proc_self_cgroup.read_text().splitlines()
    except OSError:
        return None
    v2_path = v1_path = None
    for line in lines:
        hierarchy, _, rest = line.partition(":")
        controllers, _, path = rest.partition(":")
        if hierarchy == "0" and not controllers:
            v2_path = path
        elif "memory" in controllers.split(","):
            v1_path = path
    if v2_path is not None:
        directory = _cgroup_directory(cgroup_root, v2_path)
        current = _read_int(directory / "memory.current")
        if current is not None:
            return current, _read_int(directory / "memory.peak") or current
    if v1_path is not None:
        directory = _cgroup_directory(cgroup_root / "memory", v1_path)
        current = _read_int(directory / "memory.usage_in_bytes")
        if current is not None:
            return current, _read_int(directory / "memory.max_usage_in_bytes") or current
    return None


def _cgroup_directory(mount: Path, cgroup_path: str) -> Path:
    named = mount / cgroup_path.lstrip("/")
    return named if named.is_dir() else mount


def _read_int(path: Path) -> int | None:
    try:
        return int(path.read_text().strip())
    except (OSError, ValueError):
        return None


@dataclasses.dataclass(frozen=True, slots=True)
class ProcessTree:
    root_pid: int
    pids: tuple[int, ...]
    """The root (when alive) and its descendants."""
    rss_bytes: int
    """Resident memory summed over `pids`."""
    root_rss_bytes: int

    def peak_rss_bytes(self) -> int:
        """The root's high-water mark plus its descendants' current RSS. Descendants come and
        go, so their own peaks would overstate what was ever resident at once."""
        hwm = _root_high_water_mark(self.root_pid)
        if hwm is None:
            return self.rss_bytes
        return max(hwm, self.root_rss_bytes) + self.rss_bytes - self.root_rss_bytes


def scan_process_tree(root_pid: int, proc: str = "/proc") -> ProcessTree:
    """One pass over /proc/<pid>/stat: parent links and RSS of every visible process."""
    parent_of: dict[int, int] = {}
    rss_pages: dict[int, int] = {}
    for name in os.listdir(proc):
        if not name.isdigit():
            continue
        fields = _stat_fields(f"{proc}/{name}/stat")
        if fields is None:
            continue  # exited since listdir
        pid = int(name)
        parent_of[pid] = int(fields[_STAT_PPID])
        rss_pages[pid] = int(fields[_STAT_RSS])
    if root_pid not in parent_of:
        return ProcessTree(root_pid, (), 0, 0)
    children: dict[int, list[int]] = {}
    for pid, parent in parent_of.items():
        children.setdefault(parent, []).append(pid)
    pids = [root_pid]
    seen = {root_pid}
    for pid in pids:  # grows while iterating: breadth-first walk
        for child in children.get(pid, ()):
            if child not in seen:  # pid reuse mid-scan could otherwise make a cycle
                seen.add(child)
                pids.append(child)
    rss = sum(rss_pages[pid] for pid in pids) * _PAGE_SIZE
    return ProcessTree(root_pid, tuple(pids), rss, rss_pages[root_pid] * _PAGE_SIZE)


def _stat_fields(path: str) -> list[bytes] | None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return None
    try:
        raw = os.read(fd, 4096)
    except OSError:
        return None
    finally:
        os.close(fd)
    # The command name may contain spaces and parentheses; it ends at the last ")".
    return raw[raw.rfind(b")") + 2 :].split()


def _root_high_water_mark(pid: int) -> int | None:
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return None
    for line in status.splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024  # reported in kB
    return None
