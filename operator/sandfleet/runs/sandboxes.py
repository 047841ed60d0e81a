"""Where `execute_task` gets a task's fresh sandbox: a SandboxSource opens one for a task and
reclaims it when the run is over. Local sandboxes and sandboxes claimed through the gateway
are the two the project ships; any callable of the same shape will do (a test's, serve's)."""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Protocol

from sandfleet.backends.local import LocalSandboxConfig
from sandfleet.errors import SandfleetError
from sandfleet.logs import get_logger
from sandfleet.sandbox.facade import ClusterSandbox, Sandbox
from sandfleet.tasks import TaskSpec

if TYPE_CHECKING:
    from sandfleet.clients.gateway.target import GatewayTarget

log = get_logger(__name__)


class SandboxSource(Protocol):
    """Opens a fresh sandbox for one task (its paths; its tool calls time out after
    `tool_timeout_s`), reclaimed when the context exits. Raises SandfleetError or OSError
    when none can be had."""

    def __call__(
        self, spec: TaskSpec, *, tool_timeout_s: float
    ) -> contextlib.AbstractAsyncContextManager[Sandbox]: ...


@dataclasses.dataclass(frozen=True, slots=True)
class LocalSandboxes:
    """A local sandbox per task: `config` with the task's paths, also hiding the task's
    hidden folders (a benchmark's) from it."""

    config: LocalSandboxConfig = dataclasses.field(default_factory=LocalSandboxConfig)

    def __call__(
        self, spec: TaskSpec, *, tool_timeout_s: float
    ) -> contextlib.AbstractAsyncContextManager[Sandbox]:
        hidden = (*self.config.hidden_paths, *(path.absolute() for path in spec.hidden))
        paths = spec.paths or self.config.paths
        config = dataclasses.replace(self.config, paths=paths, hidden_paths=hidden)
        return Sandbox.local(config, tool_timeout_s=tool_timeout_s)


@dataclasses.dataclass(frozen=True, slots=True)
class GatewaySandboxes:
    """A sandbox per task claimed through the gateway from a pool or a template, released
    when the run is over."""

    target: GatewayTarget
    namespace: str | None = None
    pool: str | None = None
    template: str | None = None
    egress: str | None = None
    """The cluster's spec.network.egress ("Internet", "All"), None for the pool's."""

    def __call__(
        self, spec: TaskSpec, *, tool_timeout_s: float
    ) -> contextlib.AbstractAsyncContextManager[Sandbox]:
        return self._claimed(spec, tool_timeout_s)

    @contextlib.asynccontextmanager
    async def _claimed(self, spec: TaskSpec, tool_timeout_s: float) -> AsyncIterator[Sandbox]:
        # Imported here: a local run need not load the cluster backend.
        from sandfleet.backends.gateway import GatewayBackend, GatewaySandboxRequest
        from sandfleet.fleet.manifests import generate_name_for

        request = GatewaySandboxRequest(
            self.namespace,
            pool=self.pool,
            template=self.template,
            egress=self.egress,
            generate_name=generate_name_for(spec.task.id),
            target=self.target,
            paths=spec.paths,
        )
        opened = await GatewayBackend(request).open()
        sandbox = ClusterSandbox.from_opened(opened, tool_timeout_s=tool_timeout_s)
        try:
            yield sandbox
        finally:
            try:
                await sandbox.close()
            except SandfleetError as error:
                # The run's record matters more than the release: the session's idle timeout
                # or deadline reclaims it (an admin sees it in `kubectl get sbx`).
                log.warning(
                    "gateway_release_failed",
                    task=spec.task.id,
                    session=sandbox.name,
                    error=str(error),
                )
