"""The one interface between the Sandbox and its backends: SandboxPaths, OpenedSandbox,
SandboxBackend.

A backend (local processes, a cluster session, a gateway) opens a sandbox and hands back an
OpenedSandbox; the Sandbox is built from that alone. Backends depend on this module and never
on the Sandbox classes, so a new backend plugs in without touching the core.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable
from pathlib import PurePosixPath
from typing import TYPE_CHECKING, Generic, Protocol, TypeVar

if TYPE_CHECKING:
    from sandfleet.clients.runtime.client import RuntimeClient
    from sandfleet.sandbox.suspension import Suspender

DetailsT_co = TypeVar("DetailsT_co", covariant=True)


@dataclasses.dataclass(frozen=True, slots=True)
class SandboxPaths:
    """Where things live inside the sandbox, as the model sees them (seed project layout)."""

    working_dir: str = "/testbed"
    input_dir: str = "/testbed/input"
    output_dir: str = "/testbed/output"
    answer_file: str = "/testbed/output/answer.txt"

    @classmethod
    def under(cls, root: str) -> SandboxPaths:
        """The same layout below another root (used where /testbed cannot be private)."""
        base = PurePosixPath(root)
        return cls(
            working_dir=str(base),
            input_dir=str(base / "input"),
            output_dir=str(base / "output"),
            answer_file=str(base / "output" / "answer.txt"),
        )


@dataclasses.dataclass(frozen=True, slots=True)
class OpenedSandbox(Generic[DetailsT_co]):
    """A sandbox a backend has opened: its runtime answers `client`, and `close` undoes it."""

    client: RuntimeClient
    """Connected to the sandbox's runtime agent; `close` closes it too."""
    paths: SandboxPaths
    """The layout inside the sandbox, as the model sees it."""
    close: Callable[[], Awaitable[None]]
    """Closes the client and gives the sandbox back (stops the process, deletes the session)."""
    details: DetailsT_co
    """What only this backend knows (a local runtime process, a cluster session's state)."""
    suspend: Suspender | None = None
    """Saves the sandbox (files, bash sessions' cwd and environment) and stops it; None
    where the backend cannot suspend (the local one and the gateway can)."""


class SandboxBackend(Protocol[DetailsT_co]):
    """Something that opens sandboxes: `Sandbox.open(backend)` works with any of them."""

    async def open(self) -> OpenedSandbox[DetailsT_co]:
        """Start or claim one sandbox and connect to it; undo everything if that fails."""
        ...
