"""Host-side process facts from /proc: identities that survive pid reuse, trees, and killing.

Everything here is synchronous and cheap (a few /proc reads); callers on the event loop
run the whole-/proc scans in a thread.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import signal
from collections.abc import Iterable, Sequence
from pathlib import Path

from sandfleet.backends.local.cgroups import members

PROC = Path("/proc")
SANDBOX_ID_ENV = "SANDFLEET_SANDBOX_ID"
"""Set in every sandbox's environment; finds its processes when no namespace holds them."""


@dataclasses.dataclass(frozen=True, slots=True)
class ProcessIdentity:
    """A pid plus its start time (clock ticks after boot): the pair never names two processes."""

    pid: int
    start_time: int

    @classmethod
    def of(cls, pid: int) -> ProcessIdentity | None:
        start = start_time(pid)
        return None if start is None else cls(pid, start)

    def is_alive(self) -> bool:
        return start_time(self.pid) == self.start_time

    def send(self, sig: int) -> bool:
        """Signal this exact process (a pidfd pins it, so a reused pid is never hit)."""
        try:
            pidfd = os.pidfd_open(self.pid)
        except OSError:
            return False
        try:
            if start_time(self.pid) != self.start_time:
                return False
            signal.pidfd_send_signal(pidfd, sig)
            return True
        except OSError:
            return False
        finally:
            os.close(pidfd)


def start_time(pid: int) -> int | None:
    """Field 22 of /proc/<pid>/stat; None when the process is gone (or a zombie we can't see)."""
    try:
        stat = (PROC / str(pid) / "stat").read_bytes()
    except OSError:
        return None
    # The command name (field 2) may hold spaces and parentheses: split after the last ')'.
    fields = stat[stat.rfind(b")") + 2 :].split()
    return int(fields[19])


def parent_pid(pid: int) -> int | None:
    try:
        stat = (PROC / str(pid) / "stat").read_bytes()
    except OSError:
        return None
    return int(stat[stat.rfind(b")") + 2 :].split()[1])


def children_of(pid: int) -> list[int]:
    """Direct children (all threads' children files; CONFIG_PROC_CHILDREN is standard)."""
    found: list[int] = []
    try:
        tasks = list((PROC / str(pid) / "task").iterdir())
    except OSError:
        return found
    for task in tasks:
        with contextlib.suppress(OSError):
            found.extend(int(p) for p in (task / "children").read_text().split())
    return found


def descendants_of(pid: int) -> list[int]:
    """Every process below pid, parents before children."""
    order: list[int] = []
    queue = children_of(pid)
    while queue:
        child = queue.pop(0)
        if child in order:
            continue
        order.append(child)
        queue.extend(children_of(child))
    return order


def command_line(pid: int) -> list[str]:
    try:
        raw = (PROC / str(pid) / "cmdline").read_bytes()
    except OSError:
        return []
    return [os.fsdecode(part) for part in raw.split(b"\0") if part]


def pids_tagged(sandbox_ids: Iterable[str]) -> dict[str, list[int]]:
    """Processes whose initial environment carries SANDFLEET_SANDBOX_ID=<id>, per id.

    This finds a sandbox's daemons after they double-forked away from its process tree,
    when no PID namespace holds them. A process that exec'd with a scrubbed environment
    escapes it; only a namespace or a cgroup is airtight.
    """
    wanted = {f"{SANDBOX_ID_ENV}={sid}".encode(): sid for sid in sandbox_ids}
    found: dict[str, list[int]] = {sid: [] for sid in wanted.values()}
    if not wanted:
        return found
    me = os.getpid()
    for entry in PROC.iterdir():
        if not entry.name.isdigit() or int(entry.name) == me:
            continue
        try:
            environ = (entry / "environ").read_bytes()
        except OSError:
            continue
        for variable in environ.split(b"\0"):
            sid = wanted.get(variable)
            if sid is not None:
                found[sid].append(int(entry.name))
                break
    return found


def kill_all(pids: Iterable[int]) -> None:
    """SIGSTOP first so nothing forks a replacement while we work down the list, then SIGKILL."""
    targets = [pid for pid in pids if pid > 1 and pid != os.getpid()]
    for sig in (signal.SIGSTOP, signal.SIGKILL):
        for pid in targets:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, sig)


def kill_sandbox_processes(
    sandbox_id: str,
    leader: ProcessIdentity | None,
    cgroups: Sequence[Path] = (),
    known: Sequence[ProcessIdentity] = (),
) -> int:
    """SIGKILL everything a sandbox runs; return how many processes were signalled.

    The tree below the leader (our child) comes first: killing a namespace's PID 1 takes
    the whole namespace with it. Then the members of its cgroups, the `known` processes
    still alive, and, round after round until none is left, every process tagged with the
    sandbox's id: daemons that left the tree of an un-namespaced sandbox.
    """
    signalled: set[int] = set()
    if leader is not None and leader.is_alive():
        tree = [*descendants_of(leader.pid), leader.pid]
        kill_all(tree)
        signalled.update(tree)
    survivors = {identity.pid for identity in known if identity.is_alive()} - signalled
    kill_all(survivors)
    signalled.update(survivors)
    in_cgroups = members(cgroups) - signalled
    kill_all(in_cgroups)
    signalled.update(in_cgroups)
    # A process forked between a scan and the SIGSTOP of its parent shows up in the next
    # scan; one that is merely still dying shows up again and needs nothing more.
    for _ in range(_MAX_KILL_ROUNDS):
        fresh = set(pids_tagged([sandbox_id])[sandbox_id]) - signalled
        if not fresh:
            break
        kill_all(fresh)
        signalled.update(fresh)
    return len(signalled)


_MAX_KILL_ROUNDS = 50


def boot_id() -> str:
    """Changes at every boot: pids and start times from another boot mean nothing."""
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return ""
