"""Runtime agent benchmark: RPC latency, transfer speed, and memory per agent (RSS and PSS).

Runs real `sandfleet-runtime` processes on loopback, as a sandbox pod would:
    .venv/bin/python -m bench.bench_runtime [--calls 2000] [--agents 200] [--json out.json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import secrets
import signal
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from sandfleet.clients.runtime.client import RuntimeClient
from tests.support.runtime_server import spawn_runtime_process
from tests.support.stats import percentile


def _memory_kib(pid: int) -> dict[str, int]:
    """Rss, Pss and friends of one process from smaps_rollup, in KiB."""
    values: dict[str, int] = {}
    for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines()[1:]:
        key, _, rest = line.partition(":")
        values[key] = int(rest.split()[0])
    return values


def _spawn(workdir: Path, token: str) -> tuple[subprocess.Popen[bytes], int]:
    return spawn_runtime_process(workdir, token, "--log-level", "WARNING")


def _stop(proc: subprocess.Popen[bytes]) -> None:
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


async def _latency(port: int, token: str, calls: int, workdir: Path) -> dict[str, float]:
    client = RuntimeClient(f"127.0.0.1:{port}", token)
    try:
        for _ in range(50):  # warm-up: session start, channel, caches
            await client.run_command("true")
        bash: list[float] = []
        for _ in range(calls):
            start = time.perf_counter()
            await client.run_command("true")
            bash.append(time.perf_counter() - start)
        target = workdir / "view.py"
        target.write_text("".join(f"line_{i} = {i}\n" for i in range(200)))
        view: list[float] = []
        for _ in range(max(200, calls // 4)):
            start = time.perf_counter()
            await client.view(str(target), view_range=[1, 50])
            view.append(time.perf_counter() - start)
        blob = workdir / "blob.bin"
        blob.write_bytes(os.urandom(10 * 1024 * 1024))
        start = time.perf_counter()
        await client.upload(blob, str(workdir / "up.bin"))
        upload_s = time.perf_counter() - start
        start = time.perf_counter()
        await client.download(str(workdir / "up.bin"), workdir / "down.bin")
        download_s = time.perf_counter() - start
    finally:
        await client.close()
    return {
        "bash_true_p50_ms": statistics.median(bash) * 1e3,
        "bash_true_p99_ms": percentile(bash, 0.99) * 1e3,
        "editor_view_p50_ms": statistics.median(view) * 1e3,
        "upload_10mb_ms": upload_s * 1e3,
        "download_10mb_ms": download_s * 1e3,
    }


async def _touch(port: int, token: str) -> None:
    client = RuntimeClient(f"127.0.0.1:{port}", token)
    try:
        await client.run_command("true")
    finally:
        await client.close()


def _fleet(count: int, base: Path) -> dict[str, float]:
    """Start `count` agents, run one command in each (so each has its bash), measure PSS."""
    procs: list[tuple[subprocess.Popen[bytes], int]] = []
    token = secrets.token_urlsafe(16)
    try:
        for i in range(count):
            workdir = base / f"a{i}"
            workdir.mkdir()
            procs.append(_spawn(workdir, token))

        async def touch_all() -> None:
            await asyncio.gather(*(_touch(port, token) for _, port in procs))

        asyncio.run(touch_all())
        time.sleep(1.0)  # let allocators settle after the burst
        agent_pss = [_memory_kib(p.pid)["Pss"] for p, _ in procs]
        agent_rss = [_memory_kib(p.pid)["Rss"] for p, _ in procs]
        shell_pss = 0
        for p, _ in procs:
            for child in Path(f"/proc/{p.pid}/task/{p.pid}/children").read_text().split():
                shell_pss += _memory_kib(int(child))["Pss"]
    finally:
        for p, _ in procs:
            _stop(p)
    return {
        "agents": count,
        "agent_pss_total_mib": sum(agent_pss) / 1024,
        "agent_pss_each_mib": statistics.mean(agent_pss) / 1024,
        "agent_rss_each_mib": statistics.mean(agent_rss) / 1024,
        "with_bash_pss_each_mib": (sum(agent_pss) + shell_pss) / count / 1024,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--agents", type=int, default=200)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    results: dict[str, object] = {}
    with tempfile.TemporaryDirectory(prefix="sandfleet-bench-") as tmp:
        base = Path(tmp)
        token = secrets.token_urlsafe(16)
        (base / "single").mkdir()
        proc, port = _spawn(base / "single", token)
        try:
            time.sleep(1.0)
            idle = _memory_kib(proc.pid)
            results["idle_rss_mib"] = idle["Rss"] / 1024
            results["idle_pss_mib"] = idle["Pss"] / 1024
            results.update(asyncio.run(_latency(port, token, args.calls, base / "single")))
            results["after_load_rss_mib"] = _memory_kib(proc.pid)["Rss"] / 1024
        finally:
            _stop(proc)
        if args.agents:
            (base / "fleet").mkdir()
            results["fleet"] = _fleet(args.agents, base / "fleet")
    print(json.dumps(results, indent=2))
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
