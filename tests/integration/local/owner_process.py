"""A control-plane stand-in for the crash test: launch one sandbox, start daemons in it,
print its id, then wait to be killed. Usage: python owner_process.py STATE_DIR MECHANISM"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

import structlog

from sandfleet.backends.local import launch_local_runtime
from sandfleet.clients.runtime.client import RuntimeClient
from tests.integration.local.conftest import config_for, pid_namespace

DAEMONS = "sleep 1000 >/dev/null 2>&1 & (setsid sleep 1001 >/dev/null 2>&1 &); echo started"


async def main(state_dir: Path, mechanism: str) -> None:
    runtime = await launch_local_runtime(config_for(mechanism, state_dir))
    client = RuntimeClient(runtime.address, runtime.token)
    result = await client.run_command(DAEMONS, timeout_s=30)
    report = {
        "sandbox_id": runtime.sandbox_id,
        "output": result.stdout,
        "namespace": pid_namespace(runtime.agent_pid) if runtime.mechanism != "none" else None,
        "cgroups": [str(path) for path in runtime.cgroups],
    }
    print(json.dumps(report), flush=True)
    await asyncio.Event().wait()


if __name__ == "__main__":
    # stdout carries the report; logs go to stderr
    structlog.configure(logger_factory=structlog.PrintLoggerFactory(sys.stderr))
    asyncio.run(main(Path(sys.argv[1]), sys.argv[2]))
