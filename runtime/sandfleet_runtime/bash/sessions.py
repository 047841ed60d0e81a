"""All bash sessions of the runtime, by name: validation, bounds, creation and shutdown.

The gRPC servicer's entry point. Each session is one long-lived `bash --noprofile --norc`
(session.py) running a driver loop (shell_driver.py) that reads commands from a
private pipe, so that shell state persists between calls while the command text never
reaches bash's parser as input; command.py stops commands on timeout or interrupt.
"""

from __future__ import annotations

import asyncio
import math
import os
import re
import shutil
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path

from sandfleet_runtime.bash.command import CommandResult, Outcome
from sandfleet_runtime.bash.limits import SessionLimits
from sandfleet_runtime.bash.output import OutputListener, OutputStream
from sandfleet_runtime.bash.processes import ChildReaper, ProcessInfo
from sandfleet_runtime.bash.session import BashSession, SessionClosedError, SessionConfig
from sandfleet_runtime.bash.shell_driver import write_driver
from sandfleet_runtime.errors import InvalidArgumentError, ResourceExhaustedError, UnavailableError

__all__ = [
    "BashSessions",
    "CommandResult",
    "Outcome",
    "OutputListener",
    "OutputStream",
]

DEFAULT_SESSION = "default"
SESSION_NAME = re.compile(r"[A-Za-z0-9_.-]{1,64}")


class BashSessions:
    """All bash sessions of the runtime, by name; what the gRPC servicer calls."""

    def __init__(
        self,
        *,
        workdir: Path,
        env: Mapping[str, str],
        default_timeout_s: float,
        max_timeout_s: float,
        default_max_output_chars: int,
        max_output_chars: int,
        max_sessions: int,
        limits: SessionLimits | None,
        reaper: ChildReaper,
    ) -> None:
        self._workdir = workdir.resolve()
        if not self._workdir.is_dir():
            raise ValueError(f"the bash working directory {workdir} is not a directory")
        self._base_env = dict(env)
        self._env = dict(env)
        self._default_timeout_s = default_timeout_s
        self._max_timeout_s = max_timeout_s
        self._default_max_output_chars = default_max_output_chars
        self._max_output_chars = max_output_chars
        self._max_sessions = max_sessions
        self._limits = limits
        self._reaper = reaper
        self._bash = shutil.which("bash", path=self._env.get("PATH", os.defpath)) or "/bin/bash"
        self._driver_dir: Path | None = None
        self._sessions: dict[str, BashSession] = {}
        self._background: set[asyncio.Task[None]] = set()
        self._closed = False
        self.on_activity: Callable[[], None] | None = None
        """Called when a command starts and when it ends (idle tracking)."""

    @property
    def session_count(self) -> int:
        return len(self._sessions)

    @property
    def names(self) -> list[str]:
        """The open sessions' names, sorted."""
        return sorted(self._sessions)

    @property
    def driver_dir(self) -> Path | None:
        """The directory of the shells' driver script (in the temporary directory), once made:
        the runtime's own, never part of a snapshot or a restore."""
        return self._driver_dir

    @property
    def running_count(self) -> int:
        return sum(1 for session in self._sessions.values() if session.running)

    async def run(
        self,
        session: str,
        command: str,
        *,
        timeout_s: float = 0,
        max_output_chars: int = 0,
        listener: OutputListener | None = None,
    ) -> CommandResult:
        """Runs `command` in the named session ("" is "default"), creating it on first use.

        `timeout_s` and `max_output_chars` of 0 mean the defaults; larger values than the
        configured maxima are lowered to them. A non-zero exit, a timeout or an interrupt
        is a result, not an error.
        """
        name = self._session_name(session)
        if not command.strip():
            raise InvalidArgumentError("No command provided.")
        if "\0" in command:
            raise InvalidArgumentError("The command contains a NUL character; bash cannot run it.")
        try:
            command.encode()
        except UnicodeEncodeError as error:
            raise InvalidArgumentError(f"The command is not valid Unicode text: {error}") from None
        timeout = self._bounded_timeout(timeout_s)
        max_chars = self.output_cap(max_output_chars)
        while True:
            try:
                return await self._session(name).run(
                    command, timeout_s=timeout, max_output_chars=max_chars, listener=listener
                )
            except SessionClosedError:
                continue  # closed while this call waited for it: run in a fresh session

    def prestart(self, session: str = DEFAULT_SESSION) -> asyncio.Task[None] | None:
        """Opens the named session and starts its shell in the background, idle (nothing
        runs in it), so its first command finds bash ready; the task doing it, or None when
        the session is open already or the maximum of sessions is reached."""
        name = self._session_name(session)
        if self._closed or name in self._sessions or len(self._sessions) >= self._max_sessions:
            return None
        task = asyncio.get_running_loop().create_task(self._session(name).prestart())
        self._background.add(task)
        task.add_done_callback(self._background.discard)
        return task

    async def interrupt(self, session: str) -> bool:
        """Interrupts the session's running command; False when nothing was running."""
        found = self._sessions.get(self._session_name(session))
        return found is not None and found.interrupt()

    async def restart(self, session: str) -> None:
        """Kills the session's shell and everything it started; the next command starts fresh."""
        found = self._sessions.get(self._session_name(session))
        if found is not None:
            await found.terminate(
                closing=False, note="[The session was restarted while this command was running.]"
            )

    async def close(self, session: str) -> None:
        """Like restart, and forgets the session (it no longer counts towards the maximum)."""
        found = self._sessions.pop(self._session_name(session), None)
        if found is not None:
            await found.terminate(
                closing=True, note="[The session was closed while this command was running.]"
            )

    def bind_env(self, env: Mapping[str, str]) -> None:
        """Sessions started from now on see `env` over the runtime's own environment.

        A later call replaces what an earlier one added. Open sessions keep the environment
        they started with: close them (close_open) for everything to see the new one.
        """
        # A new dict, not an update: each open session's config keeps the one it started with.
        self._env = {**self._base_env, **env}

    async def close_open(
        self, note: str = "[The sandbox was bound to a new session; this command was stopped.]"
    ) -> int:
        """Closes every open session, leaving the runtime serving; returns how many there were.

        `note` ends the output of a command that was running.
        """
        sessions, self._sessions = list(self._sessions.values()), {}
        await asyncio.gather(*(found.terminate(closing=True, note=note) for found in sessions))
        return len(sessions)

    def member_pids(self, table: Mapping[int, ProcessInfo]) -> set[int]:
        """Live processes of every open session in `table`, shells included."""
        found: set[int] = set()
        for session in self._sessions.values():
            found |= session.processes.members(table)
        return found

    async def close_all(self) -> None:
        """Graceful shutdown: kills every session and every process the sessions started."""
        self._closed = True
        sessions, self._sessions = list(self._sessions.values()), {}
        note = "[The runtime is shutting down; this command was stopped.]"
        await asyncio.gather(*(found.terminate(closing=True, note=note) for found in sessions))
        if self._background:
            await asyncio.gather(*self._background, return_exceptions=True)
        if self._limits is not None:
            await asyncio.to_thread(self._limits.kill_all)
        if self._driver_dir is not None:
            shutil.rmtree(self._driver_dir, ignore_errors=True)
            self._driver_dir = None

    def _session(self, name: str) -> BashSession:
        found = self._sessions.get(name)
        if found is not None:
            return found
        if self._closed:
            raise UnavailableError("The runtime is shutting down; no new commands are accepted.")
        if len(self._sessions) >= self._max_sessions:
            raise ResourceExhaustedError(
                f"Too many bash sessions: the limit is {self._max_sessions}. Run the command in"
                " an existing session (for example 'default') or close one first."
            )
        if self._driver_dir is None:
            self._driver_dir = Path(tempfile.mkdtemp(prefix="sandfleet-bash-"))
            write_driver(self._driver_dir)
        config = SessionConfig(
            workdir=self._workdir,
            env=self._env,
            bash=self._bash,
            driver_dir=self._driver_dir,
            default_max_output_chars=self._default_max_output_chars,
            limits=self._limits,
            reaper=self._reaper,
            activity=self._notify_activity,
            background=self._background,
        )
        found = self._sessions[name] = BashSession(name, config)
        return found

    def _notify_activity(self) -> None:
        if self.on_activity is not None:
            self.on_activity()

    @staticmethod
    def _session_name(session: str) -> str:
        name = session or DEFAULT_SESSION
        if not SESSION_NAME.fullmatch(name):
            raise InvalidArgumentError(
                f"Invalid session name {session!r}: use 1 to 64 letters, digits, '.', '_' or '-'."
            )
        return name

    def _bounded_timeout(self, timeout_s: float) -> float:
        if math.isnan(timeout_s) or timeout_s < 0:
            raise InvalidArgumentError(
                f"Invalid timeout {timeout_s}: it must be 0 or more seconds."
            )
        return min(timeout_s or self._default_timeout_s, self._max_timeout_s)

    def output_cap(self, max_output_chars: int) -> int:
        """The characters kept per stream for a request asking for `max_output_chars`."""
        if max_output_chars < 0:
            raise InvalidArgumentError(
                f"Invalid max_output_chars {max_output_chars}: it must be 0 or more."
            )
        return min(max_output_chars or self._default_max_output_chars, self._max_output_chars)
