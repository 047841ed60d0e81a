"""Children of the runtime: the SIGCHLD reaper, the subreaper flag, process-tree discovery, kill.

The runtime is a child subreaper, so a process that the sessions start and that loses its
parent (a double-forked daemon, the children of a killed subshell) is re-parented to the
runtime instead of init. That keeps every such process findable under the runtime, and the
`ChildReaper` reaps it when it exits, so no zombies pile up.

Process discovery reads /proc only; it runs on the slow paths (timeout, interrupt, close),
never per command.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import dataclasses
import fcntl
import logging
import os
import signal
import time
from collections.abc import Callable, Collection, Iterable, Mapping

log = logging.getLogger(__name__)

_PR_SET_CHILD_SUBREAPER = 36  # <linux/prctl.h>

CLOCK_TICKS_PER_SECOND = os.sysconf("SC_CLK_TCK")
_NS_PER_TICK = 1_000_000_000 // CLOCK_TICKS_PER_SECOND


def set_child_subreaper(enabled: bool) -> bool:
    """Makes orphaned descendants re-parent to this process (Linux); False where unsupported."""
    import ctypes  # lazy: only the runtime process pays for it, once

    try:
        libc = ctypes.CDLL(None, use_errno=True)
        result = libc.prctl(_PR_SET_CHILD_SUBREAPER, int(enabled), 0, 0, 0)
    except (OSError, AttributeError):
        return False
    if result != 0:
        log.warning("subreaper_unavailable", extra={"errno": ctypes.get_errno()})
        return False
    return True


class ChildReaper:
    """The only code in the runtime that waits for children.

    On SIGCHLD it peeks at each exited child (WNOWAIT) to learn its pid, then reaps it: a
    watched pid resolves its future with a Popen-style return code (-N for signal N), any
    other child is an adopted orphan and is reaped silently. Nothing else in the process
    may call wait*(): it would steal statuses. Spawn and `watch()` a child in the same
    event-loop step, so the reaper cannot see it exit before it is watched.
    """

    def __init__(self) -> None:
        self._loop: asyncio.AbstractEventLoop | None = None
        self._watched: dict[int, asyncio.Future[int]] = {}
        self._subreaper = False
        self.orphans_reaped = 0

    def install(self, loop: asyncio.AbstractEventLoop) -> None:
        if self._loop is not None:
            raise RuntimeError("ChildReaper is already installed")
        self._loop = loop
        self._subreaper = set_child_subreaper(True)
        loop.add_signal_handler(signal.SIGCHLD, self._reap)
        self._reap()  # children that exited before the handler existed

    def watch(self, pid: int) -> asyncio.Future[int]:
        if self._loop is None:
            raise RuntimeError("ChildReaper.install() was not called")
        future = self._watched.get(pid)
        if future is None:
            future = self._loop.create_future()
            self._watched[pid] = future
        return future

    def close(self) -> None:
        """Stops reaping; pending watches are cancelled. Kill the children first."""
        if self._loop is None:
            return
        self._reap()
        self._loop.remove_signal_handler(signal.SIGCHLD)
        if self._subreaper:
            set_child_subreaper(False)
        for future in self._watched.values():
            future.cancel()
        self._watched.clear()
        self._loop = None

    def _reap(self) -> None:
        while True:
            try:
                info = os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOHANG | os.WNOWAIT)
            except ChildProcessError:
                return
            if info is None or info.si_pid == 0:
                return
            pid = info.si_pid
            try:
                reaped, status = os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                continue
            if reaped == 0:
                continue
            returncode = os.waitstatus_to_exitcode(status)
            future = self._watched.pop(pid, None)
            if future is None:
                self.orphans_reaped += 1
            elif not future.done():
                future.set_result(returncode)


@dataclasses.dataclass(frozen=True, slots=True)
class ProcessInfo:
    """The /proc/<pid>/stat fields the kill logic needs."""

    pid: int
    ppid: int
    sid: int
    start_ticks: int
    """Start time in clock ticks since boot (comparable with `boot_ticks_now()`)."""
    zombie: bool


def boot_ticks_now() -> int:
    """Now, in the unit and clock of ProcessInfo.start_ticks."""
    return time.clock_gettime_ns(time.CLOCK_BOOTTIME) // _NS_PER_TICK


def _read_stat(pid: int) -> ProcessInfo | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            raw = stat.read()
    except OSError:
        return None
    # The command name is in parentheses and may itself contain spaces and ')'.
    fields = raw[raw.rindex(b")") + 2 :].split()
    return ProcessInfo(
        pid=pid,
        ppid=int(fields[1]),
        sid=int(fields[3]),
        start_ticks=int(fields[19]),
        zombie=fields[0] in (b"Z", b"X"),
    )


def process_table() -> dict[int, ProcessInfo]:
    """Every process visible in /proc (a blocking scan: call it from a worker thread)."""
    table: dict[int, ProcessInfo] = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            info = _read_stat(int(name))
            if info is not None:
                table[info.pid] = info
    return table


def children_map(table: Mapping[int, ProcessInfo]) -> dict[int, list[int]]:
    children: dict[int, list[int]] = collections.defaultdict(list)
    for info in table.values():
        children[info.ppid].append(info.pid)
    return children


def subtree(children: Mapping[int, list[int]], roots: Iterable[int]) -> set[int]:
    """The roots and all their descendants."""
    found: set[int] = set()
    pending = list(roots)
    while pending:
        pid = pending.pop()
        if pid not in found:
            found.add(pid)
            pending.extend(children.get(pid, ()))
    return found


def direct_children(pid: int) -> list[int]:
    """Children of a single-threaded process, cheaply (one small procfs read)."""
    try:
        fd = os.open(f"/proc/{pid}/task/{pid}/children", os.O_RDONLY)
    except OSError:
        return []
    try:
        return [int(child) for child in os.read(fd, 65536).split()]
    except OSError:
        return []
    finally:
        os.close(fd)


def environ_has(pid: int, entry: bytes) -> bool:
    """Whether the process started with `entry` (b"NAME=value") in its environment."""
    try:
        with open(f"/proc/{pid}/environ", "rb") as environ:
            return entry in environ.read().split(b"\0")
    except OSError:
        return False


_SIGNALS_TO_RESET = frozenset(signal.valid_signals()) - {signal.SIGKILL, signal.SIGSTOP}


def pipe(*, avoid: Collection[int]) -> tuple[int, int]:
    """os.pipe(), with neither end on one of the fds in `avoid` (a child's target fds).

    A source fd equal to a target fd would be clobbered by an earlier dup2 file action.
    """
    ends = []
    for fd in os.pipe():
        if fd not in avoid:
            ends.append(fd)
            continue
        ends.append(fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, max(avoid) + 1))
        os.close(fd)
    return ends[0], ends[1]


def spawn_session_leader(
    path: str, argv: list[str], env: Mapping[str, str], fds: Mapping[int, int]
) -> int:
    """Starts `path` in a new Unix session with stdin at /dev/null and `fds` (child fd: ours).

    Nothing else leaks into the child: fds that lack FD_CLOEXEC (a library's, the parent
    process's) are closed, and signals the runtime ignores (Python ignores SIGPIPE) get
    their default action back. Spawn and `ChildReaper.watch()` in the same loop step.
    """
    targets = {0, *fds}
    actions: list[tuple[object, ...]] = [
        (os.POSIX_SPAWN_CLOSE, fd) for fd in _inheritable_fds() if fd not in targets
    ]
    actions.append((os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0))
    actions += [(os.POSIX_SPAWN_DUP2, ours, theirs) for theirs, ours in fds.items()]
    return os.posix_spawn(
        path,
        argv,
        env,
        file_actions=actions,
        setsid=True,
        setsigdef=_SIGNALS_TO_RESET,
        setsigmask=(),
    )


def _inheritable_fds() -> list[int]:
    found = []
    for name in os.listdir("/proc/self/fd"):
        fd = int(name)
        with contextlib.suppress(OSError):
            if os.get_inheritable(fd):
                found.append(fd)
    return found


def signal_all(pids: Collection[int], signum: int) -> int:
    """Sends `signum` to each pid that still exists; returns how many were signalled."""
    sent = 0
    for pid in pids:
        try:
            os.kill(pid, signum)
        except (ProcessLookupError, PermissionError):
            continue
        sent += 1
    return sent


def kill_until_gone(
    select: Callable[[dict[int, ProcessInfo]], Collection[int]],
    *,
    deadline_s: float = 5.0,
    stop_first: bool = False,
) -> int:
    """kill_until_none_listed over what `select` picks from a fresh process table."""
    return kill_until_none_listed(
        lambda: select(process_table()), deadline_s=deadline_s, stop_first=stop_first
    )


def kill_until_none_listed(
    list_targets: Callable[[], Collection[int]], *, deadline_s: float, stop_first: bool
) -> int:
    """SIGKILLs what `list_targets` lists until it lists nothing; returns how many are still
    listed at the deadline (0 on success). Blocking; run it in a worker thread.

    Listing again each round is what stops a forking loop: each round kills what the
    previous round's victims managed to fork. That alone loses to a fork bomb at its process
    limit: each death frees a slot that a sibling not yet signalled refills faster than a
    loaded machine can rescan /proc. With `stop_first` every listed process is SIGSTOPped
    until a listing finds none running, and only then are they all killed: a stopped
    process cannot fork and keeps its slot. Never stop the command a shell is waiting on: a
    stopped child lets the shell go on to the next command of its list.
    """
    deadline = time.monotonic() + deadline_s
    pause = 0.001
    stopped: set[int] = set()
    while True:
        targets = set(list_targets())
        if not targets:
            return 0
        running = targets - stopped if stop_first else set()
        if running and time.monotonic() < deadline:
            signal_all(running, signal.SIGSTOP)
            stopped |= running
        else:
            # A pid reused since it was stopped is killed too: it was listed, so it belongs
            # to what is being killed.
            signal_all(targets, signal.SIGKILL)
        if time.monotonic() >= deadline:
            return len(targets)
        # Killed processes need a moment to leave /proc; back off so a process stuck in
        # uninterruptible sleep does not turn this into a busy loop.
        time.sleep(pause)
        pause = min(pause * 2, 0.05)


@dataclasses.dataclass(frozen=True, slots=True)
class CommandScope:
    """What existed when a command started, to tell its processes from older ones."""

    shell_pid: int
    start_ticks: int
    old_children: frozenset[int]
    """The shell's children when the command started: earlier commands' background jobs."""

    @classmethod
    def begin(cls, shell_pid: int) -> CommandScope:
        # One small procfs read per command; the full /proc scan waits for a timeout.
        return cls(shell_pid, boot_ticks_now(), frozenset(direct_children(shell_pid)))


class SessionProcesses:
    """Finds the processes that belong to one bash session, across shell restarts.

    A process belongs to the session when it descends from one of the session's shells,
    shares a shell's Unix session id (bash does not call setsid, so jobs keep it), or
    carries the session's marker variable in its environment (which also catches a
    daemon that called setsid and was re-parented to the runtime).
    """

    def __init__(self, marker: bytes) -> None:
        self.marker = marker
        """b"NAME=value" entry that every process of the session inherits."""
        self.created_ticks = boot_ticks_now()
        """Nothing older than the session can belong to it: no need to read its environment."""
        self.shell_pids: set[int] = set()
        """Every shell this session ever ran: each is its own Unix session leader."""

    def members(self, table: Mapping[int, ProcessInfo]) -> set[int]:
        """Live processes of the session, its shells included."""
        children = children_map(table)
        return _alive(table, subtree(children, self._roots(table)))

    def started_by(self, scope: CommandScope, table: Mapping[int, ProcessInfo]) -> set[int]:
        """Live processes the command of `scope` (or anything after it) started.

        Older processes are the subtrees of the shell's children at command start, plus
        members outside the shell's tree that started before the command did (background
        jobs of earlier commands whose parent has exited).
        """
        children = children_map(table)
        members = subtree(children, self._roots(table))
        shell_tree = subtree(children, [scope.shell_pid])
        old_roots = set(scope.old_children)
        old_roots.update(
            pid for pid in members - shell_tree if table[pid].start_ticks < scope.start_ticks
        )
        older = subtree(children, old_roots)
        return _alive(table, members - older - self.shell_pids)

    def _roots(self, table: Mapping[int, ProcessInfo]) -> set[int]:
        runtime = os.getpid()
        roots = {pid for pid in self.shell_pids if pid in table}
        for pid, info in table.items():
            if pid == runtime or pid in roots:
                continue
            if info.sid in self.shell_pids or (
                not info.zombie
                and info.start_ticks >= self.created_ticks
                and environ_has(pid, self.marker)
            ):
                roots.add(pid)
        return roots


def _alive(table: Mapping[int, ProcessInfo], pids: set[int]) -> set[int]:
    return {pid for pid in pids if pid in table and not table[pid].zombie}
