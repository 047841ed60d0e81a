"""`sandfleet-operator` / `python -m sandfleet.operator`: settings, logging, clients, kopf.

Process start-up only: one frozen settings object, structlog configured once, the long-lived
clients and shared state built into the OperatorContext, then kopf runs the handlers.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
from collections.abc import Coroutine
from typing import Any

import kopf

from sandfleet.api.session_tokens import read_session_key
from sandfleet.fleet.pod_index import PodIndex, feed_pod_index
from sandfleet.fleet.resources import PlatformDefaults
from sandfleet.kube import KubeClient, KubeConfig
from sandfleet.kube.access_review import Authenticator
from sandfleet.kube.rate_limit import TokenBucket
from sandfleet.logs import configure_logging, get_logger
from sandfleet.operator.context import OperatorContext
from sandfleet.operator.http_api import build_http_app, serve_http
from sandfleet.operator.metrics import OperatorMetrics
from sandfleet.operator.settings import OperatorSettings
from sandfleet.operator.sweeper import sweep_forever
from sandfleet.operator.trajectory_store import DirectoryTrajectoryStore
from sandfleet.snapshots.configured import snapshot_store_from_settings

log = get_logger(__name__)


def platform_defaults(settings: OperatorSettings) -> PlatformDefaults:
    return PlatformDefaults(
        image=settings.default_image,
        operator_namespace=settings.operator_namespace,
        operator_pod_labels=dict(settings.operator_pod_labels),
        gateway_pod_labels=dict(settings.gateway_pod_labels),
        image_pull_policy=settings.image_pull_policy,
        cpu_request=settings.default_cpu_request,
        memory_request=settings.default_memory_request,
        memory_limit=settings.default_memory_limit,
        ephemeral_storage_request=settings.default_ephemeral_storage_request,
        ephemeral_storage_limit=settings.default_ephemeral_storage_limit,
        max_upload_bytes=settings.max_upload_bytes,
        dns_policy=settings.dns_policy,
        dns_namespace=settings.dns_namespace,
        dns_pod_labels=dict(settings.dns_pod_labels),
        dns_cidrs=tuple(str(cidr) for cidr in settings.dns_cidrs),
        scheduler_name=settings.default_scheduler_name,
    )


def build_context(settings: OperatorSettings, kube: KubeClient) -> OperatorContext:
    from sandfleet.operator.handlers import post_event  # registers the kopf handlers

    store = DirectoryTrajectoryStore(settings.trajectory_dir)
    ctx = OperatorContext(
        settings=settings,
        kube=kube,
        pods=PodIndex(),
        metrics=OperatorMetrics(),
        store=store,
        defaults=platform_defaults(settings),
        events=post_event,
        session_key=(
            read_session_key(settings.session_key_file) if settings.session_key_file else None
        ),
        snapshots=snapshot_store_from_settings(settings),
        pool_pod_creates=TokenBucket(
            settings.pool_pod_creates_per_second, settings.pool_pod_create_burst
        ),
    )
    ctx.background += [
        lambda: feed_pod_index(kube, ctx.pods, settings.namespaces),
        lambda: sweep_forever(
            kube,
            ctx.metrics,
            settings.namespaces,
            settings.orphan_sweep_interval_seconds,
            claim_grace_s=settings.orphan_claim_grace_seconds,
        ),
        lambda: _serve_http_forever(ctx),
        lambda: _prune_forever(ctx),
    ]
    return ctx


async def _serve_http_forever(ctx: OperatorContext) -> None:
    auth = Authenticator(ctx.kube, server="the operator")
    app = build_http_app(ctx.store, ctx.metrics.render, auth)
    settings = ctx.settings
    async with serve_http(app, settings.http_host, settings.http_port) as server:
        log.info("operator_http_serving", url=server.url)
        await asyncio.Event().wait()


async def _prune_forever(ctx: OperatorContext) -> None:
    while True:
        with contextlib.suppress(OSError):
            await ctx.store.prune(ctx.settings.trajectory_retention_seconds)
        await asyncio.sleep(3600)


def _peering_priority(settings: OperatorSettings) -> int:
    if settings.peering_priority is not None:
        return settings.peering_priority
    return secrets.randbelow(2**31 - 1) + 1


async def run_operator(settings: OperatorSettings) -> None:
    config = KubeConfig.load(settings.kubeconfig)
    async with KubeClient(config, qps=settings.kube_qps, burst=settings.kube_burst) as kube:
        ctx = build_context(settings, kube)
        liveness = (
            f"http://0.0.0.0:{settings.liveness_port}/healthz" if settings.liveness_port else None
        )
        operator: Coroutine[Any, Any, None] = kopf.operator(
            memo=ctx,
            namespaces=settings.namespaces,
            clusterwide=not settings.namespaces,
            standalone=settings.peering is None,
            peering_name=settings.peering,
            priority=_peering_priority(settings),
            liveness_endpoint=liveness,
        )
        await operator


def main() -> int:
    settings = OperatorSettings()
    configure_logging(level=settings.log_level)
    if settings.kubeconfig is not None:
        # kopf's own login reads $KUBECONFIG; both clients must act as the same user.
        os.environ["KUBECONFIG"] = str(settings.kubeconfig)
    asyncio.run(run_operator(settings))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
