"""LocalBackend: opens each sandbox as a runtime agent process on this machine."""

from __future__ import annotations

import dataclasses

from sandfleet.backends.local.config import LocalSandboxConfig
from sandfleet.backends.local.launcher import LocalRuntime, launch_local_runtime
from sandfleet.backends.local.suspend import opened_local
from sandfleet.clients.runtime.client import RuntimeClient
from sandfleet.sandbox.backend import OpenedSandbox


@dataclasses.dataclass(frozen=True, slots=True)
class LocalBackend:
    """A SandboxBackend: every `open()` starts one local sandbox as `config` describes."""

    config: LocalSandboxConfig = dataclasses.field(default_factory=LocalSandboxConfig)

    async def open(self) -> OpenedSandbox[LocalRuntime]:
        """Start a runtime agent in a private directory and connect to it.

        Closing the result stops the agent and every process below it, and removes its
        private directory (unless config.keep_workdir).
        """
        runtime = await launch_local_runtime(self.config)
        try:
            client = RuntimeClient(runtime.address, runtime.token)
        except BaseException:
            await runtime.close()
            raise
        return opened_local(runtime, client, self.config)
