"""Start one real local sandbox, run a Python script inside it with the agent's interpreter,
print the script's stdout (its last line is expected to be JSON). For attacks run as another
user in a child process. Usage: python run_in_sandbox.py STATE_DIR TOOL SCRIPT [READ_ONLY_BIND...]
(prints {"unavailable": why} when TOOL cannot isolate here)."""

from __future__ import annotations

import asyncio
import json
import shlex
import sys
from pathlib import Path

from sandfleet.backends.local import LocalSandboxConfig, launch_local_runtime
from sandfleet.backends.local.isolation import probe
from sandfleet.clients.runtime.client import RuntimeClient


async def main(state_dir: Path, tool: str, script: str, binds: list[str]) -> None:
    unavailable = await probe(tool)  # type: ignore[arg-type]
    if unavailable:
        print(json.dumps({"unavailable": unavailable}), flush=True)
        return
    config = LocalSandboxConfig(
        state_dir=state_dir,
        isolation="namespaces",
        namespace_tool=tool,  # type: ignore[arg-type]
        read_only_binds=tuple(Path(bind) for bind in binds),
    )
    runtime = await launch_local_runtime(config)
    client = RuntimeClient(runtime.address, runtime.token)
    try:
        command = f"{shlex.quote(sys.executable)} -I -c {shlex.quote(script)}"
        result = await client.run_command(command, timeout_s=60)
    finally:
        await client.close()
        await runtime.close()
    print(result.stderr[-2000:], file=sys.stderr)
    print(result.stdout, flush=True)


if __name__ == "__main__":
    asyncio.run(main(Path(sys.argv[1]), sys.argv[2], Path(sys.argv[3]).read_text(), sys.argv[4:]))
