"""The public Sandbox: SandboxCore plus the ways to open one (local, on a cluster, connect).

This module sits above the core and the backends: it imports them, and none of them imports
it. The backends load on first use, so `import sandfleet.sandbox.facade` stays cheap.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from collections.abc import AsyncIterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Self

from sandfleet.clients.runtime.client import RuntimeClient
from sandfleet.sandbox.backend import OpenedSandbox, SandboxBackend, SandboxPaths
from sandfleet.sandbox.core import SandboxCore, SandboxOpener, close_all

if TYPE_CHECKING:
    from sandfleet.api import EgressMode, LifecycleSpec, PodTemplate
    from sandfleet.backends.gateway import GatewayBackend
    from sandfleet.backends.local import LocalSandboxConfig
    from sandfleet.clients.gateway.client import GatewaySandboxInfo
    from sandfleet.cluster.status import SessionState
    from sandfleet.kube import KubeClient

__all__ = ["ClusterSandbox", "Sandbox", "SandboxPaths"]


class Sandbox(SandboxCore):
    """One sandbox: `call_tool` gives the model's view, typed helpers give the program's.

    Open one with `Sandbox.local()`, `Sandbox.on_cluster(...)` (or `on_cluster_many`,
    `connect_session`: through the gateway), `Sandbox.connect(...)`, or
    `Sandbox.open(backend)` for any SandboxBackend. Raises SandboxLostError when the runtime
    agent is gone; never for a mistake the model made.
    """

    @classmethod
    def connect(
        cls, address: str, token: str, *, paths: SandboxPaths | None = None, **kwargs: Any
    ) -> Self:
        """A sandbox whose runtime agent is already running at `address`: HOST:PORT (e.g. a
        pod IP) or unix:PATH (a local sandbox's socket)."""
        return cls(RuntimeClient(address, token), paths=paths, **kwargs)

    @classmethod
    async def open(
        cls,
        backend: SandboxBackend[Any],
        *,
        tool_timeout_s: float = 0,
        max_output_chars: int = 0,
    ) -> Self:
        """A sandbox from any backend; closing it gives the sandbox back to that backend
        (and `fork` opens its forks from the same backend)."""
        opened = await backend.open()

        async def open_more(count: int) -> list[Self]:
            results = await asyncio.gather(
                *(cls.open(backend, tool_timeout_s=tool_timeout_s,
                           max_output_chars=max_output_chars) for _ in range(count)),
                return_exceptions=True,
            )  # fmt: skip
            return await _all_or_none(results)

        return cls(
            opened.client,
            paths=opened.paths,
            on_close=opened.close,
            tool_timeout_s=tool_timeout_s,
            max_output_chars=max_output_chars,
            opener=open_more,
        )

    @classmethod
    @contextlib.asynccontextmanager
    async def local(
        cls,
        config: LocalSandboxConfig | None = None,
        *,
        tool_timeout_s: float = 0,
        max_output_chars: int = 0,
    ) -> AsyncIterator[Self]:
        """Start a local runtime agent; reclaim it and every process below it on exit."""
        from sandfleet.backends.local import LocalBackend, LocalSandboxConfig

        backend = LocalBackend(config or LocalSandboxConfig())
        sandbox = await cls.open(
            backend, tool_timeout_s=tool_timeout_s, max_output_chars=max_output_chars
        )
        try:
            yield sandbox
        finally:
            await sandbox.close()

    @staticmethod
    async def on_cluster(
        namespace: str | None = None,
        *,
        pool: str | None = None,
        template: str | None = None,
        env: Mapping[str, str] | None = None,
        files: Mapping[str, str] | None = None,
        lifecycle: LifecycleSpec | None = None,
        egress: EgressMode | str | None = None,
        generate_name: str = "sbx-",
        gateway: str | None = None,
        token: str | None = None,
        kubeconfig: Path | str | None = None,
        context: str | None = None,
        ready_timeout_s: float = 120.0,
        paths: SandboxPaths | None = None,
        tool_timeout_s: float = 0,
        max_output_chars: int = 0,
        direct: bool = False,
        name: str | None = None,
        pod: PodTemplate | None = None,
        kube: KubeClient | None = None,
        address: str | None = None,
        claim_id: str | None = None,
    ) -> ClusterSandbox:
        """A sandbox on Kubernetes, Ready and connected, claimed through the sandfleet gateway.

        `sandbox = await Sandbox.on_cluster("ns", pool="py312")`, then `call_tool` as
        anywhere; `await sandbox.close()` (or `async with sandbox:`) releases the session,
        and the operator reclaims its pod. The gateway is found from `gateway`,
        SANDFLEET_GATEWAY or the kubeconfig, the caller's token from `token`,
        SANDFLEET_GATEWAY_TOKEN or the kubeconfig (sandfleet.clients.gateway.target);
        `ready_timeout_s` bounds a cold start. Gateway failures raise GatewayError
        subclasses (GatewayAuthError, QuotaExceededError, GatewayStartError, ...).

        `direct=True` instead creates the SandboxSession with the caller's own Kubernetes
        rights, reads its token Secret and talks to the pod IP (for admins on the node
        network); only it takes `name`, `pod`, `kube` and `address`, which
        ClusterSandboxRequest (sandfleet.backends.direct) documents. A session that fails before
        Ready then raises SessionFailedError with the operator's reason.
        """
        if direct:
            from sandfleet.backends.direct import ClusterBackend, ClusterSandboxRequest

            request = ClusterSandboxRequest(
                namespace, name=name, generate_name=generate_name, template=template, pool=pool,
                pod=pod, env=env, files=files, lifecycle=lifecycle, egress=egress,
                kubeconfig=kubeconfig, context=context, kube=kube,
                ready_timeout_s=ready_timeout_s, address=address, paths=paths,
            )  # fmt: skip
            opened = await ClusterBackend(request).open()
            return ClusterSandbox.from_opened(
                opened, tool_timeout_s=tool_timeout_s, max_output_chars=max_output_chars
            )
        direct_only = {"name": name, "pod": pod, "kube": kube, "address": address}
        given = [key for key, value in direct_only.items() if value is not None]
        if given:
            raise ValueError(
                f"{', '.join(given)} need direct=True: through the gateway, sandboxes come "
                "from a pool or a template and the gateway names their sessions"
            )
        (sandbox,) = await Sandbox.on_cluster_many(
            1, namespace, pool=pool, template=template, env=env, files=files,
            lifecycle=lifecycle, egress=egress, generate_name=generate_name, gateway=gateway,
            token=token, kubeconfig=kubeconfig, context=context,
            ready_timeout_s=ready_timeout_s, paths=paths, tool_timeout_s=tool_timeout_s,
            max_output_chars=max_output_chars, claim_id=claim_id,
        )  # fmt: skip
        return sandbox

    @staticmethod
    async def on_cluster_many(
        count: int,
        namespace: str | None = None,
        *,
        pool: str | None = None,
        template: str | None = None,
        env: Mapping[str, str] | None = None,
        files: Mapping[str, str] | None = None,
        lifecycle: LifecycleSpec | None = None,
        egress: EgressMode | str | None = None,
        generate_name: str = "sbx-",
        gateway: str | None = None,
        token: str | None = None,
        kubeconfig: Path | str | None = None,
        context: str | None = None,
        ready_timeout_s: float = 120.0,
        paths: SandboxPaths | None = None,
        tool_timeout_s: float = 0,
        max_output_chars: int = 0,
        claim_id: str | None = None,
    ) -> list[ClusterSandbox]:
        """`count` sandboxes from one gateway Claim (all or none), e.g. an RL batch; the
        arguments are on_cluster's, and each sandbox's close releases its own session.
        `claim_id` makes the claim idempotent: repeating it with the same id (after a lost
        answer or a timeout) returns the same sessions instead of claiming more. Forks of
        these sandboxes come from new claims of the same request (without the id)."""
        from sandfleet.backends.gateway import GatewayBackend, GatewaySandboxRequest

        request = GatewaySandboxRequest(
            namespace, pool=pool, template=template, env=env, files=files, lifecycle=lifecycle,
            egress=egress, generate_name=generate_name, timeout_s=ready_timeout_s,
            gateway=gateway, token=token, kubeconfig=kubeconfig, context=context, paths=paths,
            claim_id=claim_id,
        )  # fmt: skip
        return await _claim(
            GatewayBackend(request), count, tool_timeout_s=tool_timeout_s,
            max_output_chars=max_output_chars,
        )  # fmt: skip

    @staticmethod
    async def connect_session(
        name: str,
        namespace: str | None = None,
        *,
        timeout_s: float = 0,
        gateway: str | None = None,
        token: str | None = None,
        kubeconfig: Path | str | None = None,
        context: str | None = None,
        paths: SandboxPaths | None = None,
        tool_timeout_s: float = 0,
        max_output_chars: int = 0,
    ) -> ClusterSandbox:
        """An existing SandboxSession (made with kubectl, say) through the gateway's Connect,
        once it is Ready (waiting at most `timeout_s`). Closing it leaves the session as it
        is; its lifecycle (or `kubectl delete`) ends it."""
        from sandfleet.backends.gateway import GatewayBackend, GatewaySandboxRequest

        request = GatewaySandboxRequest(
            namespace, gateway=gateway, token=token, kubeconfig=kubeconfig, context=context,
            paths=paths,
        )  # fmt: skip
        opened = await GatewayBackend(request).connect(name, timeout_s)
        return ClusterSandbox.from_opened(
            opened, tool_timeout_s=tool_timeout_s, max_output_chars=max_output_chars
        )


class ClusterSandbox(Sandbox):
    """A Sandbox backed by a SandboxSession; close() releases (deletes) the session, and the
    operator then reclaims its pod (a connect_session sandbox leaves it alone)."""

    def __init__(
        self, client: RuntimeClient, *, session: SessionState | GatewaySandboxInfo, **kwargs: Any
    ) -> None:
        super().__init__(client, **kwargs)
        self.session = session
        """The session: as the gateway handed it out (name, pod, warm), or, with
        direct=True, as it was when it became Ready (name, pod, node, pool)."""

    @classmethod
    def from_opened(
        cls,
        opened: OpenedSandbox[SessionState] | OpenedSandbox[GatewaySandboxInfo],
        *,
        tool_timeout_s: float = 0,
        max_output_chars: int = 0,
        opener: SandboxOpener | None = None,
    ) -> ClusterSandbox:
        return cls(
            opened.client,
            session=opened.details,
            paths=opened.paths,
            on_close=opened.close,
            tool_timeout_s=tool_timeout_s,
            max_output_chars=max_output_chars,
            opener=opener,
        )

    @property
    def name(self) -> str:
        return self.session.name

    @property
    def namespace(self) -> str:
        return self.session.namespace


async def _claim(
    backend: GatewayBackend, count: int, *, tool_timeout_s: float, max_output_chars: int
) -> list[ClusterSandbox]:
    """`count` sandboxes from one gateway claim; their forks come from further claims of the
    same request (pool or template, namespace, gateway and caller: never another tenant)."""

    async def open_more(more: int) -> list[ClusterSandbox]:
        # A new claim: the first one's id would hand back the first one's sessions.
        request = dataclasses.replace(backend.request, claim_id=None)
        return await _claim(
            dataclasses.replace(backend, request=request), more,
            tool_timeout_s=tool_timeout_s, max_output_chars=max_output_chars,
        )  # fmt: skip

    opened = await backend.open_many(count)
    return [
        ClusterSandbox.from_opened(
            each,
            tool_timeout_s=tool_timeout_s,
            max_output_chars=max_output_chars,
            opener=open_more,
        )
        for each in opened
    ]


async def _all_or_none(results: Sequence[SandboxCore | BaseException]) -> list[Any]:
    """The sandboxes, or (after closing the ones that opened) the first failure."""
    opened = [r for r in results if not isinstance(r, BaseException)]
    failures = [r for r in results if isinstance(r, BaseException)]
    if failures:
        await asyncio.shield(close_all(opened))
        raise failures[0]
    return opened
