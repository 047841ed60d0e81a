"""ClusterBackend: a sandbox on Kubernetes as a raw SandboxSession, waited on until Ready."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from collections.abc import Mapping
from pathlib import Path

from sandfleet.api import RUNTIME_PORT, EgressMode, LifecycleSpec, PodTemplate
from sandfleet.clients.runtime.client import RuntimeClient
from sandfleet.cluster.session_specs import default_paths
from sandfleet.errors import SandboxLostError, SandboxStartError
from sandfleet.fleet.manifests import (
    DEFAULT_GENERATE_NAME,
    file_sources,
    raw_session_spec,
    session_body,
)
from sandfleet.fleet.sessions import SessionClient, SessionGoneError, SessionWaitTimeoutError
from sandfleet.fleet.status import SessionState
from sandfleet.kube import KubeClient, KubeConfig
from sandfleet.logs import get_logger
from sandfleet.sandbox.backend import OpenedSandbox, SandboxPaths

log = get_logger(__name__)

_RUNTIME_ANSWER_TIMEOUT_S = 30.0
"""The operator has seen the runtime serve before Ready; this covers our own route to it."""


class SessionFailedError(SandboxStartError):
    """The session ended (Failed, Expired) or was deleted before it became Ready."""

    def __init__(self, message: str, state: SessionState | None) -> None:
        super().__init__(message)
        self.state = state
        """The last state seen: conditions, phase, pod."""


@dataclasses.dataclass(frozen=True, slots=True)
class ClusterSandboxRequest:
    """Which sandbox to start on which cluster: a raw SandboxSession (no agent)."""

    namespace: str | None = None
    """None: the kubeconfig context's namespace."""
    name: str | None = None
    """The session's name; None: generated from `generate_name`."""
    generate_name: str = DEFAULT_GENERATE_NAME
    template: str | None = None
    """A SandboxTemplate name. At most one of template, pool and pod; none of them: the
    operator's default image."""
    pool: str | None = None
    """A SandboxPool to claim a warm sandbox from."""
    pod: PodTemplate | None = None
    """Inline pod settings."""
    env: Mapping[str, str] | None = None
    """The shells' environment."""
    files: Mapping[str, str] | None = None
    """Sandbox path (absolute, or relative to the workdir) -> text, placed before Ready (at
    most 256 KiB in all: upload the rest)."""
    lifecycle: LifecycleSpec | None = None
    """Deadlines, idle timeout, TTL."""
    egress: EgressMode | str | None = None
    """"None" (the default), "Internet" or "All"."""
    kubeconfig: Path | str | None = None
    """Where the cluster is (default: $KUBECONFIG, ~/.kube/config, then the pod's service
    account)."""
    context: str | None = None
    """The kubeconfig context; None: its current one."""
    kube: KubeClient | None = None
    """A client to share across many sandboxes (kubeconfig and context are then unused)."""
    ready_timeout_s: float = 120.0
    """The wait for Ready; a session that fails or expires first raises SessionFailedError at
    once, with the operator's reason and message."""
    address: str | None = None
    """Where to reach the runtime instead of status.podIP:50051, for clients that cannot route
    to pod IPs (outside the cluster network): e.g. a port-forward."""
    paths: SandboxPaths | None = None
    """The layout in the sandbox (default: below the workdir, /testbed)."""


@dataclasses.dataclass(frozen=True, slots=True)
class ClusterBackend:
    """A SandboxBackend: `open()` creates the requested session and connects to its runtime;
    closing the result deletes the session, and the operator then reclaims its pod, token
    Secret and NetworkPolicy."""

    request: ClusterSandboxRequest = dataclasses.field(default_factory=ClusterSandboxRequest)

    async def open(self) -> OpenedSandbox[SessionState]:
        """Create a raw SandboxSession, wait until it is Ready and connect to its runtime.

        The details are the session as it was when it became Ready (name, pod, node, pool).
        Whatever goes wrong before it returns (including cancellation), the session is
        deleted again.
        """
        request = self.request
        spec = raw_session_spec(
            template=request.template,
            pool=request.pool,
            pod=request.pod,
            env=request.env,
            files=file_sources(request.files or {}),
            lifecycle=request.lifecycle,
            egress=request.egress,
        )
        body = session_body(spec, name=request.name, generate_name=request.generate_name)
        kube = request.kube
        owned_kube: KubeClient | None = None
        if kube is None:
            kubeconfig = Path(request.kubeconfig) if request.kubeconfig else None
            config = await asyncio.to_thread(KubeConfig.load, kubeconfig, request.context)
            kube = owned_kube = KubeClient(config)
        sessions = SessionClient(kube, request.namespace or kube.config.namespace)
        try:
            created = await sessions.create(body)
        except BaseException:
            if owned_kube is not None:
                await owned_kube.close()
            raise

        async def delete_session() -> None:
            try:
                await sessions.delete(created.name)
            finally:
                if owned_kube is not None:
                    await owned_kube.close()

        try:
            state = await _wait_ready(sessions, created, request.ready_timeout_s)
            client = await _connect(sessions, state, request.address)
        except BaseException:
            # Shielded: a cancelled caller must not leave a session (and its pod) behind.
            await asyncio.shield(delete_session())
            raise

        async def close() -> None:
            try:
                await client.close()
            finally:
                await delete_session()

        log.info("cluster_sandbox_ready", session=state.reference, pod=state.pod_name)
        paths = request.paths or default_paths(request.pod.workdir if request.pod else None)
        return OpenedSandbox(client=client, paths=paths, close=close, details=state)


async def _wait_ready(
    sessions: SessionClient, created: SessionState, timeout_s: float
) -> SessionState:
    def settled(state: SessionState) -> bool:
        return state.ready or state.finished or state.deleting

    try:
        state = await sessions.wait_until(created.name, settled, timeout_s, since=created)
    except SessionWaitTimeoutError as error:
        raise SessionFailedError(
            f"the sandbox was not Ready in time: {error}", error.state
        ) from error
    except SessionGoneError as error:
        raise SessionFailedError(f"the sandbox never became Ready: {error}", None) from error
    if not state.ready:
        raise SessionFailedError(f"the sandbox cannot start: {state.summary()}", state)
    if not state.pod_ip or not state.token_secret_name:
        raise SessionFailedError(
            f"{state.reference} is Ready but its status lacks podIP or tokenSecretName", state
        )
    return state


async def _connect(
    sessions: SessionClient, state: SessionState, address: str | None
) -> RuntimeClient:
    assert state.token_secret_name is not None  # checked by _wait_ready
    token = await sessions.runtime_token(state.token_secret_name)
    target = address or f"{state.pod_ip}:{RUNTIME_PORT}"
    client = RuntimeClient(target, token)
    try:
        await client.wait_ready(timeout_s=_RUNTIME_ANSWER_TIMEOUT_S)
    except BaseException as error:
        with contextlib.suppress(Exception):
            await client.close()
        if isinstance(error, SandboxLostError):
            raise SessionFailedError(
                f"{state.reference} is Ready, but its runtime at {target} does not answer "
                f"from here ({error}); if pod IPs are not routable from this machine, pass "
                "address= (a port-forward or other route to port 50051 of the pod)",
                state,
            ) from error
        raise
    return client
