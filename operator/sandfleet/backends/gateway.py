"""GatewayBackend: sandboxes claimed through the sandfleet gateway, used through its proxy.

The caller needs no route to pod IPs and no right to read Secrets: the gateway claims the
sandboxes (warm from a pool when it can), hands out each session's runtime token, and
proxies every runtime call that names the session in `x-sandfleet-session`.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Mapping, Sequence
from pathlib import Path

from sandfleet.api import EgressMode, LifecycleSpec
from sandfleet.clients.gateway.client import (
    GATEWAY_CHANNELS,
    GatewayClient,
    GatewaySandboxInfo,
    GatewaySnapshot,
    open_gateway_channel,
)
from sandfleet.clients.gateway.target import GatewayTarget, resolve_gateway
from sandfleet.clients.runtime.client import RuntimeChannel, RuntimeClient, open_runtime_channel
from sandfleet.clients.shared_channels import ChannelLease
from sandfleet.cluster.session_specs import default_paths
from sandfleet.errors import GatewayError, GatewayUnreachableError
from sandfleet.fleet.manifests import DEFAULT_GENERATE_NAME
from sandfleet.logs import get_logger
from sandfleet.sandbox.backend import OpenedSandbox, SandboxPaths
from sandfleet.sandbox.suspension import PROCESSES_NOTE, SuspendedSandbox

log = get_logger(__name__)

CLAIM_ATTEMPTS = 3
"""Claims with a claim id are sent at most this often while their answer is lost."""
CLAIM_RETRY_DELAY_S = 1.0
"""Pause before the n-th repetition: n times this."""
RESUME_WAIT_S = 120.0
"""How long a resume waits for its session to be Ready when neither the call nor the request
says (the gateway's own bound on resume on access)."""


@dataclasses.dataclass(frozen=True, slots=True)
class GatewaySandboxRequest:
    """Which sandboxes to claim through which gateway."""

    namespace: str | None = None
    """None: the kubeconfig context's namespace (or "default" without a kubeconfig)."""
    pool: str | None = None
    """A SandboxPool: warm sandboxes while it has idle ones, cold ones for the rest."""
    template: str | None = None
    """A SandboxTemplate (cold); neither pool nor template: the operator's default image."""
    env: Mapping[str, str] | None = None
    files: Mapping[str, str | bytes] | None = None
    """Sandbox path (absolute, or relative to the working directory) -> content, placed
    before the claim returns."""
    lifecycle: LifecycleSpec | None = None
    egress: EgressMode | str | None = None
    generate_name: str = DEFAULT_GENERATE_NAME
    timeout_s: float = 0
    """How long cold starts may take (0: the gateway's default)."""
    gateway: str | None = None
    """The gateway's address; None: SANDFLEET_GATEWAY, then the kubeconfig (gateway_target)."""
    token: str | None = None
    """The caller's Kubernetes bearer token; None: SANDFLEET_GATEWAY_TOKEN, then the
    kubeconfig context's."""
    kubeconfig: Path | str | None = None
    context: str | None = None
    target: GatewayTarget | None = None
    """A resolved gateway (then gateway, token, kubeconfig and context are unused)."""
    paths: SandboxPaths | None = None
    """The layout in the sandbox (default: below its working directory)."""
    claim_id: str | None = None
    """Makes the claim idempotent: a claim repeated with the same id (after a lost answer)
    gets the same sessions back (GatewayClient.claim), so the backend repeats it, up to
    CLAIM_ATTEMPTS times, when no gateway answered or the deadline passed."""


@dataclasses.dataclass(frozen=True, slots=True)
class GatewayBackend:
    """A SandboxBackend: `open()` claims one sandbox through the gateway; closing it releases
    the session. `open_many(n)` claims n at once (all or none), for RL and evals."""

    request: GatewaySandboxRequest = dataclasses.field(default_factory=GatewaySandboxRequest)

    async def open(self) -> OpenedSandbox[GatewaySandboxInfo]:
        (opened,) = await self.open_many(1)
        return opened

    async def open_many(self, count: int) -> list[OpenedSandbox[GatewaySandboxInfo]]:
        """`count` sandboxes from one Claim; each one's close releases its own session."""
        if count < 1:
            raise ValueError(f"count must be at least 1, not {count}")
        target = await self.target()
        gateway, lease = await _gateway_on_shared_channel(target)
        shared = _SharedGateway(gateway, lease, users=count)
        request = self.request
        try:
            claimed = await self._claim(gateway, request.namespace or target.namespace, count)
        except BaseException:
            lease.release()
            raise
        return [self._opened(target, shared, info) for info in claimed]

    async def _claim(
        self, gateway: GatewayClient, namespace: str, count: int
    ) -> list[GatewaySandboxInfo]:
        """The Claim; with a claim id, repeated while its answer was lost (nothing answered,
        or the deadline passed), which is safe because the id finds what it already made."""
        request = self.request
        attempts = CLAIM_ATTEMPTS if request.claim_id else 1
        for attempt in range(1, attempts + 1):
            try:
                return await gateway.claim(
                    namespace,
                    pool=request.pool,
                    template=request.template,
                    count=count,
                    env=request.env,
                    files=request.files,
                    lifecycle=request.lifecycle,
                    generate_name=request.generate_name,
                    egress=request.egress,
                    timeout_s=request.timeout_s,
                    claim_id=request.claim_id,
                )
            except GatewayError as error:
                lost = isinstance(error, GatewayUnreachableError) or (
                    error.code == "DEADLINE_EXCEEDED"
                )
                if not lost or attempt == attempts:
                    raise
                log.warning(
                    "gateway_claim_retried", claim_id=request.claim_id, attempt=attempt,
                    error=str(error),
                )  # fmt: skip
                await asyncio.sleep(CLAIM_RETRY_DELAY_S * attempt)
        raise AssertionError("unreachable")  # the loop returns or raises

    async def connect(self, name: str, timeout_s: float = 0) -> OpenedSandbox[GatewaySandboxInfo]:
        """An existing session (made with kubectl, say) in the request's namespace, once it is
        Ready (waiting at most `timeout_s`; a Suspended one is resumed); closing the result
        leaves the session alone."""
        target = await self.target()
        token = await target.token_now()  # may run an exec plugin
        async with GatewayClient(target.address, token, tls=target.tls) as gateway:
            info = await gateway.connect(
                self.request.namespace or target.namespace, name, timeout_s
            )
        client = connect_runtime(target, info)
        paths = self.request.paths or default_paths(info.workdir or None)

        async def suspend(sessions: Sequence[str]) -> SuspendedSandbox:
            record = await self._suspend(target, info)
            await client.close()
            return record

        return OpenedSandbox(
            client=client, paths=paths, close=client.close, details=info, suspend=suspend
        )

    async def resume(self, name: str, timeout_s: float = 0) -> OpenedSandbox[GatewaySandboxInfo]:
        """A Suspended session (or a running one) in the request's namespace, resumed through
        the gateway's Connect (admitted by the namespace's quota: QuotaExceededError when it
        is full) and Ready, waiting at most `timeout_s` (0: the request's timeout_s, else
        RESUME_WAIT_S). The caller owns it as it owned the claimed one: closing the result
        releases the session; suspending it again keeps it."""
        target = await self.target()
        gateway, lease = await _gateway_on_shared_channel(target)
        wait_s = timeout_s or self.request.timeout_s or RESUME_WAIT_S
        try:
            info = await gateway.connect(self.request.namespace or target.namespace, name, wait_s)
        except BaseException:
            lease.release()
            raise
        log.info("gateway_sandbox_resumed", session=info.session, pod=info.pod)
        return self._opened(target, _SharedGateway(gateway, lease, users=1), info)

    async def _suspend(self, target: GatewayTarget, info: GatewaySandboxInfo) -> SuspendedSandbox:
        """The gateway's Suspend of the session, as the SDK's record."""
        gateway, lease = await _gateway_on_shared_channel(target)
        try:
            snapshot = await gateway.suspend(info.namespace, info.name)
        finally:
            lease.release()
        return suspended_record(snapshot)

    async def target(self) -> GatewayTarget:
        """The gateway and identity this backend uses (resolved once per call)."""
        request = self.request
        if request.target is not None:
            return request.target
        return await asyncio.to_thread(
            resolve_gateway,
            request.gateway,
            token=request.token,
            kubeconfig=Path(request.kubeconfig) if request.kubeconfig else None,
            context=request.context,
        )

    def _opened(
        self, target: GatewayTarget, shared: _SharedGateway, info: GatewaySandboxInfo
    ) -> OpenedSandbox[GatewaySandboxInfo]:
        lease = GATEWAY_CHANNELS.lease(
            ("runtime", target.address, target.tls, target.token),
            lambda: open_runtime_channel(target.address, target.tls, target.current_token),
        )
        client = connect_runtime(target, info, channel=lease.channel)

        async def close() -> None:
            try:
                await client.close()
            finally:
                lease.release()
                # Shielded: a cancelled caller must not leave the session (and its pod) behind.
                await asyncio.shield(shared.release(info))

        async def suspend(sessions: Sequence[str]) -> SuspendedSandbox:
            """Suspended, the session is kept (not released): Sandbox.resume brings it back."""
            record = await self._suspend(target, info)
            try:
                await client.close()
            finally:
                lease.release()
                shared.leave()
            return record

        paths = self.request.paths or default_paths(info.workdir or None)
        log.info("gateway_sandbox_ready", session=info.session, pod=info.pod, warm=info.warm)
        return OpenedSandbox(client=client, paths=paths, close=close, details=info, suspend=suspend)


def connect_runtime(
    target: GatewayTarget, info: GatewaySandboxInfo, *, channel: RuntimeChannel | None = None
) -> RuntimeClient:
    """A runtime client to the session's sandbox through the gateway's proxy; its calls
    carry the caller's Kubernetes token as well as the session's runtime token. `channel`:
    a shared one to the gateway (open_runtime_channel with the target's caller token)."""
    return RuntimeClient(
        target.address,
        info.token,
        session=info.session,
        tls=target.tls,
        caller_token=target.current_token,
        channel=channel,
    )


class _SharedGateway:
    """The gateway client of one claim's sandboxes; its channel lease ends with the last."""

    def __init__(
        self, client: GatewayClient, lease: ChannelLease[RuntimeChannel], *, users: int
    ) -> None:
        self.client = client
        self._lease = lease
        self._users = users

    async def release(self, info: GatewaySandboxInfo) -> None:
        try:
            await self.client.release(info.namespace, [info.name])
        finally:
            self.leave()

    def leave(self) -> None:
        """One sandbox is done with the client (released, or suspended and kept)."""
        self._users -= 1
        if self._users == 0:
            self._lease.release()


async def _gateway_on_shared_channel(
    target: GatewayTarget,
) -> tuple[GatewayClient, ChannelLease[RuntimeChannel]]:
    """A client of `target` with the caller's current token, on the process's shared channel
    to that gateway; release the lease when done with it."""
    token = await target.token_now()  # may run an exec plugin
    lease = GATEWAY_CHANNELS.lease(
        ("gateway", target.address, target.tls, target.token),
        lambda: open_gateway_channel(target.address, target.tls),
    )
    return GatewayClient(target.address, token, tls=target.tls, channel=lease.channel), lease


def suspended_record(snapshot: GatewaySnapshot) -> SuspendedSandbox:
    """The SDK's record of a session the gateway suspended (id: the session's name)."""
    return SuspendedSandbox(
        id=snapshot.name,
        size_bytes=snapshot.size_bytes,
        sha256=snapshot.sha256,
        suspended_at=snapshot.suspended_at,
        processes_kept=snapshot.processes_kept,
        note=snapshot.message or PROCESSES_NOTE,
        namespace=snapshot.namespace,
    )
