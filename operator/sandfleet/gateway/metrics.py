"""The gateway's Prometheus metrics and its small HTTP server (/metrics, /healthz, /readyz).

A private CollectorRegistry (never prometheus_client's global one), so tests and two
gateways in one process each count on their own. Label values come from closed sets
(results, warm/cold, the proxied method names) or from names the API server vouched for
(pools that served a claim, namespaces holding sessions).
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Final

from aiohttp import web
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.exposition import choose_encoder

from sandfleet.kube.access_review import METRICS_ACCESS, Authenticator, http_refusal
from sandfleet.logs import get_logger

log = get_logger(__name__)

# A warm claim is one patch, one bind and one create: tens of milliseconds when healthy.
# The warm targets (p50 50 ms, p99 250 ms) are bucket edges so they read off exactly; cold
# starts land in the seconds buckets.
CLAIM_BUCKETS: Final = (
    0.005, 0.01, 0.02, 0.03, 0.05, 0.075, 0.1, 0.15, 0.2, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
    30.0, 60.0, 120.0,
)  # fmt: skip
# A proxied call: the gateway's own share is sub-millisecond; the call itself ranges from an
# editor view to a test suite.
CALL_BUCKETS: Final = (
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
    120.0, 300.0, 600.0,
)  # fmt: skip

CLAIM_RESULTS: Final = (
    "ok",
    "invalid",
    "unauthenticated",
    "denied",
    "quota",
    "not_found",
    "unavailable",
    "error",
)
AUTH_FAILURES: Final = ("unauthenticated", "denied", "unavailable")


class GatewayMetrics:
    """All the gateway's metrics; `render()` gives the /metrics response."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        reg = self.registry
        self.open_sessions: Callable[[], Mapping[str, int]] = dict
        """Sessions per namespace that count against its quota (neither finished nor
        Suspended), read at each scrape (the session index)."""
        self._claim_latency = Histogram(
            "sandfleet_gateway_claim_seconds",
            "Claim calls that succeeded, from request to answer, by pool and warm or cold.",
            ["pool", "start"],
            buckets=CLAIM_BUCKETS,
            registry=reg,
        )
        self._claims = Counter(
            "sandfleet_gateway_claims",
            "Claim calls by result.",
            ["result"],
            registry=reg,
        )
        self._call_latency = Histogram(
            "sandfleet_gateway_proxied_call_seconds",
            "Proxied runtime calls, from the gateway receiving them to their end, by method.",
            ["method"],
            buckets=CALL_BUCKETS,
            registry=reg,
        )
        self._sessions = Gauge(
            "sandfleet_gateway_open_sessions",
            "Sessions neither finished nor suspended, per namespace (tenant): what its quota "
            "counts, as the gateway's index sees them.",
            ["namespace"],
            registry=reg,
        )
        self._quota_rejections = Counter(
            "sandfleet_gateway_quota_rejections",
            "Claims and resumes refused by a namespace's session quota.",
            ["namespace"],
            registry=reg,
        )
        self._auth_failures = Counter(
            "sandfleet_gateway_auth_failures",
            "Control-plane calls refused: bad token, RBAC, or no answer from the API server.",
            ["reason"],
            registry=reg,
        )
        for result in CLAIM_RESULTS:
            self._claims.labels(result)
        for reason in AUTH_FAILURES:
            self._auth_failures.labels(reason)

    def claim_finished(
        self, result: str, *, pool: str = "", warm: bool = False, seconds: float = 0.0
    ) -> None:
        """One Claim call ended; a latency only for successful ones (`pool` "" for templates
        and the default image)."""
        self._claims.labels(result if result in CLAIM_RESULTS else "error").inc()
        if result == "ok":
            self._claim_latency.labels(pool or "-", "warm" if warm else "cold").observe(seconds)

    def call_finished(self, method: str, seconds: float) -> None:
        self._call_latency.labels(method).observe(seconds)

    def quota_rejected(self, namespace: str) -> None:
        self._quota_rejections.labels(namespace).inc()

    def auth_failed(self, reason: str) -> None:
        self._auth_failures.labels(reason).inc()

    def render(self, accept: str | None = None) -> tuple[bytes, str]:
        """The exposition (body, content type) in the format the scraper asks for."""
        self._sessions.clear()
        for namespace, count in self.open_sessions().items():
            self._sessions.labels(namespace).set(count)
        encoder, content_type = choose_encoder(accept or "")
        return encoder(self.registry), content_type


@contextlib.asynccontextmanager
async def serve_http(
    metrics: GatewayMetrics,
    ready: Callable[[], bool],
    host: str,
    port: int,
    auth: Authenticator,
) -> AsyncIterator[int]:
    """/metrics, /healthz (the process answers) and /readyz (`ready()`) on host:port until
    the block ends; yields the bound port (0 picks a free one). /metrics names tenants'
    namespaces: it wants a bearer token allowed `get` on /metrics (401/403 otherwise)."""

    async def healthz(request: web.Request) -> web.Response:
        return web.Response(text="ok\n")

    async def readyz(request: web.Request) -> web.Response:
        if ready():
            return web.Response(text="ready\n")
        return web.Response(status=503, text="not ready: the session index is still syncing\n")

    async def scrape(request: web.Request) -> web.Response:
        refusal = await http_refusal(auth, request.headers, METRICS_ACCESS)
        if refusal is not None:
            status, message = refusal
            return web.Response(status=status, text=message + "\n")
        body, content_type = metrics.render(request.headers.get("Accept"))
        response = web.Response(body=body)
        response.headers["Content-Type"] = content_type
        return response

    app = web.Application()
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    app.router.add_get("/metrics", scrape)
    # No access log: probes and scrapes arrive every few seconds.
    runner = web.AppRunner(app, access_log=None, shutdown_timeout=1.0)
    await runner.setup()
    try:
        site = web.TCPSite(runner, host, port)
        await site.start()
        bound = int(runner.addresses[0][1])
        log.info("gateway_http_serving", host=host, port=bound)
        yield bound
    finally:
        await runner.cleanup()
