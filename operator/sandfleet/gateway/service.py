"""The GatewayService servicer: authenticate, authorize, check, count, then the claim path."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Awaitable, Callable
from typing import Any, NoReturn, Protocol, TypeVar

import grpc
import grpc.aio

from sandfleet.api import SUSPEND_REASON_METADATA
from sandfleet.errors import QuotaExceededError, SandfleetError
from sandfleet.gateway.auth import (
    Authenticator,
    AuthError,
    AuthUnavailableError,
    Caller,
    PermissionDeniedError,
    UnauthenticatedError,
    bearer_token,
)
from sandfleet.gateway.claim_ids import planned_session_names
from sandfleet.gateway.claim_types import Claimed, ClaimError, ClaimFailure, ClaimSpec
from sandfleet.gateway.claims import Resume
from sandfleet.gateway.metrics import GatewayMetrics
from sandfleet.gateway.quotas import Quotas
from sandfleet.gateway.requests import (
    InvalidRequestError,
    check_name,
    check_namespace,
    check_timeout,
    claim_spec,
)
from sandfleet.gateway.resume import Resumer
from sandfleet.gateway.routes import SessionRoutes
from sandfleet.gateway.suspends import SUSPEND_WAIT_S, Suspended, SuspendRefusedError
from sandfleet.logs import get_logger
from sandfleet_proto.gateway.v1 import gateway_service_pb2 as gateway_pb
from sandfleet_proto.gateway.v1 import gateway_service_pb2_grpc as gateway_grpc

log = get_logger(__name__)

Context = grpc.aio.ServicerContext[Any, Any]
T = TypeVar("T")

INTERNAL_MESSAGE = "gateway error, see its log"

_FAILURE_CODES = {
    ClaimFailure.INVALID: grpc.StatusCode.INVALID_ARGUMENT,
    ClaimFailure.NOT_FOUND: grpc.StatusCode.NOT_FOUND,
    ClaimFailure.UNAVAILABLE: grpc.StatusCode.UNAVAILABLE,
}
_FAILURE_RESULTS = {
    ClaimFailure.INVALID: "invalid",
    ClaimFailure.NOT_FOUND: "not_found",
    ClaimFailure.UNAVAILABLE: "unavailable",
}


class ClaimPath(Protocol):
    """What the servicer needs of sandfleet.gateway.claims.Claimer."""

    async def claim(self, spec: ClaimSpec) -> list[Claimed]: ...

    async def connect(
        self, namespace: str, name: str, timeout_s: float, *, resume: Resume | None = None
    ) -> Claimed: ...

    async def release(self, namespace: str, names: list[str]) -> int: ...


SuspendPath = Callable[[str, str, float], Awaitable[Suspended]]
"""Suspends a session (namespace, name, how long to wait): suspends.suspend_session."""


class _RefusedError(SandfleetError):
    """End the call with this status; `result` is the claims metric's label."""

    def __init__(self, code: grpc.StatusCode, message: str, result: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.result = result


def suspend_response(done: Suspended) -> gateway_pb.SuspendResponse:
    snapshot = done.snapshot
    when = snapshot.suspended_time.timestamp() if snapshot.suspended_time else 0.0
    return gateway_pb.SuspendResponse(
        namespace=done.namespace,
        name=done.name,
        snapshot=gateway_pb.SessionSnapshot(
            size_bytes=snapshot.size_bytes,
            sha256=snapshot.sha256,
            suspended_at=when,
            processes_kept=snapshot.processes_kept,
            message=done.message,
        ),
    )


def sandbox_message(claimed: Claimed) -> gateway_pb.ClaimedSandbox:
    return gateway_pb.ClaimedSandbox(
        namespace=claimed.namespace,
        name=claimed.name,
        token=claimed.token,
        pod=claimed.pod,
        warm=claimed.warm,
        working_dir=claimed.workdir,
    )


class GatewayServicer(gateway_grpc.GatewayServiceServicer):
    def __init__(
        self,
        *,
        auth: Authenticator,
        claimer: ClaimPath,
        quotas: Quotas,
        routes: SessionRoutes,
        metrics: GatewayMetrics,
        default_timeout_s: float,
        namespaces: tuple[str, ...] = (),
        resumer: Resumer | None = None,
        suspend: SuspendPath | None = None,
    ) -> None:
        self._auth = auth
        self._claimer = claimer
        self._quotas = quotas
        self._routes = routes
        self._resumer = resumer
        self._suspend = suspend
        self._metrics = metrics
        self._default_timeout_s = default_timeout_s
        self._namespaces = namespaces

    async def Claim(
        self, request: gateway_pb.ClaimRequest, context: Context
    ) -> gateway_pb.ClaimResponse:
        started = time.monotonic()

        async def claim() -> gateway_pb.ClaimResponse:
            caller = await self._caller(context, "create", request.namespace)
            spec = claim_spec(
                request,
                caller=caller.username,
                default_timeout_s=self._default_timeout_s,
                served=self._namespaces,
            )
            # The names first: the quota ledger records what the claim is about to create.
            spec = dataclasses.replace(spec, names=planned_session_names(spec))
            async with self._quotas.reserve(spec.namespace, spec.names):
                claimed = await self._claimer.claim(spec)
                for sandbox in claimed:
                    self._routes.record(sandbox)  # before the reservation ends: no gap
            warm = bool(claimed) and all(sandbox.warm for sandbox in claimed)
            self._metrics.claim_finished(
                "ok", pool=spec.pool or "", warm=warm, seconds=time.monotonic() - started
            )
            log.info(
                "gateway_claimed",
                namespace=spec.namespace,
                caller=caller.username,
                sessions=[sandbox.name for sandbox in claimed],
                warm=warm,
                duration_ms=round((time.monotonic() - started) * 1000, 1),
            )
            return gateway_pb.ClaimResponse(sandboxes=[sandbox_message(c) for c in claimed])

        return await self._answer(context, "Claim", claim, count_claims=True)

    async def Connect(
        self, request: gateway_pb.ConnectRequest, context: Context
    ) -> gateway_pb.ConnectResponse:
        async def connect() -> gateway_pb.ConnectResponse:
            await self._caller(context, "create", request.namespace)
            check_namespace(request.namespace, self._namespaces)
            name = check_name("name", request.name)
            timeout_s = check_timeout("timeout_seconds", request.timeout_seconds)
            resume = self._resumer.request if self._resumer is not None else None
            claimed = await self._claimer.connect(request.namespace, name, timeout_s, resume=resume)
            self._routes.record(claimed)
            return gateway_pb.ConnectResponse(sandbox=sandbox_message(claimed))

        return await self._answer(context, "Connect", connect)

    async def Suspend(
        self, request: gateway_pb.SuspendRequest, context: Context
    ) -> gateway_pb.SuspendResponse:
        """spec.suspend through the front door: `patch sandboxsessions` in the namespace, as
        kubectl would need; the answer waits for phase Suspended (suspends.py)."""

        async def suspend() -> gateway_pb.SuspendResponse:
            caller = await self._caller(context, "patch", request.namespace)
            check_namespace(request.namespace, self._namespaces)
            name = check_name("name", request.name)
            timeout_s = check_timeout("timeout_seconds", request.timeout_seconds)
            if self._suspend is None:
                raise SuspendRefusedError(
                    grpc.StatusCode.UNIMPLEMENTED, "this gateway does not suspend sessions"
                )
            started = time.monotonic()
            done = await self._suspend(request.namespace, name, timeout_s or SUSPEND_WAIT_S)
            log.info(
                "gateway_suspended",
                session=f"{request.namespace}/{name}",
                caller=caller.username,
                bytes=done.snapshot.size_bytes,
                duration_ms=round((time.monotonic() - started) * 1000, 1),
            )
            return suspend_response(done)

        return await self._answer(context, "Suspend", suspend)

    async def Release(
        self, request: gateway_pb.ReleaseRequest, context: Context
    ) -> gateway_pb.ReleaseResponse:
        async def release() -> gateway_pb.ReleaseResponse:
            caller = await self._caller(context, "delete", request.namespace)
            check_namespace(request.namespace, self._namespaces)
            names = [check_name(f"names[{i}]", n) for i, n in enumerate(request.names)]
            released = await self._claimer.release(request.namespace, names) if names else 0
            if names:
                await self._quotas.released(request.namespace, names)
            log.info(
                "gateway_released",
                namespace=request.namespace,
                caller=caller.username,
                asked=len(names),
                released=released,
            )
            return gateway_pb.ReleaseResponse(released=released)

        return await self._answer(context, "Release", release)

    async def _caller(self, context: Context, verb: str, namespace: str) -> Caller:
        # The namespace's shape is checked first: a SubjectAccessReview needs a real one.
        check_namespace(namespace)
        try:
            caller = await self._auth.authenticate(bearer_token(context.invocation_metadata()))
            await self._auth.authorize(caller, verb, namespace)
        except UnauthenticatedError as error:
            self._metrics.auth_failed("unauthenticated")
            raise _RefusedError(
                grpc.StatusCode.UNAUTHENTICATED, str(error), "unauthenticated"
            ) from None
        except PermissionDeniedError as error:
            self._metrics.auth_failed("denied")
            raise _RefusedError(grpc.StatusCode.PERMISSION_DENIED, str(error), "denied") from None
        except AuthUnavailableError as error:
            self._metrics.auth_failed("unavailable")
            raise _RefusedError(grpc.StatusCode.UNAVAILABLE, str(error), "unavailable") from None
        return caller

    async def _answer(
        self,
        context: Context,
        method: str,
        work: Callable[[], Awaitable[T]],
        *,
        count_claims: bool = False,
    ) -> T:
        """Run the call; every failure ends it with a status and a message, never a trace."""
        try:
            return await work()
        except _RefusedError as refused:
            code, message, result = refused.code, refused.message, refused.result
        except SuspendRefusedError as error:
            code, message, result = error.code, str(error), "refused"
            if error.reason:
                context.set_trailing_metadata(((SUSPEND_REASON_METADATA, error.reason),))
        except InvalidRequestError as error:
            code, message, result = grpc.StatusCode.INVALID_ARGUMENT, str(error), "invalid"
        except QuotaExceededError as error:
            self._metrics.quota_rejected(error.namespace)
            code, message, result = grpc.StatusCode.RESOURCE_EXHAUSTED, str(error), "quota"
        except ClaimError as error:
            code, message = _FAILURE_CODES[error.failure], str(error)
            result = _FAILURE_RESULTS[error.failure]
        except AuthError as error:  # a subclass the handlers above do not know yet
            code, message, result = grpc.StatusCode.UNAUTHENTICATED, str(error), "unauthenticated"
        except Exception:
            log.exception("gateway_call_failed", method=method)
            code, message, result = grpc.StatusCode.INTERNAL, INTERNAL_MESSAGE, "error"
        if count_claims:
            self._metrics.claim_finished(result)
        log.info("gateway_call_refused", method=method, code=code.name, message=message)
        await _abort(context, code, message)


async def _abort(context: Context, code: grpc.StatusCode, message: str) -> NoReturn:
    await context.abort(code, message)
    raise AssertionError("context.abort returned")  # pragma: no cover - abort always raises
