"""Fetching a managed session's trajectory: from the operator's store directory, from the
operator's HTTP port, or through the Kubernetes API server's service proxy to the operator.

`sandfleet trajectory NAME` (sandfleet.cli.trajectory) writes or renders what this fetches.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import os
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sandfleet.agent.events import one_line
from sandfleet.api import CALLER_AUTHORIZATION
from sandfleet.api.trajectories import (
    UID_HEADER,
    trajectory_path,
    validate_name,
    validate_namespace,
    validate_uid,
)
from sandfleet.errors import SandfleetError
from sandfleet.trajectory.store import CHUNK_BYTES, TrajectoryDirectory, read_chunks, snapshot

if TYPE_CHECKING:
    # Imported where used: aiohttp costs a tenth of a second every other subcommand would pay.
    import aiohttp

    from sandfleet.kube.client import KubeClient
    from sandfleet.kube.config import KubeConfig

DEFAULT_OPERATOR_NAMESPACE = "sandfleet-system"
DEFAULT_OPERATOR_SERVICE = "sandfleet-operator"
OPERATOR_PORT_NAME = "http"
"""The operator Service's port that serves /metrics and /trajectories."""
_CONNECT_TIMEOUT_S = 30.0
_READ_TIMEOUT_S = 120.0
_ERROR_BODY_BYTES = 64 * 1024
TOKEN_ENV = "SANDFLEET_GATEWAY_TOKEN"
"""The caller's Kubernetes token, shared with the gateway's clients (one identity)."""
_TOKEN_HINT = (
    "the operator wants a token the API server accepts: --token or " + TOKEN_ENV + " "
    "(`kubectl create token`)"
)


class TrajectoryFetchError(SandfleetError):
    """The trajectory could not be fetched; the message says from where and why."""


class TrajectoryNotFoundError(TrajectoryFetchError):
    """The source answered, and it stores no trajectory for that session (or uid)."""


@dataclasses.dataclass(frozen=True, slots=True)
class Fetched:
    uid: str | None
    """The run the records belong to, when the source says."""
    chunks: AsyncGenerator[bytes, None]


class TrajectorySourceConfigError(SandfleetError):
    """The source cannot be asked as configured (no Kubernetes configuration, no token)."""


@dataclasses.dataclass(frozen=True, slots=True)
class TrajectoryRequest:
    """Which managed session's trajectory to fetch, and from where: the store directory
    (`store`), the operator's HTTP port (`operator_url`), else the operator Service through
    the Kubernetes API server's service proxy."""

    name: str
    """The SandboxSession's name."""
    namespace: str | None = None
    """None: "default" for a store or an operator URL, the kubeconfig context's otherwise."""
    uid: str | None = None
    """A specific run of the session; None: the latest."""
    store: Path | None = None
    operator_url: str | None = None
    token: str | None = None
    """The Kubernetes bearer token the operator checks; None: SANDFLEET_GATEWAY_TOKEN, then
    the kubeconfig user's."""
    kubeconfig: Path | None = None
    operator_namespace: str = DEFAULT_OPERATOR_NAMESPACE
    operator_service: str = DEFAULT_OPERATOR_SERVICE

    def validate(self) -> None:
        """Raise TrajectoryNameError for a name, namespace or uid that is not a valid one."""
        validate_name(self.name)
        if self.namespace is not None:
            validate_namespace(self.namespace)
        if self.uid is not None:
            validate_uid(self.uid)


def service_proxy_path(
    namespace: str,
    name: str,
    *,
    operator_namespace: str,
    operator_service: str,
    port_name: str = OPERATOR_PORT_NAME,
    uid: str | None = None,
) -> str:
    """The API server path that proxies to the operator Service's trajectory endpoint."""
    service = f"{validate_name(operator_service)}:{port_name}"
    return (
        f"/api/v1/namespaces/{validate_namespace(operator_namespace)}/services/{service}/proxy"
        + trajectory_path(namespace, name, uid)
    )


@contextlib.asynccontextmanager
async def open_trajectory(request: TrajectoryRequest) -> AsyncIterator[Fetched]:
    """The trajectory `request` asks for, from its source, as a stream of bytes (closed on
    exit). Raises TrajectoryFetchError (TrajectoryNotFoundError when the source stores none)
    or TrajectorySourceConfigError (no Kubernetes configuration, no token)."""
    if request.store is not None:
        yield await _from_store(
            request.store, request.namespace or "default", request.name, request.uid
        )
        return
    import aiohttp

    # No total limit: a big trajectory over a slow link may take long; a stalled one may not.
    timeout = aiohttp.ClientTimeout(sock_connect=_CONNECT_TIMEOUT_S, sock_read=_READ_TIMEOUT_S)
    if request.operator_url is not None:
        url = request.operator_url.rstrip("/") + trajectory_path(
            request.namespace or "default", request.name, request.uid
        )
        token = await _caller_token(request.token, None, request.kubeconfig)
        headers = {"Authorization": f"Bearer {token}"}
        async with aiohttp.ClientSession(timeout=timeout) as session:
            yield await _from_http(
                lambda: session.get(url, headers=headers),
                what="the operator at " + request.operator_url,
                hints={401: _TOKEN_HINT},
            )
        return
    async with _api_server(request.kubeconfig) as api:
        token = await _caller_token(request.token, api.kube.config, request.kubeconfig)
        path = service_proxy_path(
            request.namespace or api.context_namespace,
            request.name,
            operator_namespace=request.operator_namespace,
            operator_service=request.operator_service,
            uid=request.uid,
        )
        what = (
            f"the operator service {request.operator_namespace}/{request.operator_service} "
            f"through the API server {api.server}"
        )
        hints = {
            401: f"are the kubeconfig's credentials still valid? ({_TOKEN_HINT})",
            403: f"may you get services/proxy in namespace {request.operator_namespace}?",
            503: "is the operator running and ready?",
        }
        yield await _from_http(
            lambda: api.kube.open_response(
                path,
                timeout=timeout,
                what="GET",
                # The API server drops Authorization on its way to the operator; this it
                # passes on.
                headers={CALLER_AUTHORIZATION: f"Bearer {token}"},
            ),
            what=what,
            hints=hints,
        )


async def _from_store(root: Path, namespace: str, name: str, uid: str | None) -> Fetched:
    store = TrajectoryDirectory(root)
    path = await (
        store.latest(namespace, name) if uid is None else store.path(namespace, name, uid)
    )
    which = f"{namespace}/{name}" + (f" uid {uid}" if uid else "")
    if path is None:
        raise TrajectoryNotFoundError(f"no trajectory stored for session {which} in {root}")
    try:
        trajectory = await snapshot(path)
    except OSError as error:
        raise TrajectoryFetchError(f"cannot read {path}: {error}") from error
    return Fetched(uid=trajectory.uid, chunks=read_chunks(trajectory))


async def _from_http(
    get: Callable[[], Awaitable[aiohttp.ClientResponse]],
    *,
    what: str,
    hints: Mapping[int, str] | None = None,
) -> Fetched:
    """The body of the response `get` opens, as chunks; an error answer raises with its
    message and, when `hints` has one for the status, a hint on the likely cause."""
    import aiohttp

    from sandfleet.kube.errors import KubeConnectionError

    try:
        response = await get()
    except (aiohttp.ClientError, KubeConnectionError) as error:
        raise TrajectoryFetchError(f"cannot reach {what}: {error}") from error
    if response.status != 200:
        try:
            body = await response.content.read(_ERROR_BODY_BYTES)
        except aiohttp.ClientError:
            body = b""
        finally:
            response.release()
        message = _error_message(response.status, body)
        if response.status == 404 and _is_ours(body):
            raise TrajectoryNotFoundError(f"{what} answered {response.status}: {message}")
        hint = (hints or {}).get(response.status)
        message = f"{message} ({hint})" if hint else message
        raise TrajectoryFetchError(f"{what} answered {response.status}: {message}")
    return Fetched(uid=response.headers.get(UID_HEADER), chunks=_body_chunks(response, what))


async def _body_chunks(response: aiohttp.ClientResponse, what: str) -> AsyncGenerator[bytes, None]:
    import aiohttp

    try:
        async for chunk in response.content.iter_chunked(CHUNK_BYTES):
            yield chunk
    except aiohttp.ClientError as error:  # cut off: fewer bytes than the Content-Length
        raise TrajectoryFetchError(f"the transfer from {what} broke off: {error}") from error
    finally:
        response.release()


def _decoded(body: bytes) -> dict[str, Any]:
    try:
        document = json.loads(body)
    except ValueError:
        return {}
    return document if isinstance(document, dict) else {}


def _is_ours(body: bytes) -> bool:
    """The operator's own 404 (no trajectory), as opposed to the API server's (no service)."""
    return "error" in _decoded(body)


def _error_message(status: int, body: bytes) -> str:
    document = _decoded(body)
    if "error" in document:  # the operator's answer
        return str(document["error"])
    if document.get("kind") == "Status":  # the API server's (no such service, forbidden)
        return str(document.get("message") or document.get("reason") or status)
    text = body.decode(errors="replace").strip()
    return one_line(text, 300) if text else f"HTTP {status}"


async def _caller_token(
    given: str | None, config: KubeConfig | None, kubeconfig: Path | None
) -> str:
    """The bearer token the operator checks: --token, SANDFLEET_GATEWAY_TOKEN, then the
    kubeconfig user's (read in a thread: an exec plugin may run)."""
    from sandfleet.kube.config import KubeConfig
    from sandfleet.kube.errors import KubeConfigError

    token = given or os.environ.get(TOKEN_ENV)
    if token:
        return token
    why = "has no bearer token"
    try:
        if config is None:
            config = await asyncio.to_thread(KubeConfig.load, kubeconfig)
        token = await asyncio.to_thread(config.bearer_token)
        if config.client_cert_file:
            why = "authenticates with a client certificate, which cannot be passed on"
    except KubeConfigError as error:
        why = f"cannot be read ({error})"
    if token:
        return token
    raise TrajectorySourceConfigError(
        f"the operator wants a Kubernetes bearer token and the kubeconfig user {why}: pass "
        f"--token or set {TOKEN_ENV} (`kubectl create token SERVICEACCOUNT -n NAMESPACE`)"
    )


@dataclasses.dataclass(frozen=True, slots=True)
class _ApiServer:
    kube: KubeClient
    """Sends the kubeconfig's credentials (whatever the kubeconfig uses, refreshed)."""
    server: str
    context_namespace: str


@contextlib.asynccontextmanager
async def _api_server(kubeconfig: Path | None) -> AsyncIterator[_ApiServer]:
    """The project's Kubernetes client, authenticated the way the kubeconfig says."""
    from sandfleet.kube.client import KubeClient
    from sandfleet.kube.config import KubeConfig
    from sandfleet.kube.errors import KubeConfigError

    try:
        config = await asyncio.to_thread(KubeConfig.load, kubeconfig)
        kube = await KubeClient(config).__aenter__()
    except KubeConfigError as error:
        raise TrajectorySourceConfigError(f"no usable Kubernetes configuration: {error}") from error
    try:
        yield _ApiServer(kube, config.server, config.namespace)
    finally:
        await kube.close()
