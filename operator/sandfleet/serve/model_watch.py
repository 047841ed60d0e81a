"""ServedModel objects, watched live: a new object is served within seconds of its
creation, a deleted one no longer, an edited one for the requests that follow; each
object's status says whether it is served (Ready) or why not.

The kube mirror feed (list, then watch, again after an expiry) fills a queue of changed
objects; one worker resolves them in order (reads the key Secret, finds the pool) and
tells the registry. Every object is queued again each resync period: a Secret created
or rotated after its ServedModel is picked up without an edit.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
from collections.abc import Iterable, Sequence
from typing import Any, Protocol

from sandfleet import api
from sandfleet.api import ConditionType, Reason
from sandfleet.kube import KubeClient, KubeConfig, KubeError, NotFoundError, resource_path
from sandfleet.kube.access_review import Authenticator
from sandfleet.kube.mirror import feed_mirror
from sandfleet.logs import get_logger
from sandfleet.serve.config import ServeConfig, ServedModel, ServedModelsWatch
from sandfleet.serve.model_access import NamespaceAccess
from sandfleet.serve.served_models import NotServable, NotServableError, model_name, resolve

log = get_logger(__name__)

Key = tuple[str, str]
"""(namespace, name) of a ServedModel."""


class ModelRegistry(Protocol):
    """Where resolved models go (the ServeService)."""

    def put_model(self, served: ServedModel) -> None: ...

    def drop_model(self, name: str) -> None: ...


def _key(obj: dict[str, Any]) -> Key:
    meta = obj.get("metadata") or {}
    return str(meta.get("namespace") or ""), str(meta.get("name") or "")


class ServedModelWatch:
    """A kube Mirror of the ServedModels in `namespaces`, feeding `registry`."""

    def __init__(
        self,
        kube: KubeClient,
        registry: ModelRegistry,
        namespaces: Sequence[str],
        *,
        resync_s: float = 30.0,
    ) -> None:
        self.synced = asyncio.Event()
        self._kube = kube
        self._registry = registry
        self._namespaces = list(namespaces)
        self._resync_s = resync_s
        self._objects: dict[Key, dict[str, Any]] = {}
        self._pending: dict[Key, dict[str, Any] | None] = {}
        self._wake = asyncio.Event()
        self._served: dict[Key, int | None] = {}
        """The generation each served object was resolved from (a status-only change of
        the same generation needs no new resolution)."""

    def replace_scope(self, namespace: str | None, items: Iterable[Any]) -> None:
        listed = {_key(item): item for item in items}
        for key in [k for k in self._objects if k[0] == namespace and k not in listed]:
            self._queue(key, None)
        for key, item in listed.items():
            self._queue(key, item, force=True)

    def apply(self, event_type: str, item: Any) -> None:
        self._queue(_key(item), None if event_type == "DELETED" else item)

    def _queue(self, key: Key, obj: dict[str, Any] | None, *, force: bool = False) -> None:
        if obj is None:
            self._objects.pop(key, None)
        else:
            self._objects[key] = obj
            generation = (obj.get("metadata") or {}).get("generation")
            if not force and self._served.get(key) == generation:
                return  # our own status write, or a label: nothing to serve differently
        self._pending[key] = obj
        self._wake.set()

    async def run(self) -> None:
        """Feed, resolve and resync until cancelled."""
        async with asyncio.TaskGroup() as group:
            group.create_task(
                feed_mirror(self._kube, self, api.API_VERSION, api.SERVED_MODEL_PLURAL,
                            self._namespaces, what="servedmodels")
            )  # fmt: skip
            group.create_task(self._work())
            group.create_task(self._resync())

    async def _resync(self) -> None:
        while True:
            await asyncio.sleep(self._resync_s)
            for key, obj in list(self._objects.items()):
                self._queue(key, obj, force=True)

    async def _work(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            batch, self._pending = self._pending, {}
            for key, obj in batch.items():
                try:
                    await self._reconcile(key, obj)
                except KubeError as error:  # retried at the next resync
                    log.warning("served_model_not_checked", model=model_name(*key),
                                error=str(error))  # fmt: skip
                except Exception:  # one bad object must not stop the watch (logged, retried)
                    log.exception("served_model_check_failed", model=model_name(*key))

    async def _reconcile(self, key: Key, obj: dict[str, Any] | None) -> None:
        name = model_name(*key)
        if obj is None:
            self._served.pop(key, None)
            self._registry.drop_model(name)
            log.info("served_model_removed", model=name)
            return
        generation = (obj.get("metadata") or {}).get("generation")
        try:
            served = await resolve(self._kube, obj)
        except NotServableError as error:
            self._served.pop(key, None)
            self._registry.drop_model(name)
            log.info("served_model_not_servable", model=name, reason=error.problem.reason,
                     error=error.problem.message)  # fmt: skip
            await self._write_status(obj, error.problem)
            return
        self._registry.put_model(served)
        self._served[key] = generation
        await self._write_status(obj, None)

    async def _write_status(self, obj: dict[str, Any], problem: NotServable | None) -> None:
        """status.conditions[Ready] (and status.model), written only when it changes."""
        namespace, name = _key(obj)
        generation = (obj.get("metadata") or {}).get("generation")
        status = obj.get("status") or {}
        ready = "False" if problem is not None else "True"
        reason = problem.reason if problem is not None else Reason.SERVING
        message = problem.message if problem is not None else (
            f'served as "{model_name(namespace, name)}"'
        )  # fmt: skip
        old: dict[str, Any] = next((c for c in status.get("conditions") or ()
                    if c.get("type") == ConditionType.READY), {})  # fmt: skip
        same = (old.get("status"), old.get("reason"), old.get("message")) == (
            ready, reason, message)  # fmt: skip
        if same and status.get("observedGeneration") == generation:
            return
        now = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        changed = old.get("status") != ready
        condition = {
            "type": ConditionType.READY.value, "status": ready, "reason": str(reason),
            "message": message, "observedGeneration": generation,
            "lastTransitionTime": now if changed else old.get("lastTransitionTime", now),
        }  # fmt: skip
        path = resource_path(api.API_VERSION, api.SERVED_MODEL_PLURAL, namespace, name, "status")
        body = {
            "status": {
                "model": model_name(namespace, name),
                "observedGeneration": generation,
                "conditions": [condition],
            }
        }
        try:
            await self._kube.patch(path, body)
        except NotFoundError:
            return  # deleted meanwhile: its DELETED event follows


class ServedModels:
    """serve's Kubernetes side when it watches ServedModels: its API client (the pod's
    ServiceAccount), the watch feeding the model table, and the access reviews."""

    def __init__(self, kube: KubeClient, registry: ModelRegistry, watch: ServedModelsWatch) -> None:
        self._kube = kube
        self.watch = ServedModelWatch(
            kube, registry, watch.namespaces, resync_s=watch.resync_seconds
        )
        self.access = NamespaceAccess(Authenticator(kube, server="sandfleet serve"))
        self._task: asyncio.Task[None] | None = None

    @classmethod
    def configured(cls, config: ServeConfig, registry: ModelRegistry) -> ServedModels | None:
        """None without a served_models table; reads the kubeconfig (KubeConfigError)."""
        watch = config.served_models
        if watch is None:
            return None
        return cls(KubeClient(KubeConfig.load(watch.kubeconfig)), registry, watch)

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self.watch.run())

    async def aclose(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        await self._kube.close()
