"""Everything a sandbox's start needs before its process exists: record, cgroups, private
dirs, mount plan, and the command line with its environment (blocking: run in a thread)."""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import importlib.util
import os
import secrets
import shlex
import shutil
import sys
import time
from collections.abc import Sequence
from pathlib import Path, PurePosixPath

from sandfleet.backends.local.accounts import write_account_files
from sandfleet.backends.local.cgroups import create_cgroups, limit_and_delegate, planned_cgroups
from sandfleet.backends.local.config import LocalSandboxConfig
from sandfleet.backends.local.isolation import (
    IsolationChoice,
    bwrap_options,
    nsinit_spec,
    unshare_command,
)
from sandfleet.backends.local.layout import (
    PRIVATE_SYSTEM_DIRS,
    SYSTEM_DIRS,
    MountOp,
    host_path,
    opt_tools,
    plan_layout,
    private_roots,
    scan_host_root,
)
from sandfleet.backends.local.nsinit import NO_LIBSECCOMP, export_seccomp
from sandfleet.backends.local.processes import SANDBOX_ID_ENV, ProcessIdentity, boot_id
from sandfleet.backends.local.python_shims import python_path_entries, write_python_shims
from sandfleet.backends.local.registry import Registry, SandboxRecord
from sandfleet.errors import SandboxStartError
from sandfleet.sandbox.backend import SandboxPaths

_DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
# Packages the agent imports; wherever they are installed must stay visible inside.
AGENT_SOCKET = "/run/sandfleet/agent.sock"
"""Where a namespaced sandbox's agent serves (its /run is private; the host reaches it at
<fs_root>/run/sandfleet/agent.sock). Its network namespace has nothing but loopback."""
# Host uids for sandboxes started by root: one per sandbox, owning no host file and in no
# passwd; 2^31-2^24 upwards stays clear of system, user and container (subuid) ranges.
_HOST_UID_BASE = 2**31 - 2**24
_HOST_UID_SPAN = 2**23
_AGENT_PACKAGES = ("sandfleet_runtime", "sandfleet_proto", "grpc", "grpc_health", "google.protobuf")


@dataclasses.dataclass(frozen=True, slots=True)
class SandboxPlan:
    """What prepare_sandbox made: the record, the dirs, the mount plan, the cgroups."""

    record: SandboxRecord
    sandbox_dir: Path
    fs_root: Path
    new_root: Path
    log_path: Path
    ops: tuple[MountOp, ...]
    cgroups: tuple[Path, ...]
    host_uid: int | None = None
    """The host uid a namespaced sandbox runs as when we are root (None: as us)."""

    @property
    def socket_path(self) -> Path:
        """The agent's Unix socket on the host (namespaced sandboxes only)."""
        return host_path(self.fs_root, AGENT_SOCKET)


def prepare_sandbox(
    registry: Registry, sandbox_id: str, config: LocalSandboxConfig, choice: IsolationChoice
) -> SandboxPlan:
    """Write the record, then create cgroups and private dirs (blocking: run in a thread).

    The record names the cgroups before they exist, so a crash in between leaks nothing."""
    namespaced = choice.mechanism != "none"
    host_uid = sandbox_host_uid() if namespaced else None
    cgroups = planned_cgroups(sandbox_id)
    record = SandboxRecord(
        sandbox_id=sandbox_id,
        boot_id=boot_id(),
        owner=self_identity(),
        mechanism=choice.mechanism,
        created_at=time.time(),
        cgroups=tuple(str(path) for path in cgroups),
    )
    registry.write(record)
    sandbox_dir = registry.sandbox_dir(sandbox_id)
    fs_root = sandbox_dir / "root"
    try:
        if cgroups and not create_cgroups(cgroups):
            cgroups = []
        limit_and_delegate(
            cgroups,
            max_processes=config.max_processes,
            max_memory_bytes=config.max_memory_bytes,
            owner_uid=host_uid,
        )
        ops: tuple[MountOp, ...] = ()
        if namespaced:
            ops = _layout_ops(config, registry, sandbox_dir, fs_root, cgroups)
        private = [*PRIVATE_SYSTEM_DIRS, *private_roots(config.paths)]
        for path in [*private, config.paths.input_dir, config.paths.output_dir]:
            host_path(fs_root, path).mkdir(parents=True, exist_ok=True)
        for tmp in ("/tmp", "/var/tmp"):  # real ones: sticky, writable by any user
            host_path(fs_root, tmp).chmod(0o1777)
        write_python_shims(host_path(fs_root, "/root"))
        if namespaced:
            host_path(fs_root, AGENT_SOCKET).parent.mkdir(parents=True, exist_ok=True)
        if host_uid is not None:  # last: the shims and the socket dir become the sandbox's too
            give_to(fs_root, host_uid)
        new_root = sandbox_dir / "mnt"
        new_root.mkdir()
    except BaseException:
        registry.remove(sandbox_id, cgroups=cgroups)
        raise
    log_path = sandbox_dir / "agent.log"
    return SandboxPlan(
        record, sandbox_dir, fs_root, new_root, log_path, ops, tuple(cgroups), host_uid
    )


def _layout_ops(
    config: LocalSandboxConfig,
    registry: Registry,
    sandbox_dir: Path,
    fs_root: Path,
    cgroups: Sequence[Path],
) -> tuple[MountOp, ...]:
    """The mount plan: the host's system dirs, none of its data (layout.py says which)."""
    search_path = config.env.get("PATH", os.environ.get("PATH", _DEFAULT_PATH))
    binds = [os.path.normpath(os.path.abspath(path)) for path in config.read_only_binds]
    for path in binds:
        if not os.path.exists(path):
            raise SandboxStartError(f"cannot bind {path} into the sandbox: it does not exist")
    layout = plan_layout(
        config.paths,
        fs_root=fs_root,
        host_entries=scan_host_root(),
        hidden=[os.path.realpath(p) for p in (registry.state_dir, *config.hidden_paths)],
        needed=agent_paths(),
        # Its own cgroups only (delegated): the rest of /sys/fs/cgroup stays read-only.
        shared=[str(path) for path in cgroups],
        masked=working_directory_mask(search_path),
        read_only=[*binds, *(tool for tool in opt_tools(search_path) if os.path.isdir(tool))],
        files=write_account_files(sandbox_dir / "etc", home="/root"),
    )
    return layout.ops


def working_directory_mask(search_path: str) -> list[str]:
    """The caller's working directory (a project folder: data), where a sandbox could see it.

    Outside the system dirs it is not there anyway. Inside one (/usr/local/src/project) it
    is masked, unless it holds the tools themselves: an ancestor of a PATH dir, or below the
    libraries and shared files everything loads (/usr/lib*, /usr/share, /lib*)."""
    cwd = os.path.realpath(os.getcwd())
    parts = PurePosixPath(cwd).parts
    if len(parts) < 3 or parts[1] not in SYSTEM_DIRS:
        return []
    if parts[1].startswith("lib") or (parts[1] == "usr" and parts[2].startswith(("lib", "share"))):
        return []
    tools = [os.path.realpath(entry) for entry in search_path.split(":") if entry.startswith("/")]
    if any(tool == cwd or tool.startswith(cwd + "/") for tool in tools):
        return []
    return [cwd]


def sandbox_host_uid() -> int | None:
    """A fresh host uid for a sandbox when we are root, else None (it runs as us)."""
    if os.geteuid() != 0:
        return None
    return _HOST_UID_BASE + secrets.randbelow(_HOST_UID_SPAN)


def give_to(fs_root: Path, uid: int) -> None:
    """chown the sandbox's private dirs (not the state dir around them) to its host uid."""
    for root, dirs, files in os.walk(fs_root):
        for name in [*dirs, *files]:
            os.chown(os.path.join(root, name), uid, uid, follow_symlinks=False)
    os.chown(fs_root, uid, uid)


@dataclasses.dataclass(frozen=True, slots=True)
class SpawnPlan:
    """The command that starts a sandbox, and what the model will see."""

    argv: list[str]
    cwd: Path
    paths: SandboxPaths
    """The paths the model will see."""
    agent_argv: list[str]
    extra_fds: tuple[int, ...] = ()
    """Open fds the child inherits besides the ready pipe; closed here after the spawn."""
    unblock_fd: int | None = None
    """Write end of bwrap's --block-fd: the agent starts once the cgroups are joined."""
    info_fd: int | None = None
    """Read end of bwrap's --info-fd: it names bwrap's child once that exists."""


def spawn_plan(
    plan: SandboxPlan,
    config: LocalSandboxConfig,
    choice: IsolationChoice,
    ready_fd: int,
    token_fd: int,
) -> SpawnPlan:
    """What to execute, where, and what the model sees (writes small files: run in a thread).

    `token_fd` is the read end of a pipe holding the token: the agent reads and closes it."""
    if choice.mechanism == "none":
        paths = SandboxPaths(
            **{
                field.name: str(host_path(plan.fs_root, getattr(config.paths, field.name)))
                for field in dataclasses.fields(SandboxPaths)
            }
        )
        # PR_SET_PDEATHSIG in the agent: it dies with us. (Inside a PID namespace its
        # parent is the namespace's init, whose death already kills it.)
        argv = agent_command(config, ready_fd, token_fd, paths.working_dir, exit_with_parent=True)
        command = joining_cgroups(plan.cgroups, argv) if plan.cgroups else argv
        return SpawnPlan(command, Path(paths.working_dir), paths, argv)
    argv = agent_command(
        config,
        ready_fd,
        token_fd,
        config.paths.working_dir,
        exit_with_parent=False,
        socket=AGENT_SOCKET,
    )
    cwd = config.paths.working_dir
    if choice.mechanism == "bwrap":
        hold = _HeldStart.open() if plan.cgroups else None
        seccomp_fd = seccomp_program()
        options = bwrap_options(
            user_namespace=choice.user_namespace,
            ops=plan.ops,
            cwd=cwd,
            block_fd=hold.block_read if hold else None,
            info_fd=hold.info_write if hold else None,
            seccomp_fd=seccomp_fd,
        )
        # The options go through a file (--args FD): the sandbox's `ps` then shows one short
        # line for its PID 1 instead of a hundred mount flags.
        args_path = plan.sandbox_dir / "bwrap.args"
        args_path.write_bytes(b"".join(os.fsencode(option) + b"\0" for option in options))
        args_fd = os.open(args_path, os.O_RDONLY | os.O_CLOEXEC)
        command = [shutil.which("bwrap") or "bwrap", "--args", str(args_fd), "--", *argv]
        fds = (args_fd, seccomp_fd)
        if hold is None:
            return SpawnPlan(command, plan.sandbox_dir, config.paths, argv, fds)
        extra = (*fds, hold.block_read, hold.info_write)
        return SpawnPlan(
            command, plan.sandbox_dir, config.paths, argv, extra, hold.unblock, hold.info_read
        )
    spec_path = plan.sandbox_dir / "nsinit.json"
    spec = nsinit_spec(
        new_root=plan.new_root,
        ops=plan.ops,
        cwd=cwd,
        agent_argv=argv,
        cgroups=plan.cgroups,
        host_uid=plan.host_uid,
    )
    spec_path.write_text(spec)
    command = unshare_command(user_namespace=choice.user_namespace, spec_path=spec_path)
    return SpawnPlan(command, plan.sandbox_dir, config.paths, argv)


def seccomp_program() -> int:
    """A memfd holding the sandbox's seccomp filter as BPF: the very filter nsinit loads
    (one builder, nsinit.seccomp_filter). SandboxStartError without libseccomp."""
    fd = os.memfd_create("sandfleet-seccomp", os.MFD_CLOEXEC)
    try:
        if not export_seccomp(fd):
            raise SandboxStartError(NO_LIBSECCOMP)
        os.lseek(fd, 0, os.SEEK_SET)
    except BaseException:
        os.close(fd)
        raise
    return fd


def joining_cgroups(cgroups: Sequence[Path], argv: Sequence[str]) -> list[str]:
    """argv behind a shell that first enters the cgroups: the agent then starts inside them,
    and everything it starts stays findable there, even a daemon that left its tree."""
    joins = " && ".join(f"echo $$ > {shlex.quote(str(c / 'cgroup.procs'))}" for c in cgroups)
    return ["/bin/sh", "-c", f'{joins} && exec "$@"', "sandfleet-join", *argv]


@dataclasses.dataclass(frozen=True, slots=True)
class _HeldStart:
    """Pipes that let us move bwrap into the cgroups before it starts the agent: bwrap
    reports its child on --info-fd, then waits on --block-fd. Only the child forks later,
    so moving the two of them leaves no process outside."""

    block_read: int
    unblock: int
    info_read: int
    info_write: int

    @classmethod
    def open(cls) -> _HeldStart:
        block_read, unblock = os.pipe()
        info_read, info_write = os.pipe()
        return cls(block_read, unblock, info_read, info_write)


def agent_command(
    config: LocalSandboxConfig,
    ready_fd: int,
    token_fd: int,
    workdir: str,
    *,
    exit_with_parent: bool,
    socket: str | None = None,
) -> list[str]:
    """socket: a Unix socket to serve on (namespaced), else any free port on 127.0.0.1."""
    listen = f"unix:{socket}" if socket else "127.0.0.1:0"
    # -I: a module the model leaves in the working dir must never shadow the agent's imports.
    argv = [sys.executable, "-I", "-m", "sandfleet_runtime", "--listen", listen]
    argv += ["--ready-fd", str(ready_fd), "--workdir", workdir, "--log-level", config.log_level]
    # The token travels in a pipe, never in an environment: /proc/<pid>/environ of every
    # process in the sandbox's tree would otherwise show it to the shells.
    argv += ["--token-fd", str(token_fd)]
    if exit_with_parent:
        argv.append("--exit-with-parent")
    if config.max_processes is not None:
        argv += ["--max-processes", str(config.max_processes)]
    if config.max_memory_bytes is not None:
        argv += ["--max-memory", str(config.max_memory_bytes)]
    return argv


def sandbox_environment(
    config: LocalSandboxConfig, *, sandbox_id: str, plan: SandboxPlan
) -> dict[str, str]:
    """A small environment, not the host's: API keys and tokens of the user stay out (and
    the runtime's own token too: it goes through --token-fd)."""
    degraded = plan.record.mechanism == "none"
    home = str(plan.fs_root / "root") if degraded else "/root"
    env = {
        "PATH": f"{python_path_entries(home)}:{os.environ.get('PATH', _DEFAULT_PATH)}",
        "LANG": os.environ.get("LANG", "C.UTF-8"),
        "HOME": home,
        SANDBOX_ID_ENV: sandbox_id,
    }
    if degraded:
        env["TMPDIR"] = str(plan.fs_root / "tmp")
    env.update(config.env)
    return env


@functools.cache
def agent_paths() -> tuple[str, ...]:
    """Host paths the agent's interpreter and packages live in (real paths)."""
    found = {
        os.path.realpath(path)
        for path in (sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix)
    }
    found.add(os.path.dirname(os.path.realpath(sys.executable)))
    for name in _AGENT_PACKAGES:
        with contextlib.suppress(ImportError, ValueError):
            spec = importlib.util.find_spec(name)
            for location in (spec.submodule_search_locations or []) if spec else []:
                found.add(os.path.dirname(os.path.realpath(location)))
    return tuple(sorted(found))


def self_identity() -> ProcessIdentity:
    identity = ProcessIdentity.of(os.getpid())
    if identity is None:  # /proc is not mounted: nothing here can work
        raise SandboxStartError("/proc is not available; local sandboxes need it")
    return identity
