"""GatewayServer: the gRPC server (GatewayService, the runtime proxy, health) and its HTTP side."""

from __future__ import annotations

import asyncio
import contextlib
import functools
from collections.abc import Callable, Sequence
from typing import Any, Protocol

import grpc
import grpc.aio
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

# `health.aio` is this module re-exported; importing it by name gives mypy its types.
from grpc_health.v1._async import HealthServicer as AsyncHealthServicer

from sandfleet.gateway.auth import Authenticator
from sandfleet.gateway.metrics import GatewayMetrics, serve_http
from sandfleet.gateway.proxy import MAX_MESSAGE_BYTES, ChannelCache, RuntimeProxy
from sandfleet.gateway.quota_ledger import QuotaLedger
from sandfleet.gateway.quotas import Quotas
from sandfleet.gateway.resume import Resumer
from sandfleet.gateway.routes import SessionRoutes
from sandfleet.gateway.service import ClaimPath, GatewayServicer
from sandfleet.gateway.settings import GatewaySettings
from sandfleet.gateway.suspends import suspend_session
from sandfleet.kube import KubeClient
from sandfleet.logs import get_logger
from sandfleet_proto.gateway.v1 import gateway_service_pb2, gateway_service_pb2_grpc

log = get_logger(__name__)

GATEWAY_SERVICE = gateway_service_pb2.DESCRIPTOR.services_by_name["GatewayService"].full_name


class Claimer(ClaimPath, Protocol):
    """sandfleet.gateway.claims.Claimer as the server drives it."""

    hand_over: Callable[[str, grpc.aio.Channel], None] | None
    """Set by the server: where a warm claim's runtime channel goes (the proxy's cache)."""

    async def start(self) -> None: ...

    async def stop(self) -> None: ...

    def pod_address(self, namespace: str, pod: str) -> str | None:
        """A sandbox pod's runtime host:port from the claimer's watch-fed pod index."""
        ...


class GatewayServer:
    """The gateway, startable in-process: `await start()`, `port`, `await stop()`.

    It starts (and stops) the claimer it is given and the session index it builds; it
    does not own the KubeClient.
    """

    def __init__(
        self,
        settings: GatewaySettings,
        *,
        kube: KubeClient,
        claimer: Claimer,
        metrics: GatewayMetrics | None = None,
        interceptors: Sequence[grpc.aio.ServerInterceptor[Any, Any]] = (),
    ) -> None:
        self.settings = settings
        self.interceptors = tuple(interceptors)
        """Server interceptors around every call (control and data plane), e.g. tracing."""
        self.kube = kube
        self.claimer = claimer
        self.metrics = metrics or GatewayMetrics()
        self.routes = SessionRoutes(
            kube,
            settings.namespaces,
            pod_address=claimer.pod_address,
            miss_wait_s=settings.route_wait_seconds,
        )
        self.channels = ChannelCache()
        self.routes.on_gone = self.channels.evict
        claimer.hand_over = self.channels.adopt
        self.metrics.open_sessions = self.routes.active_by_namespace
        self.auth = Authenticator(
            kube,
            token_ttl_s=settings.token_review_ttl_seconds,
            negative_ttl_s=settings.token_review_negative_ttl_seconds,
            access_ttl_s=settings.access_review_ttl_seconds,
            max_entries=settings.auth_cache_entries,
            refresh_ahead=True,
        )
        ledger = (
            QuotaLedger(
                kube,
                settings.quota_ledger_namespace,
                settings.replica,
                hold_s=settings.quota_hold_seconds,
            )
            if settings.quota_ledger_namespace
            else None
        )
        self.quotas = Quotas(
            settings.quota_default,
            settings.quotas,
            self.routes.active,
            known=self._counted,
            ledger=ledger,
        )
        self.resumer = Resumer(kube, self.routes, self.quotas)
        self.health = AsyncHealthServicer()
        self.port = 0
        self.http_port = 0
        self._claimer_started = False
        self._server: grpc.aio.Server | None = None
        self._tasks: list[asyncio.Task[Any]] = []
        self._http: contextlib.AsyncExitStack | None = None

    def _counted(self, namespace: str, name: str) -> bool:
        """The watch shows the session and counts it (or never will): a reservation for it
        must not count it again. A Suspended one is not counted: its resume reserves it."""
        route = self.routes.get(namespace, name)
        return route is not None and route.counted

    @property
    def address(self) -> str:
        """host:port clients dial (127.0.0.1 when listening on every interface)."""
        host = self.settings.host
        return f"{'127.0.0.1' if host in ('0.0.0.0', '::', '') else host}:{self.port}"

    @property
    def ready(self) -> bool:
        """The session index has listed every namespace and the claimer has synced."""
        return self._claimer_started and self.routes.synced.is_set()

    def _build(self) -> grpc.aio.Server:
        server = grpc.aio.server(
            interceptors=self.interceptors,
            options=(
                ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
                ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
            ),
        )
        servicer = GatewayServicer(
            auth=self.auth,
            claimer=self.claimer,
            quotas=self.quotas,
            routes=self.routes,
            resumer=self.resumer,
            suspend=functools.partial(suspend_session, self.kube),
            metrics=self.metrics,
            default_timeout_s=self.settings.cold_start_timeout_seconds,
            namespaces=tuple(self.settings.namespaces),
        )
        gateway_service_pb2_grpc.add_GatewayServiceServicer_to_server(servicer, server)
        proxy = RuntimeProxy(
            self.routes,
            self.channels,
            self.metrics,
            self.auth,
            tuple(self.settings.namespaces),
            resumer=self.resumer,
        )
        server.add_generic_rpc_handlers((proxy,))
        health_pb2_grpc.add_HealthServicer_to_server(self.health, server)
        return server

    def _bind(self, server: grpc.aio.Server) -> int:
        listen = f"{self.settings.host}:{self.settings.port}"
        cert, key = self.settings.tls_cert_file, self.settings.tls_key_file
        try:
            if cert is not None and key is not None:
                pair = (key.read_bytes(), cert.read_bytes())
                return server.add_secure_port(listen, grpc.ssl_server_credentials([pair]))
            return server.add_insecure_port(listen)
        except RuntimeError as error:  # grpc's "Failed to bind to address"
            raise OSError(f"cannot listen on {listen}: {error}") from error

    async def start(self) -> None:
        """Serve: the index and the claimer sync first (calls would find nothing before),
        then the gRPC port opens. Raises when the port cannot be bound."""
        http = contextlib.AsyncExitStack()
        self.http_port = await http.enter_async_context(
            serve_http(
                self.metrics,
                lambda: self.ready,
                self.settings.http_host,
                self.settings.http_port,
                self.auth,
            )
        )
        self._http = http
        self._tasks.append(asyncio.create_task(self.routes.run(), name="gateway-session-feed"))
        await self.claimer.start()
        self._claimer_started = True
        await self.routes.synced.wait()
        server = self._build()
        self.port = self._bind(server)
        if not self.port:
            raise OSError(f"cannot listen on {self.settings.host}:{self.settings.port}")
        await server.start()
        self._server = server
        for name in ("", GATEWAY_SERVICE, health.SERVICE_NAME):
            await self.health.set(name, health_pb2.HealthCheckResponse.SERVING)
        log.info(
            "gateway_serving",
            address=self.address,
            tls=self.settings.tls,
            http_port=self.http_port,
            replica=self.settings.replica,
        )

    async def stop(self, grace_s: float | None = None) -> None:
        """Refuse new calls, give calls in flight `grace_s` (default: the settings'), then
        stop the claimer, the index and every upstream channel."""
        grace = self.settings.shutdown_grace_seconds if grace_s is None else grace_s
        if self._server is not None:
            await self.health.enter_graceful_shutdown()
            await self._server.stop(grace)
            self._server = None
        await self.resumer.close()
        await self.auth.close()
        if self._claimer_started:
            self._claimer_started = False
            await self.claimer.stop()
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks.clear()
        await self.channels.close()
        if self._http is not None:
            await self._http.aclose()
            self._http = None
        log.info("gateway_stopped", replica=self.settings.replica)
