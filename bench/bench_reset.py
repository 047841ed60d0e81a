"""Reset benchmark: p50/p99 of `reset()` after a typical rollout, on a real agent process.

Each round is a small rollout (a few commands, files written and deleted, a background
daemon), then one Reset; the time is measured by the client (RPC included) and reported
beside the server's own figure. The working tree is a small repository-like tree.
    .venv/bin/python -m bench.bench_reset [--rounds 100] [--files 200] [--json out.json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import secrets
import signal
import tempfile
import time
from pathlib import Path

from sandfleet.clients.runtime.client import RuntimeClient
from tests.support.runtime_server import spawn_runtime_process
from tests.support.stats import percentile

_ROLLOUT = (
    "echo patch >> src/file_0.py; rm src/file_1.py; mkdir -p build && echo o > build/out.o;"
    " export STEP=1; (setsid sleep 600 >/dev/null 2>&1 &); true"
)


def _make_tree(root: Path, files: int) -> None:
    (root / "src").mkdir(parents=True)
    for index in range(files):
        (root / "src" / f"file_{index}.py").write_text(f"value_{index} = {index}\n" * 40)


async def _bench(port: int, token: str, rounds: int) -> dict[str, float]:
    client = RuntimeClient(f"127.0.0.1:{port}", token)
    try:
        await client.wait_ready()
        client_s: list[float] = []
        server_s: list[float] = []
        idle_s: list[float] = []
        for _ in range(rounds):
            await client.run_command(_ROLLOUT)
            start = time.perf_counter()
            report = await client.reset()
            client_s.append(time.perf_counter() - start)
            server_s.append(report.duration_s)
        for _ in range(rounds):  # nothing to undo: the floor
            start = time.perf_counter()
            await client.reset()
            idle_s.append(time.perf_counter() - start)
    finally:
        await client.close()
    ms = 1000.0
    return {
        "reset_p50_ms": percentile(client_s, 0.5) * ms,
        "reset_p99_ms": percentile(client_s, 0.99) * ms,
        "server_p50_ms": percentile(server_s, 0.5) * ms,
        "server_p99_ms": percentile(server_s, 0.99) * ms,
        "noop_reset_p50_ms": percentile(idle_s, 0.5) * ms,
        "noop_reset_p99_ms": percentile(idle_s, 0.99) * ms,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=100)
    parser.add_argument("--files", type=int, default=200, help="files in the working tree")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="sandfleet-bench-reset-") as tmp:
        workdir = Path(tmp) / "tree"
        _make_tree(workdir, args.files)
        token = secrets.token_urlsafe(24)
        proc, port = spawn_runtime_process(workdir, token, "--log-level", "WARNING")
        try:
            results = asyncio.run(_bench(port, token, args.rounds))
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(10)
    results["load_1m"] = os.getloadavg()[0]
    results["rounds"] = args.rounds
    results["files"] = args.files
    print(json.dumps(results, indent=2))
    if args.json is not None:
        args.json.write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
