"""Reset: the sandbox back to its pristine state between two rollouts of the same session.

Pristine means: no bash session, no process the sandbox started, the working tree as the
image shipped it (the baseline captured when the runtime started), no editor undo
history, no detached command, the idle clock restarted. What stays is the binding: token,
session name and its environment, so a reset never hands the sandbox to anyone else.

The session may move its baseline forward ("prepare once, reset per rollout"):
CaptureBaseline after uploading a task's files, or RestoreTree with as_baseline for a
forked tree. BindSession puts the image's baseline back, so no session resets into what
another one prepared.

Processes: closing the bash sessions kills each session's processes (descendants, the
shells' Unix sessions, and everything carrying a session's marker variable). What can
escape that (a daemon that called setsid *and* cleared its environment) is re-parented to
the runtime, which is a child subreaper; so when the runtime owns its process (the
sandbox's agent, not an in-process test server) every descendant of the runtime is killed
too, and with a cgroup for the sessions every member of it.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Collection, Mapping, Sequence
from pathlib import Path

from sandfleet_runtime import tree_archive
from sandfleet_runtime.baseline import Baseline, BaselineUnavailableError
from sandfleet_runtime.bash.detached import DetachedCommands
from sandfleet_runtime.bash.limits import SessionLimits
from sandfleet_runtime.bash.processes import (
    ProcessInfo,
    children_map,
    kill_until_gone,
    process_table,
    subtree,
)
from sandfleet_runtime.bash.sessions import BashSessions
from sandfleet_runtime.errors import FailedPreconditionError
from sandfleet_runtime.stats import ActivityClock

__all__ = ["ResetReport", "Resetter"]

log = logging.getLogger(__name__)

_KILL_DEADLINE_S = 5.0


@dataclasses.dataclass(frozen=True, slots=True)
class ResetReport:
    closed_sessions: int
    killed_processes: int
    """Processes found alive and killed (shells included)."""
    removed_paths: int
    restored_paths: int
    dropped_commands: int
    duration_s: float


def _capture(workdir: Path, max_bytes: int) -> Baseline | BaselineUnavailableError:
    """The baseline, or why there is none (which only Reset reports: the rest works)."""
    try:
        baseline = Baseline.capture(workdir, max_bytes=max_bytes)
    except BaselineUnavailableError as error:
        log.warning("reset_baseline_unavailable", extra={"reason": str(error)})
        return error
    log.info("reset_baseline_captured", extra={"bytes": baseline.size, "workdir": str(workdir)})
    return baseline


def _descendants(table: Mapping[int, ProcessInfo]) -> set[int]:
    """Live descendants of this process (not itself)."""
    me = os.getpid()
    found = subtree(children_map(table), [me]) - {me}
    return {pid for pid in found if pid in table and not table[pid].zombie}


class Resetter:
    """Applies Reset; one at a time."""

    def __init__(
        self,
        *,
        sessions: BashSessions,
        detached: DetachedCommands,
        workdir: Path,
        baseline_max_bytes: int,
        clear_editor_history: Callable[[], Awaitable[None]],
        activity: ActivityClock,
        limits: SessionLimits | None,
        owns_process: bool,
        extra_roots: Sequence[Path] = (),
    ) -> None:
        """`extra_roots`: writable directories besides the working tree that every reset
        returns to how they are now (their state at start: /tmp, the home directory)."""
        self._sessions = sessions
        self._detached = detached
        self._workdir = workdir
        self._baseline_max_bytes = baseline_max_bytes
        self._image_baseline = _capture(workdir, baseline_max_bytes)
        self._baseline = self._image_baseline
        self._extra = [_capture(root, baseline_max_bytes) for root in extra_roots]
        self._clear_editor_history = clear_editor_history
        self._activity = activity
        self._limits = limits
        self._owns_process = owns_process
        self._lock = asyncio.Lock()

    def forget_captured_baseline(self) -> None:
        """BindSession: resets return to the image's tree again, never to one a previous
        session prepared."""
        self._baseline = self._image_baseline

    async def capture_baseline(self) -> Baseline:
        """Makes the tree as it is now the one later resets return to; FailedPreconditionError
        (baseline unchanged) when it is too large."""
        async with self._lock:
            return await self._capture_locked()

    async def _capture_locked(self) -> Baseline:
        captured = await asyncio.to_thread(_capture, self._workdir, self._baseline_max_bytes)
        if isinstance(captured, BaselineUnavailableError):
            raise captured
        self._baseline = captured
        return captured

    async def restore_tree(
        self,
        chunks: AsyncIterator[bytes],
        *,
        as_baseline: bool,
        extra_roots: Sequence[Path] = (),
        keep: Collection[Path] = (),
    ) -> tree_archive.RestoredTree:
        """RestoreTree, never at the same time as a reset (which would undo it half-way);
        `as_baseline` makes the restored working tree the one later resets return to."""
        async with self._lock:
            restored = await tree_archive.restore_tree(self._workdir, chunks, extra_roots, keep)
            if as_baseline:
                try:
                    await self._capture_locked()
                except BaselineUnavailableError as error:
                    raise FailedPreconditionError(
                        f"The tree was restored but cannot become the reset baseline: {error}"
                    ) from None
        return restored

    async def reset(self) -> ResetReport:
        """Raises FailedPreconditionError (nothing changed) when there is no baseline."""
        async with self._lock:
            baseline = self._baseline
            if isinstance(baseline, BaselineUnavailableError):
                raise FailedPreconditionError(str(baseline))
            extras = [e for e in self._extra if isinstance(e, Baseline)]
            if len(extras) < len(self._extra):
                unavailable = next(e for e in self._extra if not isinstance(e, Baseline))
                raise FailedPreconditionError(str(unavailable))
            started = time.monotonic()
            victims = await asyncio.to_thread(self._victims)
            closed = await self._sessions.close_open(
                "[The sandbox was reset for the next rollout; this command was stopped.]"
            )
            dropped = await self._detached.drop_all()
            await asyncio.to_thread(self._kill_rest)
            repair = await asyncio.to_thread(baseline.restore)
            removed, restored = repair.removed, repair.restored
            for extra in extras:
                extra_repair = await asyncio.to_thread(extra.restore)
                removed, restored = removed + extra_repair.removed, restored + extra_repair.restored
            await self._clear_editor_history()
            self._activity.touch()
            report = ResetReport(
                closed_sessions=closed,
                killed_processes=len(victims),
                removed_paths=removed,
                restored_paths=restored,
                dropped_commands=dropped,
                duration_s=time.monotonic() - started,
            )
        log.info("sandbox_reset", extra=dataclasses.asdict(report))
        return report

    def _victims(self) -> Collection[int]:
        """What the reset is about to kill, for the report (one /proc scan)."""
        table = process_table()
        found = self._sessions.member_pids(table)
        if self._owns_process:
            found |= _descendants(table)
        if self._limits is not None:
            found.update(self._limits.members())
        return found

    def _kill_rest(self) -> None:
        """What closing the sessions cannot reach; blocking."""
        if self._limits is not None:
            self._limits.kill_all()
        if self._owns_process:
            left = kill_until_gone(_descendants, deadline_s=_KILL_DEADLINE_S, stop_first=True)
            if left:
                log.warning("reset_processes_survived", extra={"count": left})
