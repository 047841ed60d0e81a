"""Keeping an in-memory copy of a collection: list, then watch, list again when the watch
expires, one stream per namespace (or one for the cluster). The operator's pod index and the
gateway's session routes both sit on it."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Sequence
from typing import Any, Protocol

from sandfleet.kube.client import KubeClient
from sandfleet.kube.errors import WatchExpiredError
from sandfleet.kube.paths import resource_path
from sandfleet.logs import get_logger

log = get_logger(__name__)


class Mirror(Protocol):
    """What a fed copy offers: the whole scope after a list, each event after that."""

    synced: asyncio.Event
    """Set once every scope has been listed."""

    def replace_scope(self, namespace: str | None, items: Iterable[Any]) -> None: ...

    def apply(self, event_type: str, item: Any) -> None: ...


async def feed_mirror(
    kube: KubeClient,
    mirror: Mirror,
    api_version: str,
    plural: str,
    namespaces: Sequence[str | None],
    *,
    label_selector: str | None = None,
    what: str,
    retry_delay_s: float = 1.0,
) -> None:
    """List then watch `plural` in each of `namespaces` (None: the whole cluster) into
    `mirror` forever. `what` names the feed in the logs (`feed=`). Cancel to stop."""
    unlisted = set(namespaces)
    async with asyncio.TaskGroup() as group:
        for namespace in namespaces:
            path = resource_path(api_version, plural, namespace)
            group.create_task(
                _feed_one(kube, mirror, path, namespace, unlisted, label_selector=label_selector,
                          what=what, retry_delay_s=retry_delay_s)
            )  # fmt: skip


async def _feed_one(
    kube: KubeClient,
    mirror: Mirror,
    path: str,
    namespace: str | None,
    unlisted: set[str | None],
    *,
    label_selector: str | None,
    what: str,
    retry_delay_s: float,
) -> None:
    while True:
        try:
            items, version = await kube.list_with_version(path, label_selector=label_selector)
            mirror.replace_scope(namespace, items)
            unlisted.discard(namespace)
            if not unlisted:
                mirror.synced.set()
            log.info("mirror_listed", feed=what, namespace=namespace, items=len(items))
            while True:
                async for event in kube.watch(
                    path, resource_version=version, label_selector=label_selector, timeout_s=300
                ):
                    version = event.resource_version or version
                    if event.type != "BOOKMARK":
                        mirror.apply(event.type, event.object)
        except WatchExpiredError:
            log.info("mirror_watch_expired", feed=what, namespace=namespace)
        except asyncio.CancelledError:
            raise
        except Exception as error:  # noqa: BLE001 - the feed must outlive API server hiccups
            log.warning("mirror_watch_failed", feed=what, namespace=namespace, error=str(error))
            await asyncio.sleep(retry_delay_s)
