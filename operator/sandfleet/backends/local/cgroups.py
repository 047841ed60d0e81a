"""A parent cgroup per sandbox: placement, an outer limit, delegation and bookkeeping.

Why a second layer next to the runtime's session limits: the runtime names its cgroup after
its pid, and inside a PID namespace every agent is pid 2, so agents sharing our cgroup would
share (and, on close, kill) one cgroup. A per-sandbox parent gives each agent its own place,
so its limits (--max-processes, --max-memory) apply to that sandbox alone. Membership is
also the one airtight way to find every process of an un-namespaced sandbox (a daemon can
leave its process tree and scrub its environment, not its cgroup), and it lets close() and
the orphan sweep remove whatever cgroups a SIGKILLed agent left behind.

The host sets the outer limits (the sandbox's own plus headroom for its runtime agent, which
lives in the same cgroup: its memory is bounded too) and hands the directory to the
sandbox's host uid (cgroup delegation: it may create children and move its processes
between them, never write these limits, a sibling's, or move out). Inside the sandbox only
this directory is writable; the rest of /sys/fs/cgroup is read-only.

Created as a child of our own cgroup in each writable hierarchy the runtime uses: the pids
and memory controllers of cgroup v1, or the unified v2 hierarchy. Needs write access to
cgroupfs (root, or a delegated subtree); without it there is nothing to do.
Blocking file I/O on cgroupfs: call from a worker thread.
"""

from __future__ import annotations

import contextlib
import errno
import os
import time
from collections.abc import Iterable
from pathlib import Path

from sandfleet.logs import get_logger
from sandfleet_runtime.cgroupfs import all_mounts, cgroup_directory, own_cgroups, write_value

log = get_logger(__name__)

V1_CONTROLLERS = ("pids", "memory")
AGENT_PROCESS_HEADROOM = 64
"""Tasks (threads count) the runtime agent and the sandbox's init may use beyond the limit."""
AGENT_MEMORY_HEADROOM = 256 * 1024**2
# Files of a cgroup directory its delegatee must own (cgroup-v2.rst, "Delegation"; v1: tasks).
_DELEGATED_FILES = ("cgroup.procs", "cgroup.subtree_control", "cgroup.threads", "tasks")
_RMDIR_DEADLINE_S = 5.0


def our_cgroup_parents() -> list[Path]:
    """Our own cgroup directory in each hierarchy where a sandbox parent makes sense and we
    may create children: v1 pids and memory, else the v2 unified hierarchy."""
    try:
        own, mounts = own_cgroups(), all_mounts()
    except OSError:
        return []
    parents: list[Path] = []
    for controller in V1_CONTROLLERS:
        mount = next((m for m in mounts if m[2] == "cgroup" and controller in m[3]), None)
        if mount is not None and controller in own:
            parents.append(cgroup_directory(mount[0], mount[1], own[controller]) or Path())
    if not parents:
        mount = next((m for m in mounts if m[2] == "cgroup2"), None)
        if mount is not None and "" in own:
            parents.append(cgroup_directory(mount[0], mount[1], own[""]) or Path())
    return [p for p in parents if p != Path() and os.access(p, os.W_OK)]


def planned_cgroups(sandbox_id: str) -> list[Path]:
    """Where the sandbox's parent cgroups go: `sandfleet-<id>` below ours, per hierarchy."""
    return [parent / f"sandfleet-{sandbox_id}" for parent in our_cgroup_parents()]


def create_cgroups(directories: list[Path]) -> bool:
    """mkdir each; on any failure remove what was made and return False."""
    for index, directory in enumerate(directories):
        try:
            directory.mkdir()
        except OSError as exc:
            log.info("sandbox_cgroup_unavailable", path=str(directory), error=str(exc))
            remove_cgroups(directories[:index])
            return False
    return True


def limit_and_delegate(
    directories: Iterable[Path],
    *,
    max_processes: int | None,
    max_memory_bytes: int | None,
    owner_uid: int | None,
) -> None:
    """Write the outer limits, then chown each directory (and the files delegation needs) to
    `owner_uid` (None: keep ours; we are not root and the sandbox runs as us anyway)."""
    for directory in directories:
        if max_processes is not None:
            _write_if_present(directory / "pids.max", max_processes + AGENT_PROCESS_HEADROOM)
        if max_memory_bytes is not None:
            memory = max_memory_bytes + AGENT_MEMORY_HEADROOM
            _write_if_present(directory / "memory.max", memory)
            _write_if_present(directory / "memory.limit_in_bytes", memory)
        if owner_uid is None:
            continue
        os.chown(directory, owner_uid, owner_uid)
        for name in _DELEGATED_FILES:
            with contextlib.suppress(FileNotFoundError):
                os.chown(directory / name, owner_uid, owner_uid)


def _write_if_present(path: Path, value: int) -> None:
    if path.exists():
        write_value(path, str(value))


def join(directories: Iterable[Path], pids: Iterable[int]) -> bool:
    """Move processes (whole thread groups) into every directory; False if refused."""
    for directory in directories:
        for pid in pids:
            try:
                write_value(directory / "cgroup.procs", str(pid))
            except ProcessLookupError:
                continue
            except OSError as exc:
                log.warning("sandbox_cgroup_join_failed", path=str(directory), error=str(exc))
                return False
    return True


def members(directories: Iterable[Path]) -> set[int]:
    """Every process in the directories and their sub-cgroups (the runtime's own)."""
    found: set[int] = set()
    for directory in directories:
        for root, _, _ in os.walk(directory):
            with contextlib.suppress(OSError, ValueError):
                found.update(int(p) for p in Path(root, "cgroup.procs").read_text().split())
    return found


def remove_cgroups(directories: Iterable[Path]) -> None:
    """rmdir bottom-up, including sub-cgroups a killed agent left; EBUSY while members exit."""
    deadline = time.monotonic() + _RMDIR_DEADLINE_S
    for directory in directories:
        for root, _, _ in sorted(os.walk(directory), key=lambda e: -len(Path(e[0]).parts)):
            _rmdir_when_empty(Path(root), deadline)


def _rmdir_when_empty(directory: Path, deadline: float) -> None:
    pause = 0.001
    while True:
        try:
            directory.rmdir()
            return
        except FileNotFoundError:
            return
        except OSError as exc:
            if exc.errno != errno.EBUSY or time.monotonic() > deadline:
                log.warning("sandbox_cgroup_not_removed", path=str(directory), error=str(exc))
                return
        time.sleep(pause)  # a killed member is still exiting: it leaves within milliseconds
        pause = min(pause * 2, 0.05)
