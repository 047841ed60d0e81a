"""The public Sandbox: SandboxCore plus the ways to open one (local, on a cluster, connect).

This module sits above the core and the backends: it imports them, and none of them imports
it. The backends load on first use, so `import sandfleet.sandbox.facade` stays cheap. Every
opener returns an Opening: `await` it, or `async with` it (sandfleet.sandbox.opening).
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Self

from sandfleet.clients.runtime.client import RuntimeClient
from sandfleet.sandbox.backend import OpenedSandbox, SandboxBackend, SandboxPaths
from sandfleet.sandbox.core import SandboxCore, SandboxOpener, close_all
from sandfleet.sandbox.opening import ClusterOptions, Opening
from sandfleet.sandbox.suspension import SuspendedSandbox

if TYPE_CHECKING:
    from sandfleet.backends.gateway import GatewayBackend, GatewaySandboxRequest
    from sandfleet.backends.local import LocalSandboxConfig
    from sandfleet.clients.gateway.client import GatewaySandboxInfo
    from sandfleet.fleet.status import SessionState

__all__ = ["ClusterSandbox", "Sandbox", "SandboxPaths"]


class Sandbox(SandboxCore):
    """One sandbox: `call_tool` gives the model's view, typed helpers give the program's.

    Open one with `Sandbox.local()`, `Sandbox.on_cluster(...)` (or `on_cluster_many`,
    `connect_session`: through the gateway), `Sandbox.connect(...)`, or
    `Sandbox.open(backend)` for any SandboxBackend (`ClusterSandbox.open(ClusterBackend(...))`
    creates a SandboxSession with the caller's own Kubernetes rights). Each returns an
    Opening: `sandbox = await Sandbox.local()` or `async with Sandbox.local() as sandbox:`.
    Raises SandboxLostError when the runtime agent is gone; never for a mistake the model made.
    """

    @classmethod
    def from_opened(
        cls,
        opened: OpenedSandbox[Any],
        *,
        tool_timeout_s: float = 0,
        max_output_chars: int = 0,
        opener: SandboxOpener | None = None,
    ) -> Self:
        """The sandbox a backend opened; closing it gives the sandbox back to that backend."""
        return cls(
            opened.client,
            paths=opened.paths,
            on_close=opened.close,
            tool_timeout_s=tool_timeout_s,
            max_output_chars=max_output_chars,
            opener=opener,
            suspender=opened.suspend,
        )

    @classmethod
    def connect(
        cls,
        address: str,
        token: str,
        *,
        paths: SandboxPaths | None = None,
        tool_timeout_s: float = 0,
        max_output_chars: int = 0,
    ) -> Opening[Self]:
        """A sandbox whose runtime agent is already running at `address`: HOST:PORT (e.g. a
        pod IP) or unix:PATH (a local sandbox's socket). Closing it closes the connection."""

        async def connect() -> Self:
            return cls(
                RuntimeClient(address, token), paths=paths, tool_timeout_s=tool_timeout_s,
                max_output_chars=max_output_chars,
            )  # fmt: skip

        return Opening(connect, _close_one)

    @classmethod
    def open(
        cls,
        backend: SandboxBackend[Any],
        *,
        tool_timeout_s: float = 0,
        max_output_chars: int = 0,
    ) -> Opening[Self]:
        """A sandbox from any backend; closing it gives the sandbox back to that backend
        (and `fork` opens its forks from the same backend)."""
        return Opening(lambda: cls._open(backend, tool_timeout_s, max_output_chars), _close_one)

    @classmethod
    async def _open(
        cls, backend: SandboxBackend[Any], tool_timeout_s: float, max_output_chars: int
    ) -> Self:
        opened = await backend.open()

        async def open_more(count: int) -> list[Self]:
            return await cls._open_many(backend, count, tool_timeout_s, max_output_chars)

        return cls.from_opened(
            opened, tool_timeout_s=tool_timeout_s, max_output_chars=max_output_chars,
            opener=open_more,
        )  # fmt: skip

    @classmethod
    async def _open_many(
        cls, backend: SandboxBackend[Any], count: int, tool_timeout_s: float, max_output_chars: int
    ) -> list[Self]:
        results = await asyncio.gather(
            *(cls._open(backend, tool_timeout_s, max_output_chars) for _ in range(count)),
            return_exceptions=True,
        )
        return await _all_or_none(results)

    @classmethod
    def local(
        cls,
        config: LocalSandboxConfig | None = None,
        *,
        tool_timeout_s: float = 0,
        max_output_chars: int = 0,
    ) -> Opening[Self]:
        """A local runtime agent (the embedded backend); closing the sandbox reclaims it and
        every process below it."""
        from sandfleet.backends.local import LocalBackend, LocalSandboxConfig

        backend = LocalBackend(config or LocalSandboxConfig())
        return cls.open(backend, tool_timeout_s=tool_timeout_s, max_output_chars=max_output_chars)

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
    ) -> Opening[Any]:
        """A suspended sandbox back, with the same id: its files, and its bash sessions'
        working directories and exported environments (not its processes).

        `sandbox`: the record `suspend()` returned, or its id. A local one: `state_dir`,
        where it was suspended (default: the local backend's); `config`, start it with this
        LocalSandboxConfig instead of the one it had; the snapshot is removed once the
        sandbox runs again; SnapshotCorruptError (naming the file) when the snapshot is
        missing or damaged, and nothing is removed then.

        A cluster session (a record with a namespace, or any of `namespace`, `gateway`,
        `token`, `options` given): resumed through the gateway, found as on_cluster finds
        it, and Ready within `options.ready_timeout_s`; a ClusterSandbox that owns the
        session as the claimed one did (close releases it). QuotaExceededError when the
        namespace has no room: a resumed session counts toward its quota again, a
        suspended one does not (docs/suspend.md)."""
        cluster = (namespace, gateway, token, options)
        record = sandbox if isinstance(sandbox, SuspendedSandbox) else None
        if (record is not None and record.namespace) or any(x is not None for x in cluster):
            if state_dir is not None or config is not None:
                raise ValueError("state_dir and config are for local sandboxes, not a cluster's")
            name = record.id if record is not None else str(sandbox)
            where = namespace or (record.namespace if record is not None else None)
            return _resume_session(
                name, where, gateway=gateway, token=token, options=options,
                tool_timeout_s=tool_timeout_s, max_output_chars=max_output_chars,
            )  # fmt: skip
        sandbox_id = record.id if record is not None else str(sandbox)
        return cls._resume_local(sandbox_id, state_dir, config, tool_timeout_s, max_output_chars)

    @classmethod
    def _resume_local(
        cls,
        sandbox_id: str,
        state_dir: Path | None,
        config: LocalSandboxConfig | None,
        tool_timeout_s: float,
        max_output_chars: int,
    ) -> Opening[Self]:
        from sandfleet.backends.local import LocalBackend, resume_local

        async def resume() -> Self:
            opened, resumed_with = await resume_local(sandbox_id, state_dir, config)
            backend = LocalBackend(resumed_with)  # its forks are opened like it

            async def open_more(count: int) -> list[Self]:
                return await cls._open_many(backend, count, tool_timeout_s, max_output_chars)

            return cls.from_opened(
                opened, tool_timeout_s=tool_timeout_s, max_output_chars=max_output_chars,
                opener=open_more,
            )  # fmt: skip

        return Opening(resume, _close_one)

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
    ) -> Opening[ClusterSandbox]:
        """A sandbox on Kubernetes, Ready and connected, claimed through the sandfleet gateway.

        `sandbox = await Sandbox.on_cluster("ns", pool="py312")`, then `call_tool` as
        anywhere; `await sandbox.close()` (or `async with Sandbox.on_cluster(...) as
        sandbox:`) releases the session, and the operator reclaims its pod. The gateway is
        found from `gateway`, SANDFLEET_GATEWAY or the kubeconfig, the caller's token from
        `token`, SANDFLEET_GATEWAY_TOKEN or the kubeconfig; `options` (ClusterOptions) give
        the sandbox's env, files, lifecycle, egress and how long a cold start may take.
        `claim_id` makes the claim idempotent (see on_cluster_many). Gateway failures raise
        GatewayError subclasses (GatewayAuthError, QuotaExceededError, GatewayStartError...).

        To create the SandboxSession with your own Kubernetes rights and talk to the pod IP
        instead (admins on the node network): `ClusterSandbox.open(ClusterBackend(...))`.
        """

        async def claim_one() -> ClusterSandbox:
            request = _gateway_request(
                namespace, pool=pool, template=template, gateway=gateway, token=token,
                options=options, claim_id=claim_id,
            )  # fmt: skip
            (sandbox,) = await _claim(request, 1, tool_timeout_s, max_output_chars)
            return sandbox

        return Opening(claim_one, _close_one)

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
    ) -> Opening[list[ClusterSandbox]]:
        """`count` sandboxes from one gateway Claim (all or none), e.g. an RL batch; the
        arguments are on_cluster's, and each sandbox's close releases its own session.
        `claim_id` makes the claim idempotent: repeating it with the same id (after a lost
        answer or a timeout) returns the same sessions instead of claiming more. Forks of
        these sandboxes come from new claims of the same request (without the id)."""

        async def claim() -> list[ClusterSandbox]:
            request = _gateway_request(
                namespace, pool=pool, template=template, gateway=gateway, token=token,
                options=options, claim_id=claim_id,
            )  # fmt: skip
            return await _claim(request, count, tool_timeout_s, max_output_chars)

        return Opening(claim, close_all)

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
    ) -> Opening[ClusterSandbox]:
        """An existing SandboxSession (made with kubectl, say) through the gateway's Connect,
        once it is Ready (waiting at most `timeout_s`). Closing it leaves the session as it
        is; its lifecycle (or `kubectl delete`) ends it. Of `options`, only the kubeconfig,
        its context and the paths apply."""

        async def connect() -> ClusterSandbox:
            from sandfleet.backends.gateway import GatewayBackend

            request = _gateway_request(
                namespace, pool=None, template=None, gateway=gateway, token=token,
                options=options, claim_id=None,
            )  # fmt: skip
            opened = await GatewayBackend(request).connect(name, timeout_s)
            return ClusterSandbox.from_opened(
                opened, tool_timeout_s=tool_timeout_s, max_output_chars=max_output_chars
            )

        return Opening(connect, _close_one)


class ClusterSandbox(Sandbox):
    """A Sandbox backed by a SandboxSession; close() releases (deletes) the session, and the
    operator then reclaims its pod (a connect_session sandbox leaves it alone)."""

    def __init__(
        self, client: RuntimeClient, *, session: SessionState | GatewaySandboxInfo, **kwargs: Any
    ) -> None:
        super().__init__(client, **kwargs)
        self.session = session
        """The session: as the gateway handed it out (name, pod, warm), or, opened from a
        ClusterBackend, as it was when it became Ready (name, pod, node, pool)."""

    @classmethod
    def from_opened(
        cls,
        opened: OpenedSandbox[Any],
        *,
        tool_timeout_s: float = 0,
        max_output_chars: int = 0,
        opener: SandboxOpener | None = None,
    ) -> Self:
        """The sandbox a gateway or cluster backend opened (`opened.details` is its session)."""
        return cls(
            opened.client,
            session=opened.details,
            paths=opened.paths,
            on_close=opened.close,
            tool_timeout_s=tool_timeout_s,
            max_output_chars=max_output_chars,
            opener=opener,
            suspender=opened.suspend,
        )

    @property
    def name(self) -> str:
        return self.session.name

    @property
    def namespace(self) -> str:
        return self.session.namespace


def _gateway_request(
    namespace: str | None,
    *,
    pool: str | None,
    template: str | None,
    gateway: str | None,
    token: str | None,
    options: ClusterOptions | None,
    claim_id: str | None,
) -> GatewaySandboxRequest:
    from sandfleet.backends.gateway import GatewaySandboxRequest

    given = options or ClusterOptions()
    return GatewaySandboxRequest(
        namespace, pool=pool, template=template, env=given.env, files=given.files,
        lifecycle=given.lifecycle, egress=given.egress, generate_name=given.generate_name,
        timeout_s=given.ready_timeout_s, gateway=gateway, token=token,
        kubeconfig=given.kubeconfig, context=given.context, paths=given.paths,
        claim_id=claim_id,
    )  # fmt: skip


async def _claim(
    request: GatewaySandboxRequest, count: int, tool_timeout_s: float, max_output_chars: int
) -> list[ClusterSandbox]:
    """`count` sandboxes from one gateway claim; their forks come from further claims of the
    same request (pool or template, namespace, gateway and caller: never another tenant)."""
    from sandfleet.backends.gateway import GatewayBackend

    backend: GatewayBackend = GatewayBackend(request)

    async def open_more(more: int) -> list[ClusterSandbox]:
        # A new claim: the first one's id would hand back the first one's sessions.
        again = dataclasses.replace(request, claim_id=None)
        return await _claim(again, more, tool_timeout_s, max_output_chars)

    opened = await backend.open_many(count)
    return [
        ClusterSandbox.from_opened(
            each, tool_timeout_s=tool_timeout_s, max_output_chars=max_output_chars, opener=open_more
        )
        for each in opened
    ]


def _resume_session(
    name: str,
    namespace: str | None,
    *,
    gateway: str | None,
    token: str | None,
    options: ClusterOptions | None,
    tool_timeout_s: float,
    max_output_chars: int,
) -> Opening[ClusterSandbox]:
    """Sandbox.resume of a cluster session: Connect through the gateway (which resumes it),
    owning the session. It cannot fork (its pool or template is not known here)."""

    async def resume() -> ClusterSandbox:
        from sandfleet.backends.gateway import GatewayBackend

        request = _gateway_request(
            namespace, pool=None, template=None, gateway=gateway, token=token,
            options=options, claim_id=None,
        )  # fmt: skip
        opened = await GatewayBackend(request).resume(name)
        return ClusterSandbox.from_opened(
            opened, tool_timeout_s=tool_timeout_s, max_output_chars=max_output_chars
        )

    return Opening(resume, _close_one)


async def _close_one(sandbox: SandboxCore) -> None:
    await sandbox.close()


async def _all_or_none(results: Sequence[SandboxCore | BaseException]) -> list[Any]:
    """The sandboxes, or (after closing the ones that opened) the first failure."""
    opened = [r for r in results if not isinstance(r, BaseException)]
    failures = [r for r in results if isinstance(r, BaseException)]
    if failures:
        await asyncio.shield(close_all(opened))
        raise failures[0]
    return opened
