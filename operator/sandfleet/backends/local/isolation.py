"""Which isolation this machine allows, and the command line that starts a sandbox with it.

Every namespaced sandbox gets new mount, PID, IPC, network and user namespaces: its shells
and its runtime agent run as SANDBOX_UID, an unprivileged uid inside, with no capabilities
(empty bounding set) and no_new_privs; the network namespace has only loopback, and the
agent serves on a Unix socket the host reaches through the sandbox's private /run.
Mechanisms, in the order "auto" tries them:
- "unshare" (util-linux): our nsinit.py builds the root (read-only binds applied atomically
  with mount_setattr), then drops to SANDBOX_UID in a user namespace of its own (as root it
  first becomes a host uid of the sandbox's own, which owns no host file), and leaves a
  /bin/sh as PID 1; `setpriv --pdeathsig KILL` ties it to us.
- "bwrap" (bubblewrap), without root only: it maps SANDBOX_UID to the caller. Run by root it
  would map the sandbox to host uid 0, which still owns (and may read) /etc/shadow, so as
  root it is refused and "unshare" is the mechanism. (Dropping to the sandbox's host uid
  first does not help: bubblewrap 0.8 resolves even --bind-fd sources by path again, and
  that uid may not traverse root's state dir, e.g. ~/.cache under a 0700 /root.)
- "none": a plain child process in the private directory; only when explicitly chosen.
"auto" and "namespaces" never fall back to "none": without user namespaces the start fails
with a line that names the explicit opt-out.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import shutil
import sys
import weakref
from collections.abc import Sequence
from pathlib import Path
from typing import Literal

from sandfleet.backends.local.config import Isolation, NamespaceTool
from sandfleet.backends.local.layout import MountOp
from sandfleet.backends.local.nsinit import NO_LIBSECCOMP, libseccomp_loadable
from sandfleet.errors import SandboxStartError
from sandfleet.logs import get_logger

log = get_logger(__name__)

Mechanism = Literal["bwrap", "unshare", "none"]
SANDBOX_UID = 1000
"""The uid (and gid) the sandbox's processes have inside their user namespace."""
NOBODY = 65534
OPT_OUT = (
    "to run sandboxes as plain processes that can read and change whatever you can, choose "
    "that explicitly: --isolation none (SANDFLEET_ISOLATION=none, or "
    "LocalSandboxConfig(isolation='none'))"
)
NSINIT = Path(__file__).with_name("nsinit.py")
_PROBE_TIMEOUT_S = 10.0
_probe_cache: dict[tuple[str, bool], str | None] = {}
_probe_locks: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Lock] = (
    weakref.WeakKeyDictionary()
)


@dataclasses.dataclass(frozen=True, slots=True)
class IsolationChoice:
    mechanism: Mechanism
    user_namespace: bool = False
    """The tool must also create a user namespace (we are not root)."""


async def choose_isolation(isolation: Isolation, tool: NamespaceTool) -> IsolationChoice:
    """Probe (once per process) what works here; raise SandboxStartError when nothing does
    ("auto" and "namespaces" alike: only an explicit "none" runs without namespaces)."""
    if isolation == "none":
        return IsolationChoice("none")
    problem = seccomp_problem()
    if problem is not None:
        raise SandboxStartError(problem)
    user_ns = os.geteuid() != 0
    candidates: list[Mechanism] = ["unshare", "bwrap"] if tool == "auto" else [tool]
    reasons: list[str] = []
    for mechanism in candidates:
        problem = await _probe(mechanism, user_ns)
        if problem is None:
            return IsolationChoice(mechanism, user_namespace=user_ns)
        reasons.append(f"{mechanism}: {problem}")
    reason = "; ".join(reasons)
    raise SandboxStartError(
        f"local sandboxes need Linux user namespaces, which this machine does not give "
        f"({reason}); {OPT_OUT}"
    )


def seccomp_problem() -> str | None:
    """Why no namespaced sandbox may start here (no libseccomp for its filter), else None.
    Never a warning and a start without it: the filter is what closes namespace creation,
    io_uring and the other kernel surfaces (nsinit.py lists them)."""
    return None if libseccomp_loadable() else NO_LIBSECCOMP


async def probe(mechanism: Mechanism) -> str | None:
    """Why `mechanism` cannot isolate a sandbox here, or None if it can (cached)."""
    return None if mechanism == "none" else await _probe(mechanism, os.geteuid() != 0)


async def _probe(mechanism: Mechanism, user_ns: bool) -> str | None:
    """None if the tool can build a sandbox-like namespace set here, else why not.
    Probed once per process: concurrent launches (a batch of 64) wait for the first probe."""
    key = (mechanism, user_ns)
    if key in _probe_cache:
        return _probe_cache[key]
    loop = asyncio.get_running_loop()
    lock = _probe_locks.setdefault(loop, asyncio.Lock())
    async with lock:
        if key in _probe_cache:
            return _probe_cache[key]
        return await _probe_uncached(mechanism, user_ns)


async def _probe_uncached(mechanism: Mechanism, user_ns: bool) -> str | None:
    key = (mechanism, user_ns)
    program = shutil.which(mechanism)
    if program is None:
        problem: str | None = "not installed"
    elif mechanism == "bwrap" and not user_ns:
        problem = "run as root, bubblewrap would map the sandbox to host uid 0"
    else:
        if mechanism == "bwrap":
            # Only stable system dirs: a recursive bind of / trips over mounts that other
            # programs add and remove meanwhile, failing the probe for the wrong reason.
            flags = ["--ro-bind", "/usr", "/usr", "--proc", "/proc", "--dev", "/dev"]
            for path in ("/bin", "/lib", "/lib64"):
                flags += ["--ro-bind-try", path, path]
            argv = [program, *_bwrap_namespace_flags(user_ns), *flags, "true"]
        else:
            argv = [program, *_unshare_namespace_flags(user_ns), "--mount-proc", "true"]
        problem = await _run_probe(argv)
        if problem is None and mechanism == "unshare":
            problem = await _run_probe(_user_namespace_probe(program, user_ns))
    _probe_cache[key] = problem
    log.debug("isolation_probed", mechanism=mechanism, user_namespace=user_ns, problem=problem)
    return problem


async def _run_probe(argv: Sequence[str]) -> str | None:
    proc = await asyncio.create_subprocess_exec(
        *argv,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        async with asyncio.timeout(_PROBE_TIMEOUT_S):
            _, stderr = await proc.communicate()
    except TimeoutError:
        proc.kill()
        await proc.wait()
        return f"probe timed out after {_PROBE_TIMEOUT_S:g}s"
    if proc.returncode == 0:
        return None
    detail = stderr.decode(errors="replace").strip().splitlines()
    return detail[-1] if detail else f"exit status {proc.returncode}"


def _user_namespace_probe(unshare: str, user_ns: bool) -> list[str]:
    """nsinit creates a user namespace as an unprivileged uid (as root: after dropping to
    one): `kernel.unprivileged_userns_clone=0` or a zero `user.max_user_namespaces` forbid
    that even where root itself could create one."""
    nested = [unshare, "--user", "true"]
    if user_ns:
        return [unshare, "--user", "--map-root-user", "--", *nested]
    drop = [f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups"]
    return [shutil.which("setpriv") or "setpriv", *drop, "--", *nested]


def _unshare_namespace_flags(user_ns: bool) -> list[str]:
    flags = ["--mount", "--pid", "--ipc", "--net", "--fork", "--propagation", "private"]
    return [*flags, "--user", "--map-root-user"] if user_ns else flags


def _bwrap_namespace_flags(user_ns: bool) -> list[str]:
    """bubblewrap drops every capability and sets no_new_privs itself once it runs the
    command as a non-zero uid; --disable-userns also keeps the sandbox from making another
    user namespace (Linux 5.x+; see bwrap(1))."""
    flags = ["--die-with-parent", "--unshare-pid", "--unshare-ipc", "--unshare-net"]
    if not user_ns:
        return flags
    ids = ["--uid", str(SANDBOX_UID), "--gid", str(SANDBOX_UID)]
    return [*flags, "--unshare-user", *ids, "--disable-userns", "--cap-drop", "ALL"]


def nsinit_spec(
    *,
    new_root: Path,
    ops: Sequence[MountOp],
    cwd: str,
    agent_argv: Sequence[str],
    cgroups: Sequence[Path] = (),
    host_uid: int | None = None,
) -> str:
    """The JSON nsinit.py reads (from a file: a model running `ps` should not see it).
    host_uid: the host uid nsinit becomes before its user namespace (when we are root)."""
    spec = {
        "new_root": str(new_root),
        "ops": [dataclasses.asdict(op) for op in ops],
        "cwd": cwd,
        "argv": list(agent_argv),
        "cgroups": [str(path) for path in cgroups],
        "uid": SANDBOX_UID,
        "host_uid": host_uid,
    }
    return json.dumps(spec, indent=1)


def unshare_command(*, user_namespace: bool, spec_path: Path) -> list[str]:
    """setpriv (die with us) -> unshare (namespaces; kills its child if it dies) -> nsinit."""
    unshare = shutil.which("unshare") or "unshare"
    command = [
        unshare,
        *_unshare_namespace_flags(user_namespace),
        "--kill-child=SIGKILL",
        "--",
        sys.executable,
        "-I",
        "-S",
        str(NSINIT),
        str(spec_path),
    ]
    setpriv = shutil.which("setpriv")
    # pdeathsig survives exec: if this process dies, unshare dies, nsinit (PID 1) dies,
    # and the kernel kills the rest of the namespace. Old util-linux lacks setpriv:
    # the registry sweep covers that case at the next start.
    return [setpriv, "--pdeathsig", "KILL", "--", *command] if setpriv else command


def bwrap_options(
    *,
    user_namespace: bool,
    ops: Sequence[MountOp],
    cwd: str,
    block_fd: int | None = None,
    info_fd: int | None = None,
    seccomp_fd: int | None = None,
) -> list[str]:
    """bubblewrap's options for the same layout (the command follows them); its init is PID 1.

    info_fd: bwrap writes {"child-pid": N, ...} there once its child exists.
    block_fd: the child waits for a byte on it before going on (time for us to move the
    processes into the sandbox's cgroups, so the agent starts inside them).
    seccomp_fd: a BPF program (nsinit.export_seccomp) bwrap loads before the command."""
    args = _bwrap_namespace_flags(user_namespace)
    if seccomp_fd is not None:
        args.extend(["--seccomp", str(seccomp_fd)])
    if info_fd is not None:
        args.extend(["--info-fd", str(info_fd)])
    if block_fd is not None:
        args.extend(["--block-fd", str(block_fd)])
    for op in ops:
        args.extend(_bwrap_flags(op))
    args.extend(["--remount-ro", "/", "--chdir", cwd])
    return args


def _bwrap_flags(op: MountOp) -> list[str]:
    if op.kind == "bind":
        return ["--ro-bind" if op.readonly else "--bind", op.source, op.target]
    if op.kind == "symlink":
        return ["--symlink", op.source, op.target]
    if op.kind == "tmpfs":
        flags = ["--size", str(64 * 1024), "--tmpfs", op.target]
        return [*flags, "--remount-ro", op.target] if op.readonly else flags
    if op.kind == "proc":
        return ["--proc", op.target]
    if op.kind == "readonly":
        return ["--remount-ro", op.target]
    return ["--dev", op.target]
