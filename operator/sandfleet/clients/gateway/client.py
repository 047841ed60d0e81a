"""GatewayClient: async gRPC client of the gateway's GatewayService (claim, connect, release,
suspend)."""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Awaitable, Callable, Mapping, Sequence
from types import TracebackType
from typing import Any, Self, TypeVar

import grpc

from sandfleet.api import SUSPEND_REASON_METADATA, EgressMode, LifecycleSpec, Reason
from sandfleet.clients.grpc_channel import Tls, open_channel, retry_service_config
from sandfleet.clients.shared_channels import SharedChannels
from sandfleet.errors import (
    GatewayAuthError,
    GatewayError,
    GatewayStartError,
    GatewayUnreachableError,
    QuotaExceededError,
    SandfleetError,
    SnapshotTooLargeError,
    SuspendError,
)
from sandfleet.logs import get_logger
from sandfleet_proto.gateway.v1 import gateway_service_pb2 as gateway_pb
from sandfleet_proto.gateway.v1 import gateway_service_pb2_grpc as gateway_grpc

__all__ = ["GatewayClient", "GatewaySandboxInfo", "GatewaySnapshot", "Tls"]

log = get_logger(__name__)

T = TypeVar("T")

_SERVICE = "sandfleet.gateway.v1.GatewayService"
# Connect only reads and Release deletes what may already be gone: both are safe to repeat
# when the gateway never answered. Claim is not in the list: a Claim the gateway received
# may have started sandboxes, so only grpc's own transparent retry (of a call that never
# left this process) applies to it.
_SERVICE_CONFIG = retry_service_config([], methods=[f"{_SERVICE}/Connect", f"{_SERVICE}/Release"])
_DEADLINE_MARGIN_S = 30.0
"""Beyond a claim's or connect's own timeout: the gateway answers UNAVAILABLE itself first."""
_DEFAULT_CLAIM_WAIT_S = 300.0
"""The deadline of a claim that leaves the cold-start timeout to the gateway."""
_DEFAULT_SUSPEND_WAIT_S = 300.0
"""The deadline of a suspend that leaves its wait to the gateway (its default)."""
_SUSPEND_REFUSALS = frozenset(
    {
        grpc.StatusCode.FAILED_PRECONDITION,
        grpc.StatusCode.UNAVAILABLE,
        grpc.StatusCode.DEADLINE_EXCEEDED,
    }
)


@dataclasses.dataclass(frozen=True, slots=True)
class GatewaySandboxInfo:
    """One sandbox the gateway handed out: a Ready SandboxSession and its runtime token."""

    namespace: str
    name: str
    token: str
    """The session's runtime token: the bearer token of its proxied runtime calls."""
    pod: str
    warm: bool
    """Claimed from a pool's idle sandboxes (False: started cold)."""
    workdir: str
    """The sandbox's working directory (the pod's workdir; `working_dir` on the wire)."""

    @property
    def working_dir(self) -> str:
        """Deprecated: `workdir` (one spelling in code, issue #21)."""
        warnings.warn(
            "GatewaySandboxInfo.working_dir is deprecated: use workdir",
            DeprecationWarning,
            stacklevel=2,
        )
        return self.workdir

    @property
    def session(self) -> str:
        """ "namespace/name": the `x-sandfleet-session` value of its runtime calls."""
        return f"{self.namespace}/{self.name}"

    @classmethod
    def from_message(cls, message: gateway_pb.ClaimedSandbox) -> GatewaySandboxInfo:
        return cls(
            namespace=message.namespace,
            name=message.name,
            token=message.token,
            pod=message.pod,
            warm=message.warm,
            workdir=message.working_dir,
        )


@dataclasses.dataclass(frozen=True, slots=True)
class GatewaySnapshot:
    """A session the gateway suspended: its snapshot, verified when stored."""

    namespace: str
    name: str
    size_bytes: int
    sha256: str
    suspended_at: float
    """When it was stored (Unix time)."""
    processes_kept: bool
    message: str
    """The Suspended condition's message (what was stored; processes were not kept)."""


class GatewayClient:
    """One channel to the gateway; every call carries the caller's Kubernetes bearer token.

    Failures raise GatewayError subclasses: GatewayAuthError (token or RBAC),
    QuotaExceededError, GatewayStartError (no sandbox in time), GatewayUnreachableError
    (nothing answers at the address), GatewayError with the status code otherwise.
    """

    def __init__(
        self,
        address: str,
        token: str,
        *,
        tls: Tls | None = None,
        rpc_timeout_s: float = 30.0,
        channel: grpc.aio.Channel | None = None,
    ) -> None:
        """`channel`: an open one to `address` that others share (see open_gateway_channel),
        which close() leaves open; None: the client opens (and closes) its own."""
        self.address = address
        self.tls = tls
        self._metadata = (("authorization", f"Bearer {token}"),)
        self._rpc_timeout_s = rpc_timeout_s
        self._owns_channel = channel is None
        self._channel = channel or open_gateway_channel(address, tls)
        self._stub = gateway_grpc.GatewayServiceStub(self._channel)

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    async def close(self) -> None:
        if self._owns_channel:
            await self._channel.close(grace=None)

    async def claim(
        self,
        namespace: str,
        *,
        pool: str | None = None,
        template: str | None = None,
        count: int = 1,
        env: Mapping[str, str] | None = None,
        files: Mapping[str, str | bytes] | None = None,
        lifecycle: LifecycleSpec | None = None,
        generate_name: str = "",
        egress: EgressMode | str | None = None,
        timeout_s: float = 0,
        claim_id: str | None = None,
    ) -> list[GatewaySandboxInfo]:
        """`count` Ready sandboxes in `namespace`, all or none: warm from `pool` while it
        has idle ones, cold from `template` (or the operator's default image) otherwise.

        `files` maps sandbox paths (absolute, or relative to the working directory) to their
        content; `timeout_s` bounds cold starts (0: the gateway's default). `claim_id` makes
        the claim idempotent: calling again with the same id (after a lost answer, a
        timeout) returns the same sessions instead of claiming new ones (the proto's
        ClaimRequest.claim_id says how).
        """
        request = gateway_pb.ClaimRequest(
            namespace=namespace,
            pool=pool or "",
            template=template or "",
            count=count,
            env=dict(env or {}),
            files=[
                gateway_pb.InputFile(
                    path=path, content=content.encode() if isinstance(content, str) else content
                )
                for path, content in (files or {}).items()
            ],
            lifecycle=_lifecycle(lifecycle),
            generate_name=generate_name,
            egress=_egress(egress),
            timeout_seconds=timeout_s,
            claim_id=claim_id or "",
        )
        deadline = (timeout_s or _DEFAULT_CLAIM_WAIT_S) + _DEADLINE_MARGIN_S
        response = await self._call(
            lambda: self._stub.Claim(request, metadata=self._metadata, timeout=deadline)
        )
        claimed = [GatewaySandboxInfo.from_message(s) for s in response.sandboxes]
        log.info(
            "gateway_claimed",
            namespace=namespace,
            sessions=[s.name for s in claimed],
            warm=sum(s.warm for s in claimed),
        )
        return claimed

    async def connect(self, namespace: str, name: str, timeout_s: float = 0) -> GatewaySandboxInfo:
        """An existing session (made with kubectl, say) once it is Ready, waiting at most
        `timeout_s` for that (0: it must be Ready now)."""
        request = gateway_pb.ConnectRequest(
            namespace=namespace, name=name, timeout_seconds=timeout_s
        )
        response = await self._call(
            lambda: self._stub.Connect(
                request, metadata=self._metadata, timeout=timeout_s + _DEADLINE_MARGIN_S
            )
        )
        return GatewaySandboxInfo.from_message(response.sandbox)

    async def release(self, namespace: str, names: Sequence[str]) -> int:
        """Delete the sessions (names already gone are fine); returns how many were deleted."""
        request = gateway_pb.ReleaseRequest(namespace=namespace, names=list(names))
        response = await self._call(
            lambda: self._stub.Release(
                request, metadata=self._metadata, timeout=self._rpc_timeout_s
            )
        )
        log.info("gateway_released", namespace=namespace, names=list(names))
        return response.released

    async def suspend(self, namespace: str, name: str, timeout_s: float = 0) -> GatewaySnapshot:
        """Suspend the session (spec.suspend) and wait, at most `timeout_s` (0: the gateway's
        default), until it is; a Suspended one answers at once. SuspendError (the sandbox
        runs on; SnapshotTooLargeError over the size limit) when it is not suspended."""
        request = gateway_pb.SuspendRequest(
            namespace=namespace, name=name, timeout_seconds=timeout_s
        )
        deadline = (timeout_s or _DEFAULT_SUSPEND_WAIT_S) + _DEADLINE_MARGIN_S
        try:
            call = self._stub.Suspend(request, metadata=self._metadata, timeout=deadline)
            response = await call
        except grpc.aio.AioRpcError as error:
            raise self._suspend_error(error) from error
        snapshot = response.snapshot
        log.info("gateway_suspended", session=f"{namespace}/{name}", bytes=snapshot.size_bytes)
        return GatewaySnapshot(
            namespace=response.namespace,
            name=response.name,
            size_bytes=snapshot.size_bytes,
            sha256=snapshot.sha256,
            suspended_at=snapshot.suspended_at,
            processes_kept=snapshot.processes_kept,
            message=snapshot.message,
        )

    def _suspend_error(self, error: grpc.aio.AioRpcError) -> SandfleetError:
        """A refused Suspend as SuspendError (the operator's reason decides the class); a
        gateway that was not reached, a denial or a missing session as for any call."""
        code = error.code()
        answered = code != grpc.StatusCode.UNAVAILABLE or self._connected()
        if answered and code in _SUSPEND_REFUSALS:
            trailing: Any = error.trailing_metadata() or ()  # pairs; grpc's stubs say otherwise
            reason = next((str(v) for k, v in trailing if k == SUSPEND_REASON_METADATA), "")
            text = f"{error.details() or code.name} (gateway {self.address}: {code.name})"
            if reason == Reason.SNAPSHOT_TOO_LARGE:
                return SnapshotTooLargeError(text)
            return SuspendError(text)
        return self._translate(error)

    async def _call(self, call: Callable[[], Awaitable[T]]) -> T:
        try:
            return await call()
        except grpc.aio.AioRpcError as error:
            raise self._translate(error) from error

    def _translate(self, error: grpc.aio.AioRpcError) -> GatewayError:
        code = error.code()
        details = error.details() or code.name
        if code == grpc.StatusCode.UNAVAILABLE and not self._connected():
            scheme = "TLS" if self.tls else "plaintext"
            return GatewayUnreachableError(
                f"no gateway answers at {self.address} ({details}): check the address "
                f"(--gateway, SANDFLEET_GATEWAY or the kubeconfig) and that it serves {scheme}",
                code=code.name,
            )
        text = f"{details} (gateway {self.address}: {code.name})"
        if code in (grpc.StatusCode.UNAUTHENTICATED, grpc.StatusCode.PERMISSION_DENIED):
            return GatewayAuthError(text, code=code.name)
        if code == grpc.StatusCode.RESOURCE_EXHAUSTED:
            return QuotaExceededError(text, code=code.name)
        if code in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED):
            return GatewayStartError(text, code=code.name)
        return GatewayError(text, code=code.name)

    def _connected(self) -> bool:
        """Whether the channel reached the gateway: an UNAVAILABLE on a connected channel is
        the gateway's own answer, on any other it means nothing answered."""
        return self._channel.get_state() == grpc.ChannelConnectivity.READY


GATEWAY_CHANNELS: SharedChannels[grpc.aio.Channel] = SharedChannels()
"""The process's channels to gateways, shared by GatewayBackend's claims (gateway_channels)."""


def open_gateway_channel(address: str, tls: Tls | None) -> grpc.aio.Channel:
    return open_channel(address, service_config=_SERVICE_CONFIG, tls=tls)


def _egress(value: EgressMode | str | None) -> str:
    """spec.network.egress by its name in any case ("internet" too); "" leaves the default."""
    if not value:
        return ""
    for mode in EgressMode:
        if mode.value.lower() == str(value).lower():
            return mode.value
    names = ", ".join(mode.value for mode in EgressMode)
    raise ValueError(f"egress must be one of {names}, not {value!r}")


def _lifecycle(spec: LifecycleSpec | None) -> gateway_pb.Lifecycle:
    if spec is None:
        return gateway_pb.Lifecycle()
    return gateway_pb.Lifecycle(
        active_deadline_seconds=spec.active_deadline_seconds or 0,
        idle_timeout_seconds=spec.idle_timeout_seconds or 0,
        ttl_seconds_after_finished=spec.ttl_seconds_after_finished or 0,
    )
