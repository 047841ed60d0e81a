"""kopf wiring only: decorators, start-up settings and the stop protocol, over the core.

Each session and each pool gets one daemon (kopf runs it as an asyncio task per object and
restarts it for every object when the operator restarts: that is what makes the operator
level-based). Deletion stops the daemon first, then the finalizer-bearing delete handler
takes the sandbox back.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Coroutine, Sequence
from typing import Any

import aiohttp
import kopf

from sandfleet.api import (
    API_VERSION,
    FINALIZER,
    GROUP,
    POOL_PLURAL,
    SESSION_KIND,
    SESSION_PLURAL,
    VERSION,
    Annotation,
    Label,
    Phase,
    ReclaimReason,
)
from sandfleet.fleet.naming import label_value
from sandfleet.fleet.resources import ObjectRef
from sandfleet.kube import api_server_connector
from sandfleet.logs import get_logger
from sandfleet.operator.adoption import unadopted_pod_to_reclaim
from sandfleet.operator.context import OperatorContext
from sandfleet.operator.pools import PoolKeeper
from sandfleet.operator.reclaim import delete_session_children
from sandfleet.operator.recycling import recycle_released
from sandfleet.operator.session_worker import SessionWorker
from sandfleet.operator.suspension import drop_snapshot

log = get_logger(__name__)

KOPF_REQUEST_CONNECTIONS = 32
"""Connections kopf's API client may use for requests (patches, events, peering) at once, on
top of its watch streams. More concurrent requests wait for a free connection: at the
operator's request rates (a few per session event, milliseconds each) 32 never queue long."""


def post_event(body: object, *, warning: bool, reason: str, message: str) -> None:
    """EventRecorder over kopf's poster (it batches and retries in the background)."""
    assert isinstance(body, kopf.Body)
    kopf.event(body, type="Warning" if warning else "Normal", reason=reason, message=message)


@kopf.on.startup()
async def configure(settings: kopf.OperatorSettings, memo: OperatorContext, **_: Any) -> None:
    settings.persistence.finalizer = FINALIZER
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=GROUP)
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(
        prefix=GROUP, key="last-handled-configuration"
    )
    # Our own events (kopf.event) always go out; kopf's log-derived ones only when they
    # matter, or every status write would come with an event.
    settings.posting.level = logging.WARNING
    # Long watches with a client-side bound (the API server's default can be hours).
    settings.watching.server_timeout = 300
    settings.watching.client_timeout = 330
    settings.networking.request_timeout = 60
    settings.networking.connect_timeout = 10
    # A session's daemon does its own waiting: kopf must not delay it.
    settings.queueing.idle_timeout = 30.0
    settings.peering.lifetime = memo.settings.peering_lifetime_seconds
    # Serving listed namespaces, kopf must not scan namespaces and CRDs cluster-wide: a
    # Role-only (tenant) install may not, and kopf would retry for about a minute.
    settings.scanning.disabled = bool(memo.settings.namespaces)
    memo.start_background()
    log.info("operator_started", namespaces=memo.settings.namespaces or "all")


def kopf_connection_limit(namespaces: Sequence[str]) -> int:
    """The bound of kopf's connection pool: one connection per watch stream, held for the
    stream's life (sessions, pools and peering in each served namespace, or cluster-wide plus
    the CRD and namespace scans), and KOPF_REQUEST_CONNECTIONS for requests. Fewer than the
    streams would starve every request behind them."""
    return 3 * max(1, len(namespaces)) + 2 + KOPF_REQUEST_CONNECTIONS


@kopf.on.login()
async def login(memo: OperatorContext, **_: Any) -> kopf.AiohttpSession:
    """kopf talks to the API server exactly as the operator's own client does: the same
    kubeconfig or service account, the same address (kopf's own in-cluster login would use
    kubernetes.default.svc, which needs cluster DNS).

    We hand kopf a session of our own rather than connection info: from connection info kopf
    builds an aiohttp pool without a bound (`TCPConnector(limit=0)`), so a burst of session
    events opened one TLS connection per concurrent request and the buffers stayed in the
    process (~215 MiB per 1,000 sessions). kopf closes this session when it logs in again
    (an expired token) or stops, so each login makes a new one. kopf logs in again after a
    401, so each login asks the credentials afresh (an exec plugin runs again, a token file
    is read again): the same kubernetes_asyncio loaders as the operator's own client.
    """
    config = memo.kube.config
    authorization = await config.auth_header(refresh=True)
    secure = config.server.startswith("https:")
    connector = api_server_connector(
        kopf_connection_limit(memo.settings.namespaces), config.ssl_context() if secure else None
    )
    session = aiohttp.ClientSession(
        connector=connector,
        headers={"Authorization": authorization} if authorization else None,
    )
    return kopf.AiohttpSession(
        aiohttp_session=session, server=config.server, default_namespace=config.namespace
    )


@kopf.on.cleanup()
async def shut_down(memo: OperatorContext, **_: Any) -> None:
    await memo.stop_background()
    log.info("operator_stopped")


async def _until_stopped(work: Coroutine[Any, Any, None], stopped: kopf.DaemonStopped) -> None:
    """Run `work` until it ends or kopf asks the daemon to stop (deletion, shutdown).

    On shutdown the work is cancelled mid-way on purpose: the next operator process picks
    the session up from its status (and its trajectory), so nothing is marked failed here.
    """
    task = asyncio.ensure_future(work)
    stop = asyncio.ensure_future(stopped.wait())
    try:
        await asyncio.wait({task, stop}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        stop.cancel()
        if not task.done():
            task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


# An unexpected error (API server down, a bug) restarts the daemon after `backoff`; the
# worker then carries on from the session's status, as after an operator restart.
@kopf.daemon(GROUP, VERSION, SESSION_PLURAL, id="session", cancellation_timeout=30.0, backoff=5)
async def session_daemon(
    body: kopf.Body, stopped: kopf.DaemonStopped, memo: OperatorContext, **_: Any
) -> None:
    if body.metadata.get("deletionTimestamp"):
        return
    await _until_stopped(SessionWorker(memo, body).run(), stopped)


# An indexer that indexes nothing: kopf calls it on every watch event of a session, after it
# has updated the daemon's live body, and (unlike an on.event handler, which logs "succeeded"
# at info for every event) quietly. Returning None stores nothing in the index.
@kopf.index(GROUP, VERSION, SESSION_PLURAL, id="wake")
async def wake_session_worker(uid: str, memo: OperatorContext, **_: Any) -> None:
    """The session's worker, if it waits on its spec (suspend, resume), looks again now."""
    memo.session_signals.notify(uid)


@kopf.on.delete(GROUP, VERSION, SESSION_PLURAL, id="reclaim")
async def reclaim_deleted_session(
    *,
    name: str,
    namespace: str | None,
    uid: str,
    spec: kopf.Spec,
    status: kopf.Status,
    annotations: kopf.Annotations,
    memo: OperatorContext,
    **_: Any,
) -> None:
    """Runs after the daemon has stopped (its loop cancelled): take the sandbox back now
    rather than leave it to the garbage collector (which cannot have it yet when the session
    was deleted before its gateway-claimed pod was adopted)."""
    assert namespace is not None  # SandboxSession is namespaced
    finished = status.get("phase") in {p.value for p in Phase if p.finished}
    pod = None if finished else status.get("podName")
    if pod is None and not finished:
        # Released before the operator adopted it (a short claim): recycled all the same.
        pod = await unadopted_pod_to_reclaim(memo.kube, namespace, name, annotations)
    elif pod is not None and not _still_held(memo, namespace, pod, name):
        # Back in its pool already, maybe claimed by another session since (a repeated
        # run of this handler): not this session's to recycle or delete.
        log.warning("reclaim_skipped_pod", session=f"{namespace}/{name}", pod=pod)
        pod = None
    # The pool it came from: recorded once the operator took it on, else the one it was
    # claimed from (checked against the pod's pool label before anything is reused).
    pool = status.get("poolName") or (spec.get("poolRef") or {}).get("name")
    if pod is not None and await recycle_released(
        memo, namespace, name, pod, pool=pool, status=status, annotations=annotations
    ):
        pod = None  # back in its pool: only the session's Secret and policy go
    # A gateway-claimed session's token is derived: no Secret unless a worker made one.
    secret = bool(status.get("tokenSecretName")) or not annotations.get(Annotation.CLAIMED_POD)
    await delete_session_children(
        memo.kube,
        memo.metrics,
        namespace,
        name,
        pod=pod,
        reason=ReclaimReason.DELETED,
        token_secret=secret,
    )
    # A suspended session's files go with it (and a failed resume's, kept for inspection).
    await drop_snapshot(memo, ObjectRef(namespace, name, uid, SESSION_KIND, API_VERSION))


def _still_held(memo: OperatorContext, namespace: str, pod_name: str, session: str) -> bool:
    """The pod, as the index last saw it, still carries the session's label (a pod the
    index has not seen yet, just created for it, counts as held)."""
    pod = memo.pods.get(namespace, pod_name)
    if pod is None:
        return True
    return (pod["metadata"].get("labels") or {}).get(Label.SESSION) == label_value(session)


@kopf.daemon(GROUP, VERSION, POOL_PLURAL, id="pool", cancellation_timeout=10.0, backoff=5)
async def pool_daemon(
    body: kopf.Body, stopped: kopf.DaemonStopped, memo: OperatorContext, **_: Any
) -> None:
    await _until_stopped(PoolKeeper(memo, body).run(), stopped)
