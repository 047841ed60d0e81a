"""SyncSandbox: the Sandbox for code without asyncio (scripts, trainers, notebooks' threads).

It is Sandbox's exact twin: the same openers and methods, with the same names and
arguments, blocking. Each SyncSandbox drives an async Sandbox on an event loop in a worker
thread: anyio's blocking portal (one per opener call, shared by the sandboxes of one
`on_cluster_many()` and by forks). Its methods may be called from any thread, also from many
at once.

    with SyncSandbox.on_cluster("team-a", pool="py312") as sandbox:
        print(sandbox.call_tool("execute_bash", {"command": "python -V"}))
"""

from __future__ import annotations

import contextlib
import functools
import threading
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, ParamSpec, Self, TypeVar

from anyio.from_thread import BlockingPortal, start_blocking_portal

from sandfleet.clients.runtime.client import (
    CommandResult,
    FileEntry,
    ResetResult,
    SandboxStats,
    UploadResult,
)
from sandfleet.errors import SuspendError
from sandfleet.sandbox.backend import SandboxBackend, SandboxPaths
from sandfleet.sandbox.copy_back import CopyLimits, CopyReport
from sandfleet.sandbox.core import SandboxCore
from sandfleet.sandbox.facade import Sandbox
from sandfleet.sandbox.opening import ClusterOptions, Opening
from sandfleet.sandbox.suspension import SuspendedSandbox
from sandfleet.sandbox.tree_snapshot import TreeSnapshot
from sandfleet.tool_calls import EditorRequest

if TYPE_CHECKING:
    from sandfleet.backends.local import LocalSandboxConfig

__all__ = ["SyncSandbox"]

P = ParamSpec("P")
T = TypeVar("T")


class EventLoopThread:
    """One event-loop thread (anyio's blocking portal) for blocking facades, stopped when the
    last of its `users` has left (SyncSandbox and its forks, SyncSandboxEnvBatch)."""

    def __init__(self, users: int = 1) -> None:
        self._stack = contextlib.ExitStack()
        self.portal: BlockingPortal = self._stack.enter_context(
            start_blocking_portal(name="sandfleet-sync")
        )
        self._users = users
        self._lock = threading.Lock()

    def call(self, func: Callable[P, Awaitable[T]], *args: P.args, **kwargs: P.kwargs) -> T:
        return self.portal.call(functools.partial(func, *args, **kwargs))

    def set_users(self, users: int) -> None:
        with self._lock:
            self._users = users

    def join(self, users: int) -> None:
        """`users` more sandboxes live on this loop (forks)."""
        with self._lock:
            self._users += users

    def leave(self) -> None:
        with self._lock:
            self._users -= 1
            last = self._users <= 0
        if last:
            self._stack.close()


class SyncSandbox:
    """A Sandbox with blocking methods; close it (or use `with`) to give the sandbox back.
    Close every one: an open SyncSandbox keeps its event-loop thread, and the interpreter
    waits for that thread at exit.

    Errors are the async Sandbox's: SandboxLostError, ToolError, GatewayError, ...
    """

    def __init__(
        self,
        sandbox: SandboxCore,
        portal: EventLoopThread,
    ) -> None:
        self.sandbox = sandbox
        """The async Sandbox underneath (use it only on this object's event loop)."""
        self._portal = portal
        self._closed = False
        self._close_lock = threading.Lock()

    # --- opening: Sandbox's openers, blocking --------------------------------------------
    @classmethod
    def connect(
        cls,
        address: str,
        token: str,
        *,
        paths: SandboxPaths | None = None,
        tool_timeout_s: float = 0,
        max_output_chars: int = 0,
    ) -> Self:
        """A sandbox whose runtime agent already runs at `address` (Sandbox.connect)."""
        return cls._opened(
            Sandbox.connect(
                address, token, paths=paths, tool_timeout_s=tool_timeout_s,
                max_output_chars=max_output_chars,
            )
        )  # fmt: skip

    @classmethod
    def open(
        cls, backend: SandboxBackend[Any], *, tool_timeout_s: float = 0, max_output_chars: int = 0
    ) -> Self:
        """A sandbox from any backend (Sandbox.open)."""
        return cls._opened(
            Sandbox.open(backend, tool_timeout_s=tool_timeout_s, max_output_chars=max_output_chars)
        )

    @classmethod
    def local(
        cls,
        config: LocalSandboxConfig | None = None,
        *,
        tool_timeout_s: float = 0,
        max_output_chars: int = 0,
    ) -> Self:
        """A local sandbox (Sandbox.local)."""
        return cls._opened(
            Sandbox.local(config, tool_timeout_s=tool_timeout_s, max_output_chars=max_output_chars)
        )

    @classmethod
    def on_cluster(
        cls,
        namespace: str | None = None,
        *,
        pool: str | None = None,
        template: str | None = None,
        gateway: str | None = None,
        token: str | None = None,
        options: ClusterOptions | None = None,
        claim_id: str | None = None,
        tool_timeout_s: float = 0,
        max_output_chars: int = 0,
    ) -> Self:
        """A sandbox on Kubernetes through the gateway (Sandbox.on_cluster)."""
        return cls._opened(
            Sandbox.on_cluster(
                namespace, pool=pool, template=template, gateway=gateway, token=token,
                options=options, claim_id=claim_id, tool_timeout_s=tool_timeout_s,
                max_output_chars=max_output_chars,
            )
        )  # fmt: skip

    @classmethod
    def on_cluster_many(
        cls,
        count: int,
        namespace: str | None = None,
        *,
        pool: str | None = None,
        template: str | None = None,
        gateway: str | None = None,
        token: str | None = None,
        options: ClusterOptions | None = None,
        claim_id: str | None = None,
        tool_timeout_s: float = 0,
        max_output_chars: int = 0,
    ) -> list[Self]:
        """`count` sandboxes from one gateway claim, all or none (Sandbox.on_cluster_many),
        sharing one event loop."""
        opening = Sandbox.on_cluster_many(
            count, namespace, pool=pool, template=template, gateway=gateway, token=token,
            options=options, claim_id=claim_id, tool_timeout_s=tool_timeout_s,
            max_output_chars=max_output_chars,
        )  # fmt: skip
        portal = EventLoopThread()
        try:
            sandboxes = portal.call(_wait, opening)
        except BaseException:
            portal.leave()
            raise
        portal.set_users(len(sandboxes))
        return [cls(sandbox, portal) for sandbox in sandboxes]

    @classmethod
    def connect_session(
        cls,
        name: str,
        namespace: str | None = None,
        *,
        timeout_s: float = 0,
        gateway: str | None = None,
        token: str | None = None,
        options: ClusterOptions | None = None,
        tool_timeout_s: float = 0,
        max_output_chars: int = 0,
    ) -> Self:
        """An existing session through the gateway (Sandbox.connect_session)."""
        return cls._opened(
            Sandbox.connect_session(
                name, namespace, timeout_s=timeout_s, gateway=gateway, token=token,
                options=options, tool_timeout_s=tool_timeout_s,
                max_output_chars=max_output_chars,
            )
        )  # fmt: skip

    @classmethod
    def resume(
        cls,
        sandbox: str | SuspendedSandbox,
        *,
        state_dir: Path | None = None,
        config: LocalSandboxConfig | None = None,
        namespace: str | None = None,
        gateway: str | None = None,
        token: str | None = None,
        options: ClusterOptions | None = None,
        tool_timeout_s: float = 0,
        max_output_chars: int = 0,
    ) -> Self:
        """A suspended sandbox back, files and sessions restored: a local one, or a cluster
        session through the gateway (Sandbox.resume says which)."""
        return cls._opened(
            Sandbox.resume(
                sandbox, state_dir=state_dir, config=config, namespace=namespace,
                gateway=gateway, token=token, options=options, tool_timeout_s=tool_timeout_s,
                max_output_chars=max_output_chars,
            )
        )  # fmt: skip

    @classmethod
    def _opened(cls, opening: Opening[Any]) -> Self:
        portal = EventLoopThread()
        try:
            sandbox = portal.call(_wait, opening)
        except BaseException:
            portal.leave()
            raise
        return cls(sandbox, portal)

    # --- closing ----------------------------------------------------------------------------
    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def close(self) -> None:
        """Give the sandbox back (stop it, or release its session); a second call does nothing."""
        with self._close_lock:
            if self._closed:
                return
            self._closed = True
        try:
            self._portal.call(self.sandbox.close)
        finally:
            self._portal.leave()

    def suspend(self) -> SuspendedSandbox:
        """Save the sandbox to disk and stop it (Sandbox.suspend); this object is closed
        after a suspend, and left open when suspend fails."""
        with self._close_lock:
            if self._closed:
                raise SuspendError("the sandbox is closed: there is nothing to suspend")
            record = self._portal.call(self.sandbox.suspend)
            self._closed = True
        self._portal.leave()
        return record

    # --- the sandbox ------------------------------------------------------------------------
    def call_tool(self, name: str, arguments: str | Mapping[str, Any]) -> str:
        """Exactly what the model sees for one tool call (Sandbox.call_tool)."""
        return self._portal.call(self.sandbox.call_tool, name, arguments)

    def bash(
        self, command: str, *, session: str = "default", timeout_s: float | None = None
    ) -> CommandResult:
        """Run one bash command (Sandbox.bash)."""
        return self._portal.call(self.sandbox.bash, command, session=session, timeout_s=timeout_s)

    def edit(self, request: EditorRequest) -> str:
        """The editor's output for one request (Sandbox.edit)."""
        return self._portal.call(self.sandbox.edit, request)

    def upload(self, source: Path | bytes, remote: str, *, mode: int | None = None) -> UploadResult:
        """Write `source` (a local file or bytes) to `remote` (Sandbox.upload)."""
        return self._portal.call(self.sandbox.upload, source, remote, mode=mode)

    def download(self, remote: str, local: Path) -> int:
        return self._portal.call(self.sandbox.download, remote, local)

    def download_tree(self, remote_dir: str, local_dir: Path) -> list[Path]:
        return self._portal.call(self.sandbox.download_tree, remote_dir, local_dir)

    def copy_tree(
        self, remote_dir: str, local_dir: Path, limits: CopyLimits | None = None
    ) -> CopyReport:
        return self._portal.call(self.sandbox.copy_tree, remote_dir, local_dir, limits)

    def list_files(self, remote_dir: str) -> list[FileEntry]:
        return self._portal.call(self.sandbox.list_files, remote_dir)

    def stats(self) -> SandboxStats:
        return self._portal.call(self.sandbox.stats)

    # --- rollouts ---------------------------------------------------------------------------
    def reset(self) -> ResetResult:
        """Back to the pristine state for the next rollout (Sandbox.reset)."""
        return self._portal.call(self.sandbox.reset)

    def snapshot(self) -> TreeSnapshot:
        """The working tree as a tar archive in a temporary file (Sandbox.snapshot)."""
        return self._portal.call(self.sandbox.snapshot)

    def restore(self, snapshot: TreeSnapshot, *, as_baseline: bool = False) -> int:
        return self._portal.call(self.sandbox.restore, snapshot, as_baseline=as_baseline)

    def fork(self, count: int, *, as_baseline: bool = True) -> list[SyncSandbox]:
        """`count` independent sandboxes from this one's tree (Sandbox.fork), on this
        sandbox's event loop; close each."""
        forks = self._portal.call(self.sandbox.fork, count, as_baseline=as_baseline)
        self._portal.join(len(forks))
        return [SyncSandbox(fork, self._portal) for fork in forks]


async def _wait(opening: Awaitable[T]) -> T:
    return await opening
