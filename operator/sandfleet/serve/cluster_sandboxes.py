"""Cluster mode's sandboxes: each one claimed through the sandfleet gateway (warm from a
SandboxPool while it has idle pods, the gateway's in-memory claim path, no kopf round trip),
used through the gateway's runtime proxy, and released (the session deleted, the pod back to
its pool or deleted) when the request or conversation is done with it.

serve claims as its own identity: the [gateway] table's token (token_env, or token_file,
re-read on every claim), else SANDFLEET_GATEWAY_TOKEN,
else the kubeconfig's (in a pod, its ServiceAccount's token, re-read as it rotates). The
pool is the warm set, so nothing is kept started here.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
from collections.abc import Mapping
from pathlib import Path

from sandfleet.api import LifecycleSpec
from sandfleet.backends.gateway import GatewayBackend, GatewaySandboxRequest
from sandfleet.clients.gateway.target import GatewayTarget, resolve_gateway
from sandfleet.errors import GatewayConfigError
from sandfleet.logs import get_logger
from sandfleet.sandbox.facade import ClusterSandbox, Sandbox
from sandfleet.serve.config import GatewaySpec, ServedModelSpec
from sandfleet.serve.sandboxes import close_quietly

log = get_logger(__name__)

IDLE_MARGIN_S = 120
"""A session outlives serve's own idle TTL by this much before the operator expires it: the
operator's idle timeout only cleans up after a replica that died holding sessions."""


def resolve_target(spec: GatewaySpec, environ: Mapping[str, str] | None = None) -> GatewayTarget:
    """The gateway and serve's identity there; raises GatewayConfigError naming what is
    missing. Reads files (kubeconfig, CA): call it before the event loop, or in a thread."""
    env = os.environ if environ is None else environ
    token = None
    if spec.token_env is not None:
        token = env.get(spec.token_env, "")
        if not token:
            raise GatewayConfigError(f"gateway.token_env: {spec.token_env} is not set")
    elif spec.token_file is not None:
        token = _read_token(spec.token_file)
    target = resolve_gateway(spec.address, token=token, ca_file=spec.ca_file, environ=env)
    token_file = spec.token_file
    if spec.token_env is None and token_file is not None:
        return dataclasses.replace(target, token_source=lambda: _read_token(token_file))
    return target


def _read_token(path: Path) -> str:
    try:
        token = path.read_text(encoding="utf-8").strip()
    except OSError as error:
        raise GatewayConfigError(f"gateway.token_file: {error}") from error
    if not token:
        raise GatewayConfigError(f"gateway.token_file: {path} is empty")
    return token


class ClusterSandboxSource:
    """Sandboxes for one served model, each claimed through the gateway when a request
    needs one; `warm` is the pool's business, so `refill` does nothing."""

    def __init__(
        self,
        target: GatewayTarget,
        gateway: GatewaySpec,
        spec: ServedModelSpec,
        *,
        conversation_ttl_s: float,
    ) -> None:
        self._tool_timeout_s = spec.tool_timeout_seconds
        self._backend = GatewayBackend(
            GatewaySandboxRequest(
                namespace=spec.namespace or gateway.namespace or target.namespace,
                pool=spec.pool,
                template=spec.template,
                lifecycle=LifecycleSpec(
                    idle_timeout_seconds=int(conversation_ttl_s) + IDLE_MARGIN_S
                ),
                egress=spec.egress,
                generate_name="serve-",
                timeout_s=gateway.claim_timeout_seconds,
                target=target,
            )
        )
        self._releases: set[asyncio.Task[None]] = set()
        self.open = 0
        """Sessions claimed and not yet released."""

    @property
    def ready(self) -> int:
        """Nothing waits here: the pool's idle pods are the warm set."""
        return 0

    def start(self) -> None:
        """Nothing to start: the first request claims."""

    def refill(self) -> None:
        """Nothing to refill: the operator keeps the pool at its size."""

    async def take(self, claim_id: str | None = None, *, token: str | None = None) -> Sandbox:
        """A claimed sandbox; raises SandfleetError (a GatewayError) when none is given.
        With `claim_id` the claim is idempotent: the gateway names the session from it, and
        a later claim with the same id (from any replica of this identity) returns the same
        session while it exists (a new one once it is gone). `token`: claim as that caller
        (a client's own token) instead of serve's identity."""
        request = self._backend.request
        if token is not None and request.target is not None:
            caller = dataclasses.replace(request.target, token=token, token_source=None)
            request = dataclasses.replace(request, target=caller)
        backend = GatewayBackend(dataclasses.replace(request, claim_id=claim_id))
        opened = await backend.open()
        self.open += 1
        sandbox = ClusterSandbox.from_opened(opened, tool_timeout_s=self._tool_timeout_s)
        log.info("serve_sandbox_claimed", session=sandbox.name, warm=opened.details.warm)
        return sandbox

    def release(self, sandbox: Sandbox) -> None:
        """Release the session in the background (the answer does not wait for it, and a
        cancelled request cannot interrupt it); `aclose` waits for the ones still running."""
        task = asyncio.get_running_loop().create_task(self._close(sandbox))
        self._releases.add(task)
        task.add_done_callback(self._releases.discard)

    async def aclose(self) -> None:
        await asyncio.gather(*self._releases)

    async def _close(self, sandbox: Sandbox) -> None:
        try:
            await close_quietly(sandbox)
        finally:
            self.open -= 1
