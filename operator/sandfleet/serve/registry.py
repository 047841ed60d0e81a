"""The models served now, each with its sandbox source and upstream client, changed live
(ServedModel objects come and go): a new model is usable at once, a dropped or replaced
one keeps its source and client until the requests running on it end, then closes them."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from collections.abc import Iterator

from sandfleet.agent import OpenAIChatModel, openai_model
from sandfleet.backends.local import LocalSandboxConfig
from sandfleet.clients.gateway.target import GatewayTarget
from sandfleet.logs import get_logger
from sandfleet.serve.config import ServeConfig, ServedModel
from sandfleet.serve.metrics import ServeMetrics
from sandfleet.serve.sandboxes import LocalSandboxSource, SandboxSource

log = get_logger(__name__)


@dataclasses.dataclass(eq=False)
class Entry:
    served: ServedModel
    source: SandboxSource
    upstream: OpenAIChatModel | None = None
    """Opened when the table starts (or at once, for a model added after)."""
    jobs: int = 0
    """Requests running on it now."""
    retired: bool = False


class ModelTable:
    def __init__(self, config: ServeConfig, metrics: ServeMetrics) -> None:
        """Cluster mode resolves the gateway and serve's identity here, so a missing
        address or token fails at start (GatewayConfigError)."""
        self._config = config
        self._metrics = metrics
        self.models: dict[str, ServedModel] = dict(config.models)
        on_cluster = any(m.spec.sandbox == "cluster" for m in config.models.values())
        self._target: GatewayTarget | None = None
        if on_cluster or config.served_models is not None:
            from sandfleet.serve.cluster_sandboxes import resolve_target

            self._target = resolve_target(config.gateway)
        self._entries = {name: Entry(m, self._new_source(m)) for name, m in self.models.items()}
        self._running: dict[int, Entry] = {}
        """Retired entries with requests still running, by id() of their ServedModel."""
        self._closing: set[asyncio.Task[None]] = set()
        self._started = False

    def start(self) -> None:
        for entry in self._entries.values():
            entry.upstream = openai_model(entry.served.agent)
            entry.source.start()
        self._started = True

    def put(self, served: ServedModel) -> None:
        """Serve `served` (a model of that name is replaced: new requests use the new one)."""
        old = self._entries.get(served.name)
        if old is not None and old.served == served:
            return
        entry = Entry(served, self._new_source(served))
        if self._started:
            entry.upstream = openai_model(served.agent)
            entry.source.start()
        self._entries[served.name] = entry
        self.models[served.name] = served
        self._metrics.add_model(served.name)
        log.info("serve_model_added" if old is None else "serve_model_changed", model=served.name)
        if old is not None:
            self._retire(old)

    def drop(self, name: str) -> None:
        """Serve `name` no more (requests running on it finish)."""
        self.models.pop(name, None)
        entry = self._entries.pop(name, None)
        if entry is not None:
            self._retire(entry)

    def entry(self, served: ServedModel) -> Entry:
        """The entry a request for `served` runs on, even after `served` was replaced."""
        current = self._entries.get(served.name)
        if current is not None and current.served is served:
            return current
        return self._running.get(id(served)) or self._entries[served.name]

    def named(self, name: str) -> Entry | None:
        return self._entries.get(name)

    def sources(self) -> list[SandboxSource]:
        return [entry.source for entry in self._entries.values()]

    @contextlib.contextmanager
    def in_use(self, served: ServedModel) -> Iterator[Entry]:
        """The entry of `served`, counted as in use until the block ends."""
        entry = self.entry(served)
        entry.jobs += 1
        try:
            yield entry
        finally:
            entry.jobs -= 1
            if entry.retired and entry.jobs == 0:
                self._close(entry)

    def _retire(self, entry: Entry) -> None:
        entry.retired = True
        if entry.jobs == 0:
            self._close(entry)
        else:
            self._running[id(entry.served)] = entry

    def _close(self, entry: Entry) -> None:
        self._running.pop(id(entry.served), None)
        task = asyncio.get_running_loop().create_task(_close_entry(entry))
        self._closing.add(task)
        task.add_done_callback(self._closing.discard)

    async def aclose(self) -> None:
        entries = [*self._entries.values(), *self._running.values()]
        await asyncio.gather(*(_close_entry(entry) for entry in entries), *self._closing)

    def _new_source(self, served: ServedModel) -> SandboxSource:
        spec, config = served.spec, self._config
        if spec.sandbox == "cluster":
            from sandfleet.serve.cluster_sandboxes import ClusterSandboxSource

            assert self._target is not None
            return ClusterSandboxSource(
                self._target, config.gateway, spec,
                conversation_ttl_s=config.server.conversation_ttl_seconds,
            )  # fmt: skip
        local = LocalSandboxConfig(
            isolation=spec.isolation, egress=spec.egress, state_dir=config.server.state_dir
        )
        return LocalSandboxSource(local, tool_timeout_s=spec.tool_timeout_seconds, warm=spec.warm)


async def _close_entry(entry: Entry) -> None:
    await entry.source.aclose()
    if entry.upstream is not None:
        await entry.upstream.aclose()
