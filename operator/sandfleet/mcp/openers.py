"""Opening a session's sandbox through the gateway, for the CLI and the cluster endpoint."""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import AsyncIterator

from sandfleet.backends.gateway import GatewayBackend, GatewaySandboxRequest
from sandfleet.clients.gateway.target import GatewayTarget
from sandfleet.errors import SandfleetError
from sandfleet.sandbox.core import SandboxCore
from sandfleet.sandbox.facade import ClusterSandbox

GENERATE_NAME = "mcp-"


def as_caller(target: GatewayTarget, token: str | None) -> GatewayTarget:
    """`target` with the caller's bearer token instead of any of the server's own."""
    if not token:
        raise SandfleetError("no bearer token to claim a sandbox with")
    return dataclasses.replace(target, token=token, token_source=None)


@contextlib.asynccontextmanager
async def claimed_sandbox(
    target: GatewayTarget,
    *,
    namespace: str | None,
    pool: str | None,
    template: str | None = None,
    egress: str | None = None,
    tool_timeout_s: float = 0,
) -> AsyncIterator[SandboxCore]:
    """One sandbox claimed through the gateway as `target`'s caller; released at exit (the
    operator then reclaims its pod)."""
    request = GatewaySandboxRequest(
        namespace,
        pool=pool,
        template=template,
        egress=egress,
        generate_name=GENERATE_NAME,
        target=target,
    )
    opened = await GatewayBackend(request).open()
    sandbox = ClusterSandbox.from_opened(opened, tool_timeout_s=tool_timeout_s)
    try:
        yield sandbox
    finally:
        await sandbox.close()
