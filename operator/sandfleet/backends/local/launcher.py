"""launch_local_runtime: start a runtime agent in a private directory; LocalRuntime reclaims it."""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import dataclasses
import json
import os
import secrets
import signal
import time
from pathlib import Path
from typing import BinaryIO

from sandfleet.backends.local.cgroups import join
from sandfleet.backends.local.config import LocalSandboxConfig
from sandfleet.backends.local.isolation import IsolationChoice, choose_isolation
from sandfleet.backends.local.layout import host_path
from sandfleet.backends.local.network import check_egress, start_egress, stop_egress
from sandfleet.backends.local.processes import (
    ProcessIdentity,
    command_line,
    descendants_of,
    kill_sandbox_processes,
)
from sandfleet.backends.local.registry import Registry, sweep_orphans
from sandfleet.backends.local.spawning import (
    SandboxPlan,
    SpawnPlan,
    prepare_sandbox,
    sandbox_environment,
    spawn_plan,
)
from sandfleet.errors import SandboxStartError
from sandfleet.logs import get_logger
from sandfleet.sandbox.backend import SandboxPaths

log = get_logger(__name__)

_LOG_TAIL_BYTES = 4000

_swept: set[Path] = set()
_warned: set[tuple[Path, str]] = set()
_live: set[LocalRuntime] = set()


@dataclasses.dataclass(eq=False)
class LocalRuntime:
    """A running runtime agent child process and the private directory it works in."""

    sandbox_id: str
    address: str
    """The agent's gRPC address: unix:PATH (namespaced; the sandbox's network namespace is
    its own) or 127.0.0.1:PORT (isolation "none")."""
    token: str
    paths: SandboxPaths
    """The paths as the model sees them (/testbed..., or host paths without namespaces)."""
    host_root: Path
    """The sandbox's private files on the host: sandbox path P is host_root / P.lstrip("/")
    with namespaces; without them `paths` already point below host_root."""
    mechanism: str
    """"bwrap", "unshare" or "none"."""
    start_ms: float
    log_path: Path
    _process: asyncio.subprocess.Process
    _leader: ProcessIdentity | None
    _agent: ProcessIdentity | None
    _registry: Registry
    _cgroups: tuple[Path, ...]
    _keep_workdir: bool
    _stop_grace_s: float
    _closing: asyncio.Future[None] | None = None
    _network: asyncio.subprocess.Process | None = None
    """slirp4netns, for egress "all"."""
    _socket_dir_fd: int | None = None
    """Holds the socket's directory open when its path is too long for a socket address."""

    def host_path(self, sandbox_path: str) -> Path:
        """The host path of a file the model sees at `sandbox_path`."""
        if self.mechanism == "none":
            return Path(sandbox_path)
        return host_path(self.host_root, sandbox_path)

    @property
    def closed(self) -> bool:
        return self._closing is not None and self._closing.done()

    async def close(self) -> None:
        """Stop the agent (SIGTERM, then SIGKILL to everything left), remove the private dir
        unless kept, drop the record. Idempotent; concurrent callers wait for the first."""
        if self._closing is None:
            self._closing = asyncio.ensure_future(self._close())
        await asyncio.shield(self._closing)

    @property
    def agent_pid(self) -> int | None:
        """The runtime agent's pid on the host (None until known, or if it never started)."""
        return self._agent.pid if self._agent is not None else None

    @property
    def cgroups(self) -> tuple[Path, ...]:
        """The sandbox's parent cgroups (empty where cgroupfs is not writable)."""
        return self._cgroups

    async def _close(self) -> None:
        # Without a PID namespace or a cgroup, a daemon that outlives the agent's graceful
        # stop would be re-parented away from its tree: remember the tree before stopping.
        before = await asyncio.to_thread(self._tree_if_untracked)
        try:
            if self._process.returncode is None and self._agent is not None:
                self._agent.send(signal.SIGTERM)
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(self._stop_grace_s):
                        await self._process.wait()
        finally:
            # Also after a graceful exit: daemons of an un-namespaced sandbox outlive the agent.
            killed = await asyncio.to_thread(
                kill_sandbox_processes,
                self.sandbox_id,
                self._live_leader(),
                self._cgroups,
                before,
            )
            await self._process.wait()
            if self._network is not None:
                await stop_egress(self._network)
            await asyncio.to_thread(
                self._registry.remove,
                self.sandbox_id,
                keep_dir=self._keep_workdir,
                cgroups=self._cgroups,
            )
            _live.discard(self)
            self._release_socket_dir()
            log.info("sandbox_closed", sandbox=self.sandbox_id, killed_after_stop=killed)

    def kill_now(self) -> None:
        """Synchronous last resort (interpreter exit): SIGKILL everything, remove the files."""
        if self.closed:
            return
        kill_sandbox_processes(self.sandbox_id, self._live_leader(), self._cgroups)
        if self._network is not None and self._network.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                self._network.kill()
        self._registry.remove(self.sandbox_id, keep_dir=self._keep_workdir, cgroups=self._cgroups)
        _live.discard(self)
        self._release_socket_dir()

    def _release_socket_dir(self) -> None:
        if self._socket_dir_fd is not None:
            os.close(self._socket_dir_fd)
            self._socket_dir_fd = None

    def _tree_if_untracked(self) -> list[ProcessIdentity]:
        leader = self._live_leader()
        if self.mechanism != "none" or self._cgroups or leader is None:
            return []
        tree = (ProcessIdentity.of(pid) for pid in descendants_of(leader.pid))
        return [identity for identity in tree if identity is not None]

    def _live_leader(self) -> ProcessIdentity | None:
        # Once reaped, the leader's pid may belong to someone else: only use it before that.
        return self._leader if self._process.returncode is None else None


async def launch_local_runtime(
    config: LocalSandboxConfig, *, sandbox_id: str | None = None
) -> LocalRuntime:
    """Start a runtime agent in a fresh private directory and wait until it serves.

    `sandbox_id`: the id to use (a resumed sandbox keeps its own); None: a new one.
    Raises SandboxStartError (with the tail of the agent's log) if it does not report ready
    within config.start_timeout_s, or (one line naming the opt-out) if this machine cannot
    give namespaces and config.isolation is not "none".
    """
    started = time.perf_counter()
    state_dir = config.resolved_state_dir().absolute()
    if state_dir not in _swept:
        _swept.add(state_dir)
        await asyncio.to_thread(sweep_orphans, state_dir)
    choice = await choose_isolation(config.isolation, config.namespace_tool)
    if choice.mechanism != "none":
        check_egress(config.egress, choice.mechanism)
    if choice.mechanism == "none":
        _warn_degraded(state_dir, config)

    registry = Registry(state_dir)
    sandbox_id = sandbox_id or f"sbx-{secrets.token_hex(6)}"
    plan = await asyncio.to_thread(prepare_sandbox, registry, sandbox_id, config, choice)
    runtime, ready, spawn = await _start(plan, registry, config, choice)
    try:
        if spawn.unblock_fd is not None and spawn.info_fd is not None:
            await _join_then_unblock(
                runtime._process.pid, plan.cgroups, spawn, config.start_timeout_s
            )
        port = await _read_port(ready, config.start_timeout_s)
        if runtime._agent is None:
            runtime._agent = await asyncio.to_thread(
                _find_agent, runtime._process.pid, spawn.agent_argv
            )
        if choice.mechanism != "none" and config.egress != "none":
            runtime._network = await _start_network(
                runtime, choice, public_only=config.egress == "internet"
            )
    except BaseException as exc:
        ready.close()
        tail = await asyncio.to_thread(_log_tail, plan.log_path)  # before close removes it
        await runtime.close()
        if isinstance(exc, SandboxStartError):
            raise SandboxStartError(f"{exc}\n{tail}") from None
        raise
    if choice.mechanism == "none":
        runtime.address = f"127.0.0.1:{port}"
    else:
        runtime.address, runtime._socket_dir_fd = socket_address(plan.socket_path)
    runtime.start_ms = (time.perf_counter() - started) * 1000
    log.info(
        "sandbox_started",
        sandbox=sandbox_id,
        mechanism=choice.mechanism,
        address=runtime.address,
        start_ms=round(runtime.start_ms, 1),
    )
    return runtime


async def _start(
    plan: SandboxPlan, registry: Registry, config: LocalSandboxConfig, choice: IsolationChoice
) -> tuple[LocalRuntime, BinaryIO, SpawnPlan]:
    """Spawn the process tree; return it with the read end of its ready pipe."""
    sandbox_id = plan.record.sandbox_id
    token = secrets.token_urlsafe(32)
    ready_read, ready_write = os.pipe()
    ready = os.fdopen(ready_read, "rb", buffering=0)
    token_fd = _token_pipe(token)
    spawn: SpawnPlan | None = None
    try:
        spawn = await asyncio.to_thread(spawn_plan, plan, config, choice, ready_write, token_fd)
        env = sandbox_environment(config, sandbox_id=sandbox_id, plan=plan)
        with plan.log_path.open("ab") as log_file:
            process = await asyncio.create_subprocess_exec(
                *spawn.argv,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=log_file,
                stderr=log_file,
                pass_fds=(ready_write, token_fd, *spawn.extra_fds),
                start_new_session=True,  # a terminal's ^C is for us; we stop the sandbox
                # The sandbox's own files get a pod's usual modes, whatever ours (the CLI
                # keeps its run folders private with 077).
                umask=0o022,
                env=env,
                cwd=spawn.cwd,
            )
    except BaseException:
        ready.close()
        for fd in (spawn.unblock_fd, spawn.info_fd) if spawn else ():
            if fd is not None:
                os.close(fd)
        await asyncio.to_thread(registry.remove, sandbox_id, cgroups=plan.cgroups)
        raise
    finally:
        os.close(ready_write)  # else EOF never comes when the agent dies
        os.close(token_fd)
        for fd in spawn.extra_fds if spawn else ():
            os.close(fd)

    leader = ProcessIdentity.of(process.pid)
    runtime = LocalRuntime(
        sandbox_id=sandbox_id,
        address="",
        token=token,
        paths=spawn.paths,
        host_root=plan.fs_root,
        mechanism=choice.mechanism,
        start_ms=0.0,
        log_path=plan.log_path,
        _process=process,
        _leader=leader,
        _agent=leader if choice.mechanism == "none" else None,
        _registry=registry,
        _cgroups=plan.cgroups,
        _keep_workdir=config.keep_workdir,
        _stop_grace_s=config.stop_grace_s,
    )
    _live.add(runtime)
    try:
        await asyncio.to_thread(registry.write, dataclasses.replace(plan.record, leader=leader))
    except BaseException:
        ready.close()
        await runtime.close()
        raise
    return runtime, ready, spawn


def _token_pipe(token: str) -> int:
    """The read end of a pipe that holds `token` and then EOF (the write end is closed):
    the agent drains it at start, so nothing in the sandbox can read the token later."""
    read_fd, write_fd = os.pipe()
    try:
        os.write(write_fd, token.encode())  # far below the pipe's capacity: never blocks
    finally:
        os.close(write_fd)
    return read_fd


async def _join_then_unblock(
    leader_pid: int, cgroups: tuple[Path, ...], spawn: SpawnPlan, timeout_s: float
) -> None:
    """bwrap: wait for its report of the child, move both into the cgroups, let it go on."""
    assert spawn.info_fd is not None and spawn.unblock_fd is not None
    info = os.fdopen(spawn.info_fd, "rb", buffering=0)
    try:
        report = json.loads(await _read_pipe(info, timeout_s, line=False))
        pids = [leader_pid, int(report["child-pid"]), *descendants_of(leader_pid)]
        joined = await asyncio.to_thread(join, cgroups, list(dict.fromkeys(pids)))
    except (ValueError, KeyError, TypeError) as exc:
        raise SandboxStartError(f"bwrap did not report its child: {exc}") from None
    finally:
        os.write(spawn.unblock_fd, b"1")
        os.close(spawn.unblock_fd)
    if not joined:
        raise SandboxStartError("could not move the sandbox into its cgroups")


async def _read_pipe(pipe: BinaryIO, timeout_s: float, *, line: bool) -> bytes:
    """One line (or everything until EOF) from a pipe, through the event loop: no thread,
    no polling. Closes the pipe."""
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    transport, _ = await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), pipe)
    try:
        async with asyncio.timeout(timeout_s):
            return await (reader.readline() if line else reader.read())
    finally:
        transport.close()


async def _read_port(ready: BinaryIO, timeout_s: float) -> int:
    """The agent writes "PORT\\n" to the ready pipe once serving; EOF first means it failed."""
    try:
        line = await _read_pipe(ready, timeout_s, line=True)
    except TimeoutError:
        raise SandboxStartError(
            f"the runtime agent did not report ready within {timeout_s:g}s"
        ) from None
    text = line.decode(errors="replace").strip()
    if not text.isdigit():
        raise SandboxStartError("the runtime agent exited before it was ready")
    return int(text)


async def _start_network(
    runtime: LocalRuntime, choice: IsolationChoice, *, public_only: bool
) -> asyncio.subprocess.Process:
    """unshare's own process holds the sandbox's network namespace (and, without root, the
    user namespace that owns it)."""
    holder = runtime._leader
    if holder is None:
        raise SandboxStartError("the sandbox's network namespace has no process to join")
    return await start_egress(
        holder.pid,
        join_user_namespace=choice.user_namespace,
        log_path=runtime.log_path,
        public_only=public_only,
    )


_MAX_SOCKET_PATH = 100  # sun_path holds 108 bytes with its NUL; keep a margin


def socket_address(path: Path) -> tuple[str, int | None]:
    """A gRPC address for the agent's socket, and an fd to keep open while it is used.

    A deep state dir makes the path too long for a socket address; then the address goes
    through /proc/self/fd/N of its directory, which this process holds open."""
    if len(os.fsencode(str(path))) <= _MAX_SOCKET_PATH:
        return f"unix:{path}", None
    fd = os.open(path.parent, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    return f"unix:/proc/self/fd/{fd}/{path.name}", fd


def _find_agent(leader_pid: int, agent_argv: list[str]) -> ProcessIdentity | None:
    """The agent's host pid inside a namespace (a few levels below our child; bwrap's own
    processes carry the agent's argv after theirs, so only an exact start matches)."""
    for pid in descendants_of(leader_pid):
        if command_line(pid)[: len(agent_argv)] == agent_argv:
            return ProcessIdentity.of(pid)
    return None


def _log_tail(path: Path) -> str:
    try:
        with path.open("rb") as handle:
            handle.seek(max(0, path.stat().st_size - _LOG_TAIL_BYTES))
            tail = handle.read().decode(errors="replace")
    except OSError as exc:
        return f"(agent log unreadable: {exc})"
    return f"agent log ({path}):\n{tail.strip()}" if tail.strip() else "(agent log is empty)"


def _warn_degraded(state_dir: Path, config: LocalSandboxConfig) -> None:
    reason = "isolation='none' was requested"
    if (state_dir, reason) in _warned:
        return
    _warned.add((state_dir, reason))
    log.warning(
        "sandbox_isolation_degraded",
        reason=reason,
        effect="the sandbox is a plain child process: it sees the host filesystem read-write, "
        "the host's network and other processes, and its paths are below its private directory",
        requested=config.isolation,
    )


@atexit.register
def _kill_remaining() -> None:
    for runtime in list(_live):
        with contextlib.suppress(Exception):
            runtime.kill_now()
