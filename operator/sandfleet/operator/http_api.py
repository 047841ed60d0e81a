"""The operator's HTTP port: Prometheus metrics, trajectories by session, and a health check.

Every route but /healthz wants a Kubernetes bearer token (in `Authorization`, or in
`X-Sandfleet-Authorization` through the API server's service proxy, which strips the
former) and asks the API server about it, as the gateway does: a trajectory needs `get
sandboxsessions` in its namespace, /metrics `get` on the non-resource URL /metrics (as
controller-runtime's metrics endpoints do). No token or a refused one answers 401 whatever
the path; a trajectory the caller may not read answers exactly as one that does not exist.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import AsyncIterator, Callable

from aiohttp import hdrs, web

from sandfleet.api import CALLER_AUTHORIZATION, GROUP, SESSION_PLURAL
from sandfleet.api.trajectories import (
    NDJSON,
    ROUTE,
    UID_HEADER,
    UID_QUERY,
    TrajectoryNameError,
    validate_name,
    validate_namespace,
    validate_uid,
)
from sandfleet.kube.access_review import (
    METRICS_ACCESS,
    Authenticator,
    ResourceAccess,
    http_refusal,
)
from sandfleet.logs import get_logger
from sandfleet.operator.trajectory_store import TrajectoryStore
from sandfleet.trajectory.store import TrajectorySnapshot, read_chunks, snapshot

log = get_logger(__name__)

MetricsRender = Callable[[], tuple[bytes, str]]
"""Returns the exposition body and its Content-Type (prometheus_client's generate_latest and
CONTENT_TYPE_LATEST). Called on the event loop, so it may read the operator's state freely."""

_SHUTDOWN_TIMEOUT_S = 5.0
"""How long stopping waits for responses in flight (a big trajectory to a slow reader)."""


_TOKEN_HEADERS = (CALLER_AUTHORIZATION, hdrs.AUTHORIZATION)
"""Where a request's bearer token may be: the service proxy strips Authorization, and passes
X-Sandfleet-Authorization on."""


def build_http_app(
    store: TrajectoryStore, metrics_render: MetricsRender, auth: Authenticator
) -> web.Application:
    """Routes: GET /metrics, GET /trajectories/{namespace}/{name}[?uid=UID], GET /healthz.

    A trajectory response streams the file's whole records as they were when the request
    arrived (Content-Length set, memory per response about one read chunk); errors are JSON
    {"error": message}: 400 for a namespace, name or uid that is not a Kubernetes name,
    401 without an accepted token, 404 when no trajectory is stored or the caller may not
    get sandboxsessions in that namespace (one answer), 403 for /metrics without RBAC, 503
    when the API server cannot review the token now.
    """
    handlers = _Handlers(store, metrics_render, auth)
    app = web.Application()
    app.router.add_get("/healthz", handlers.healthz)
    app.router.add_get("/metrics", handlers.metrics)
    app.router.add_get(ROUTE, handlers.trajectory)
    return app


@dataclasses.dataclass(frozen=True, slots=True)
class RunningHttpServer:
    host: str
    port: int
    """The bound port (the real one when 0 was asked)."""

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"


@contextlib.asynccontextmanager
async def serve_http(
    app: web.Application, host: str, port: int
) -> AsyncIterator[RunningHttpServer]:
    """Serve `app` on host:port until the block ends (port 0 picks a free one)."""
    # No access log: Prometheus scrapes every few seconds; trajectory fetches log their own line.
    runner = web.AppRunner(app, access_log=None, shutdown_timeout=_SHUTDOWN_TIMEOUT_S)
    await runner.setup()
    try:
        site = web.TCPSite(runner, host, port)
        await site.start()
        bound_host, bound_port = runner.addresses[0][:2]
        log.info("http_api_started", host=bound_host, port=bound_port)
        yield RunningHttpServer(str(bound_host), int(bound_port))
    finally:
        await runner.cleanup()


class _Handlers:
    def __init__(
        self, store: TrajectoryStore, metrics_render: MetricsRender, auth: Authenticator
    ) -> None:
        self._store = store
        self._metrics_render = metrics_render
        self._auth = auth

    async def healthz(self, request: web.Request) -> web.Response:
        return web.Response(text="ok")

    async def metrics(self, request: web.Request) -> web.Response:
        refusal = await http_refusal(self._auth, request.headers, METRICS_ACCESS, _TOKEN_HEADERS)
        if refusal is not None:
            return _refused(*refusal)
        body, content_type = self._metrics_render()
        # Set as a header: aiohttp's content_type argument refuses the "; charset=" part.
        return web.Response(body=body, headers={"Content-Type": content_type})

    async def _trajectory_refusal(
        self, request: web.Request, namespace: str, which: str
    ) -> web.Response | None:
        """None when the caller may get sandboxsessions in `namespace`, else the answer."""
        access = ResourceAccess("get", GROUP, SESSION_PLURAL, namespace)
        refusal = await http_refusal(self._auth, request.headers, access, _TOKEN_HEADERS)
        if refusal is None:
            return None
        status, message = refusal
        if status == 403:
            # The same answer as a session without a trajectory: a caller without the right
            # learns nothing of which names exist in that namespace.
            log.info("trajectory_denied", which=which, reason=message)
            return _error(404, f"no trajectory stored for {which}")
        return _refused(status, message)

    async def _snapshot(
        self, namespace: str, name: str, uid: str | None
    ) -> TrajectorySnapshot | None:
        if uid is None:
            path = await self._store.latest(namespace, name)
        else:
            path = await self._store.path(namespace, name, uid)
        if path is None:
            return None
        try:
            return await snapshot(path)
        except FileNotFoundError:  # pruned between the lookup and now
            return None

    async def trajectory(self, request: web.Request) -> web.StreamResponse:
        namespace = request.match_info["namespace"]
        name = request.match_info["name"]
        uid = request.query.get(UID_QUERY)
        try:
            validate_namespace(namespace)
            validate_name(name)
            if uid is not None:
                validate_uid(uid)
        except TrajectoryNameError as error:
            return _error(400, str(error))
        which = f"session {namespace}/{name}" + (f" uid {uid}" if uid else "")
        refusal = await self._trajectory_refusal(request, namespace, which)
        if refusal is not None:
            return refusal
        trajectory = await self._snapshot(namespace, name, uid)
        if trajectory is None:
            return _error(404, f"no trajectory stored for {which}")
        response = web.StreamResponse(headers={UID_HEADER: trajectory.uid})
        response.content_type = NDJSON
        response.content_length = trajectory.size
        response.last_modified = trajectory.modified
        await response.prepare(request)
        if request.method == hdrs.METH_HEAD:  # size and uid only; a body here would be
            await response.write_eof()  # read as the next response on a kept-alive connection
            return response
        try:
            async for chunk in read_chunks(trajectory):
                await response.write(chunk)
            await response.write_eof()
        except ConnectionResetError:
            # The reader went away; aiohttp finishes a response whose peer is gone quietly.
            log.info(
                "trajectory_stream_aborted", namespace=namespace, name=name, uid=trajectory.uid
            )
            return response
        log.info(
            "trajectory_served",
            namespace=namespace,
            name=name,
            uid=trajectory.uid,
            size=trajectory.size,
        )
        return response


def _error(status: int, message: str) -> web.Response:
    return web.json_response({"error": message}, status=status)


def _refused(status: int, message: str) -> web.Response:
    response = _error(status, message)
    if status == 401:
        response.headers[hdrs.WWW_AUTHENTICATE] = "Bearer"
    return response
