"""Process and memory limits for everything the bash sessions start, never for the runtime itself.

Strategies, best first: a cgroup v2 child of the runtime's cgroup (when the controllers are
delegated to us), a cgroup v1 child in the pids and memory hierarchies (when writable),
RLIMIT_NPROC on each shell (non-root only: the kernel does not enforce it for root), or
nothing but a warning. The runtime stays outside the limited group, so a fork bomb or a
memory hog in a session cannot starve the server that has to kill it.

All methods do blocking file I/O on cgroupfs: cheap, but call the kill and destroy methods
from a worker thread.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import re
import resource
import time
from pathlib import Path

from sandfleet_runtime.bash.processes import kill_until_none_listed
from sandfleet_runtime.cgroupfs import all_mounts, cgroup_directory, own_cgroups, write_value

log = logging.getLogger(__name__)

_KILL_DEADLINE_S = 5.0


def _read_int(path: Path) -> int | None:
    try:
        return int(path.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def _pids_in(directory: Path) -> list[int]:
    try:
        return [int(line) for line in (directory / "cgroup.procs").read_text().split()]
    except OSError:
        return []


def _limit_hits(events: Path) -> int | None:
    # Read before every command: raw os calls, a third of what pathlib costs.
    try:
        fd = os.open(events, os.O_RDONLY)
        try:
            content = os.read(fd, 4096)
        finally:
            os.close(fd)
        for line in content.splitlines():
            key, _, value = line.partition(b" ")
            if key == b"max":
                return int(value)
    except (OSError, ValueError):
        return None
    return None


class SessionLimits:
    """Limits on the processes the sessions start. Build with `SessionLimits.create()`."""

    def __init__(self, *, max_processes: int | None, max_memory_bytes: int | None) -> None:
        self.max_processes = max_processes
        self.max_memory_bytes = max_memory_bytes

    @classmethod
    def create(
        cls, *, max_processes: int | None, max_memory_bytes: int | None, name: str
    ) -> SessionLimits | None:
        """The best available strategy, or None (with a warning) when nothing can be enforced."""
        if max_processes is None and max_memory_bytes is None:
            return None
        safe_name = "sandfleet-" + re.sub(r"[^A-Za-z0-9_.-]", "_", name)
        strategies: tuple[type[CgroupV2Limits] | type[CgroupV1Limits], ...]
        strategies = (CgroupV2Limits, CgroupV1Limits)
        for strategy in strategies:
            try:
                cgroup = strategy.try_create(max_processes, max_memory_bytes, safe_name)
            except OSError as error:
                log.info(
                    "cgroup_unavailable", extra={"strategy": strategy.__name__, "error": str(error)}
                )
                continue
            if cgroup is not None:
                log.info("session_limits_applied", extra={"limits": cgroup.describe()})
                return cgroup
        if max_memory_bytes is not None:
            log.warning(
                "memory_limit_not_enforced",
                extra={"reason": "no writable cgroup", "max_memory_bytes": max_memory_bytes},
            )
        if max_processes is None:
            return None
        if os.geteuid() == 0:
            log.warning(
                "process_limit_not_enforced",
                extra={
                    "reason": "no writable cgroup, and the kernel ignores RLIMIT_NPROC for root",
                    "max_processes": max_processes,
                },
            )
        rlimit = RlimitLimits(max_processes=max_processes)
        log.info("session_limits_applied", extra={"limits": rlimit.describe()})
        return rlimit

    def attach(self, pid: int) -> None:
        """Puts a freshly spawned shell under the limits (before it runs any user code)."""

    def members(self) -> list[int]:
        """Processes currently under the limits ([] when the strategy cannot tell)."""
        return []

    def memory_current_bytes(self) -> int | None:
        return None

    def memory_peak_bytes(self) -> int | None:
        return None

    def memory_usage(self) -> tuple[int, int] | None:
        """(current, peak) bytes of the limited group, or None when it is not measured."""
        current, peak = self.memory_current_bytes(), self.memory_peak_bytes()
        if current is None:
            return None
        return current, current if peak is None else max(peak, current)

    def process_limit_hits(self) -> int | None:
        """How many forks the process limit has refused so far (None: not tracked)."""
        return None

    def kill_all(self) -> None:
        """SIGKILLs every member until none is left (blocking)."""

    def destroy(self) -> None:
        """Kills the members and removes what `create` set up (blocking)."""

    def describe(self) -> str:
        raise NotImplementedError


class _CgroupLimits(SessionLimits):
    """Shared by both cgroup versions: a set of directories, the first one lists members."""

    version = 0

    def __init__(
        self, *, max_processes: int | None, max_memory_bytes: int | None, directories: list[Path]
    ) -> None:
        super().__init__(max_processes=max_processes, max_memory_bytes=max_memory_bytes)
        self.directories = directories

    def attach(self, pid: int) -> None:
        for directory in self.directories:
            write_value(directory / "cgroup.procs", str(pid))

    def members(self) -> list[int]:
        return _pids_in(self.directories[0])

    def kill_all(self) -> None:
        if left := kill_until_none_listed(
            self.members, deadline_s=_KILL_DEADLINE_S, stop_first=True
        ):
            log.warning("cgroup_members_survived_kill", extra={"count": left})

    def destroy(self) -> None:
        self.kill_all()
        for directory in self.directories:
            for attempt in range(50):
                try:
                    directory.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError as error:
                    # EBUSY until the killed members have fully exited.
                    if error.errno != errno.EBUSY or attempt == 49:
                        log.warning(
                            "cgroup_not_removed",
                            extra={"path": str(directory), "error": str(error)},
                        )
                        break
                    time.sleep(0.02)

    def describe(self) -> str:
        limits = []
        if self.max_processes is not None:
            limits.append(f"max {self.max_processes} processes")
        if self.max_memory_bytes is not None:
            limits.append(f"max {self.max_memory_bytes} bytes of memory")
        where = ", ".join(str(directory) for directory in self.directories)
        return f"cgroup v{self.version} ({'; '.join(limits)}) at {where}"


class CgroupV2Limits(_CgroupLimits):
    version = 2

    @classmethod
    def try_create(
        cls, max_processes: int | None, max_memory_bytes: int | None, name: str
    ) -> CgroupV2Limits | None:
        path = own_cgroups().get("")
        mount = next((m for m in all_mounts() if m[2] == "cgroup2"), None)
        if path is None or mount is None:
            return None
        parent = cgroup_directory(mount[0], mount[1], path)
        if parent is None:
            return None
        needed = {"pids"} if max_processes is not None else set()
        if max_memory_bytes is not None:
            needed.add("memory")
        if not needed <= set((parent / "cgroup.controllers").read_text().split()):
            return None
        if not needed <= set((parent / "cgroup.subtree_control").read_text().split()):
            cls._enable_controllers(parent, needed)
        directory = parent / name
        directory.mkdir(exist_ok=True)
        limits = cls(
            max_processes=max_processes, max_memory_bytes=max_memory_bytes, directories=[directory]
        )
        try:
            if max_processes is not None:
                write_value(directory / "pids.max", str(max_processes))
            if max_memory_bytes is not None:
                write_value(directory / "memory.max", str(max_memory_bytes))
                with contextlib.suppress(OSError):  # no swap accounting: nothing to escape to
                    write_value(directory / "memory.swap.max", "0")
        except OSError:
            limits.destroy()
            raise
        return limits

    @staticmethod
    def _enable_controllers(parent: Path, needed: set[str]) -> None:
        """Delegates controllers to children; may first move the runtime into a leaf cgroup.

        cgroup v2 forbids controllers in the subtree of a non-root cgroup that holds
        processes itself, so when the runtime is alone in its cgroup it moves to
        `<cgroup>/sandfleet-runtime` (and stays there, outside the session limits).
        """
        control = " ".join(f"+{controller}" for controller in sorted(needed))
        try:
            write_value(parent / "cgroup.subtree_control", control)
            return
        except OSError as error:
            if error.errno != errno.EBUSY or _pids_in(parent) != [os.getpid()]:
                raise
        leaf = parent / "sandfleet-runtime"
        leaf.mkdir(exist_ok=True)
        write_value(leaf / "cgroup.procs", str(os.getpid()))
        write_value(parent / "cgroup.subtree_control", control)

    def memory_current_bytes(self) -> int | None:
        return _read_int(self.directories[0] / "memory.current")

    def memory_peak_bytes(self) -> int | None:
        return _read_int(self.directories[0] / "memory.peak")

    def process_limit_hits(self) -> int | None:
        return _limit_hits(self.directories[0] / "pids.events")

    def kill_all(self) -> None:
        # cgroup.kill (Linux 5.14) kills every member atomically, forking ones included.
        with contextlib.suppress(OSError):
            write_value(self.directories[0] / "cgroup.kill", "1")
        super().kill_all()


class CgroupV1Limits(_CgroupLimits):
    version = 1

    @classmethod
    def try_create(
        cls, max_processes: int | None, max_memory_bytes: int | None, name: str
    ) -> CgroupV1Limits | None:
        own = own_cgroups()
        mounts = all_mounts()
        wanted = []
        if max_processes is not None:
            wanted.append("pids")
        if max_memory_bytes is not None:
            wanted.append("memory")
        directories: list[Path] = []
        for controller in wanted:
            mount = next((m for m in mounts if m[2] == "cgroup" and controller in m[3]), None)
            if mount is None or controller not in own:
                return None
            parent = cgroup_directory(mount[0], mount[1], own[controller])
            if parent is None or not os.access(parent, os.W_OK):
                return None
            directories.append(parent / name)
        limits = cls(max_processes=max_processes, max_memory_bytes=max_memory_bytes, directories=[])
        try:
            for directory in directories:
                directory.mkdir(exist_ok=True)
                limits.directories.append(directory)
            if max_processes is not None:
                write_value(limits.directories[0] / "pids.max", str(max_processes))
            if max_memory_bytes is not None:
                memory = limits.directories[-1]
                write_value(memory / "memory.limit_in_bytes", str(max_memory_bytes))
                with contextlib.suppress(OSError):  # only with swap accounting enabled
                    write_value(memory / "memory.memsw.limit_in_bytes", str(max_memory_bytes))
        except OSError:
            limits.destroy()
            raise
        return limits

    def _memory_directory(self) -> Path | None:
        return self.directories[-1] if self.max_memory_bytes is not None else None

    def memory_current_bytes(self) -> int | None:
        memory = self._memory_directory()
        return None if memory is None else _read_int(memory / "memory.usage_in_bytes")

    def memory_peak_bytes(self) -> int | None:
        memory = self._memory_directory()
        return None if memory is None else _read_int(memory / "memory.max_usage_in_bytes")

    def process_limit_hits(self) -> int | None:
        if self.max_processes is None:
            return None
        return _limit_hits(self.directories[0] / "pids.events")


class RlimitLimits(SessionLimits):
    """RLIMIT_NPROC on each shell, inherited by everything it starts.

    Weaker than a cgroup: the kernel counts every process of the same user (the runtime's
    threads included) against it, and ignores it for root. There is no memory limit.
    """

    def __init__(self, *, max_processes: int) -> None:
        super().__init__(max_processes=max_processes, max_memory_bytes=None)

    def attach(self, pid: int) -> None:
        assert self.max_processes is not None
        limit = (self.max_processes, self.max_processes)
        resource.prlimit(pid, resource.RLIMIT_NPROC, limit)

    def describe(self) -> str:
        enforced = "not enforced for root" if os.geteuid() == 0 else "per user"
        return f"RLIMIT_NPROC={self.max_processes} ({enforced}; no memory limit)"
