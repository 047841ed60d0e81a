"""An allowed model endpoint that answers with a redirect cannot take a managed session's
requests elsewhere: the operator's model client does not follow redirects (real servers on
127.0.0.1, the allowed one, and 127.0.0.2, the attacker's)."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import pytest
from aiohttp import web

from sandfleet.api import AgentSpec
from sandfleet.errors import ModelError
from sandfleet.fleet.pod_index import PodIndex
from sandfleet.fleet.resources import PlatformDefaults
from sandfleet.operator.agent_driver import agent_config
from sandfleet.operator.context import OperatorContext
from sandfleet.operator.metrics import OperatorMetrics
from sandfleet.operator.settings import OperatorSettings
from sandfleet.operator.trajectory_store import DirectoryTrajectoryStore

pytestmark = pytest.mark.integration

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@contextlib.asynccontextmanager
async def serve(host: str, handler: Handler) -> AsyncIterator[str]:
    """A real HTTP server on `host`; yields its base URL."""
    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", handler)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, host, 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        yield f"http://{host}:{port}"
    finally:
        await runner.cleanup()


async def test_a_redirect_from_an_allowed_endpoint_is_not_followed(tmp_path: Path) -> None:
    stolen: list[dict[str, str]] = []

    async def attacker(request: web.Request) -> web.StreamResponse:
        stolen.append(dict(request.headers))
        return web.json_response({})

    async with serve("127.0.0.2", attacker) as target:

        async def allowed(request: web.Request) -> web.StreamResponse:
            raise web.HTTPTemporaryRedirect(f"{target}{request.path}")

        async with serve("127.0.0.1", allowed) as base:
            ctx = OperatorContext(
                settings=OperatorSettings(model_endpoints_allowed=["http://127.0.0.1:*"]),
                kube=None,  # type: ignore[arg-type]
                pods=PodIndex(),
                metrics=OperatorMetrics(),
                store=DirectoryTrajectoryStore(tmp_path),
                defaults=PlatformDefaults(
                    "img", operator_namespace="s", operator_pod_labels={"a": "o"}
                ),
                events=lambda *args, **kwargs: None,  # type: ignore[arg-type,return-value]
            )
            agent = AgentSpec.model_validate({"model": "m", "prompt": "p", "baseURL": f"{base}/v1"})
            model = ctx.model_for(await agent_config(ctx, "ns", agent))
            try:
                with pytest.raises(ModelError, match="307"):
                    await model.complete(
                        [{"role": "user", "content": "the tenant's prompt"}], (), max_tokens=None
                    )
            finally:
                await model.aclose()
    assert stolen == []
