"""What every way of opening a Sandbox returns (Opening) and takes on a cluster (ClusterOptions).

One style for every opener: `sandbox = await Sandbox.local()` gives an open sandbox to close
later, `async with Sandbox.local() as sandbox:` closes it on exit; the same for `open`,
`connect`, `on_cluster`, `on_cluster_many` (a list, all closed on exit) and `connect_session`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable, Coroutine, Generator, Mapping
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, Generic, TypeVar

if TYPE_CHECKING:
    from sandfleet.api import EgressMode, LifecycleSpec
    from sandfleet.sandbox.backend import SandboxPaths

T = TypeVar("T")

__all__ = ["ClusterOptions", "Opening"]


class Opening(Generic[T]):
    """A sandbox (or a list of them) being opened: `await` it for the open sandbox, or use it
    as `async with ... as sandbox:` to close the sandbox on exit. Each `await` or `async with`
    opens anew."""

    __slots__ = ("_close", "_open", "_opened")

    def __init__(
        self,
        open_: Callable[[], Coroutine[Any, Any, T]],
        close: Callable[[T], Awaitable[None]],
    ) -> None:
        self._open = open_
        self._close = close
        self._opened: list[T] = []

    def __await__(self) -> Generator[Any, None, T]:
        return self._open().__await__()

    async def __aenter__(self) -> T:
        opened = await self._open()
        self._opened.append(opened)
        return opened

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self._close(self._opened.pop())


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class ClusterOptions:
    """What a sandbox on Kubernetes gets beyond its pool or template, and how the cluster is
    found: the options of Sandbox.on_cluster, on_cluster_many and connect_session."""

    env: Mapping[str, str] | None = None
    """Environment variables of the sandbox's processes."""
    files: Mapping[str, str] | None = None
    """Sandbox path (absolute, or relative to the working directory) -> text, placed before
    the sandbox is handed out."""
    lifecycle: LifecycleSpec | None = None
    """When the session ends by itself (idle or absolute deadline)."""
    egress: EgressMode | str | None = None
    """Network egress of the sandbox (None: the pool's or template's)."""
    generate_name: str = "sbx-"
    """Prefix of the session's generated name."""
    ready_timeout_s: float = 120.0
    """How long a cold start may take."""
    paths: SandboxPaths | None = None
    """The layout inside the sandbox (default: below its working directory)."""
    kubeconfig: Path | str | None = None
    """The kubeconfig that names the gateway and the caller's token when neither the
    arguments nor SANDFLEET_GATEWAY / SANDFLEET_GATEWAY_TOKEN do."""
    context: str | None = None
    """The kubeconfig context (None: its current one)."""
