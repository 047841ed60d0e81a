"""LocalSandboxConfig: how one local sandbox is isolated, limited and where it keeps its files."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Literal

from sandfleet.sandbox.backend import SandboxPaths

Isolation = Literal["auto", "namespaces", "none"]
NamespaceTool = Literal["auto", "bwrap", "unshare"]
Egress = Literal["none", "internet", "all"]

GIB = 1024**3


@dataclasses.dataclass(frozen=True, slots=True)
class LocalSandboxConfig:
    """One local sandbox: a runtime agent child process in a private directory.

    With namespaces the model sees `paths` (default /testbed) as its own directory, the
    host's system files read-only (/usr, /etc, /lib*: the tools it runs) and none of the
    host's data (/home, /var, /opt, /srv, /mnt and any other folder are empty or absent), a
    private /tmp, /var/tmp, /run and /root (HOME), and only the sandbox's processes; it
    runs as an unprivileged uid without capabilities, and its network is loopback only (the
    agent serves on a Unix socket). README: "Local sandboxes: isolation".
    """

    paths: SandboxPaths = dataclasses.field(default_factory=SandboxPaths)
    """Where the model sees its files. Without namespaces they move below the private dir."""
    isolation: Isolation = "auto"
    """"auto" and "namespaces": namespaces, or SandboxStartError when this machine cannot
    give them (never a silent fallback); "none": a plain child process (a logged warning)."""
    egress: Egress = "none"
    """Network of a namespaced sandbox, named like the cluster's spec.network.egress: "none"
    (loopback only), "all" (through slirp4netns; the host's 127.0.0.1 stays unreachable),
    "internet" (the same, with the private, link-local, CGNAT and loopback ranges rejected by a
    firewall in the sandbox's network namespace). Isolation "none" has the host's network."""
    max_processes: int | None = 512
    """pids limit for everything the sandbox's shells start (the runtime agent applies it)."""
    max_memory_bytes: int | None = 2 * GIB
    """Memory limit for everything the sandbox's shells start (the runtime agent applies it)."""
    state_dir: Path | None = None
    """Private dirs and pid records live here; None: $XDG_CACHE_HOME/sandfleet/sandboxes."""
    env: Mapping[str, str] = dataclasses.field(default_factory=dict)
    """Extra environment for the sandbox (the host environment is NOT inherited: API keys
    stay out). PATH and LANG come from the host unless set here."""
    keep_workdir: bool = False
    """Leave the private dir on disk after close (for inspection); its record is removed."""
    namespace_tool: NamespaceTool = "auto"
    """Which tool builds the namespaces: util-linux unshare, else bubblewrap (isolation.py
    says why in that order)."""
    start_timeout_s: float = 60.0
    """How long the agent may take to report its port (64 starting at once on 2 cores: ~10 s)."""
    stop_grace_s: float = 10.0
    """How long close() waits for a graceful shutdown before SIGKILL."""
    read_only_binds: tuple[Path, ...] = ()
    """Host paths a namespaced sandbox may read, at the same path inside (read-only): data
    a task needs that is not copied in as input. A path inside the state dir or
    `hidden_paths` is refused."""
    hidden_paths: tuple[Path, ...] = ()
    """Host paths no namespaced sandbox may see even below a read-only bind or a system dir
    (the CLI hides its results dir here, `sandfleet eval` the benchmark folder)."""
    max_suspend_bytes: int | None = GIB
    """Largest snapshot `Sandbox.suspend()` writes (the files it saves, before tar's
    overhead); over it, suspend refuses with SnapshotTooLargeError. None: no limit."""
    log_level: str = "INFO"
    """The runtime agent's log level; its log is <state_dir>/<id>/agent.log."""

    def resolved_state_dir(self) -> Path:
        return self.state_dir if self.state_dir is not None else default_state_dir()


def default_state_dir(environ: Mapping[str, str] | None = None) -> Path:
    """$XDG_CACHE_HOME/sandfleet/sandboxes, or ~/.cache/sandfleet/sandboxes."""
    env = os.environ if environ is None else environ
    cache_home = env.get("XDG_CACHE_HOME")
    base = Path(cache_home) if cache_home else Path.home() / ".cache"
    return base / "sandfleet" / "sandboxes"
