"""`sandfleet serve` benchmarks: its overhead over calling the upstream directly, QPM, memory.

    .venv/bin/python -m bench.bench_serve            # all scenarios, prints a table
    .venv/bin/python -m bench.bench_serve --quick    # fewer requests, shorter QPM runs
    .venv/bin/python -m bench.bench_serve --scenarios overhead    # or e.g. 16,64,256

Every part is real and separate: the scripted instant upstream (tests/support/
scripted_openai.py, its own process per served model), `sandfleet serve --config` (its
own process, local namespaced sandboxes), and this process as the client (the official
`openai` package).
- overhead-1: a request answered in one turn with no tool (the model submits at once),
  sequential, paced so the warm pool keeps a started sandbox ready; p50 of serve minus p50
  of the same client calling the upstream directly.
- overhead-3: a 3-turn loop (two `true` commands, then submit): serve's time per request
  beyond the tool commands (its accounting's tool_time_s) minus three direct upstream calls.
- qpm-N (N = 16, 64, 256): N clients in a closed loop for a fixed time against the one-turn
  model (every request takes a fresh sandbox: the warm pool, half of N up to MAX_WARM,
  refills behind them), and the memory per request in flight (the server's peak RSS growth
  over idle divided by N; the sandboxes' peak RSS, warm ones included).
The load average is printed beside the numbers: on a shared 2-core machine it moves them.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import socket
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import openai

from tests.support.stats import percentile

ROOT = Path(__file__).resolve().parents[1]
MESSAGES: Any = [{"role": "user", "content": "hi"}]
MAX_WARM = 64
"""Warm sandboxes kept at most (half the concurrency below that): each one is a runtime
process holding memory, and starting more at once only queues them on a small machine."""


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@contextlib.contextmanager
def upstream(tool_turns: int) -> Iterator[str]:
    """The scripted instant upstream in its own process; yields its base URL."""
    process = subprocess.Popen(
        [sys.executable, "-m", "tests.support.scripted_openai", "--bench-tool-turns",
         str(tool_turns)],
        cwd=ROOT, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert process.stdout is not None
        port = int(process.stdout.readline())
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        process.terminate()
        process.wait(timeout=30)


def write_config(folder: Path, one: str, three: str, warm: int) -> Path:
    path = folder / "serve.toml"
    models = "".join(
        textwrap.dedent(f"""
        [models.{name}]
        upstream.base_url = "{url}"
        upstream.model = "m"
        max_turns = 10
        max_retries = 0
        warm = {warm}
        """)
        for name, url in (("one", one), ("three", three))
    )
    path.write_text(
        f'[server]\nstate_dir = "{folder / "state"}"\nmax_concurrent_per_tenant = 1024\n'
        f"metrics = true\n{models}"
    )
    return path


@contextlib.asynccontextmanager
async def serve(config: Path, folder: Path) -> AsyncIterator[tuple[str, int]]:
    """`sandfleet serve` as its own process; yields (base URL, pid)."""
    port = free_port()
    env = {**os.environ, "HOME": str(folder), "XDG_CACHE_HOME": str(folder / ".cache")}
    env.pop("SANDFLEET_SERVE_API_KEY", None)
    process = await asyncio.create_subprocess_exec(
        str(ROOT / ".venv" / "bin" / "sandfleet"), "serve", "--config", str(config),
        "--port", str(port), env=env, stderr=asyncio.subprocess.DEVNULL,
    )  # fmt: skip
    try:
        async with httpx.AsyncClient() as probe, asyncio.timeout(60):
            while True:
                try:
                    await probe.get(f"http://127.0.0.1:{port}/healthz")
                    break
                except httpx.TransportError:
                    await asyncio.sleep(0.1)
        yield f"http://127.0.0.1:{port}/v1", process.pid
    finally:
        process.send_signal(2)
        async with asyncio.timeout(120):
            await process.wait()


def rss_mib(pid: int) -> float:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def sandbox_rss_mib(state_dir: Path) -> float:
    """The RSS of every process whose command line names the sandboxes' state dir (the
    runtime agents; the server's own names only its config file)."""
    total = 0.0
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if str(state_dir).encode() in (entry / "cmdline").read_bytes():
                total += rss_mib(int(entry.name))
        except OSError:
            continue
    return total


async def timed(call: Any) -> float:
    started = time.perf_counter()
    await call
    return time.perf_counter() - started


async def overhead(client: openai.AsyncOpenAI, direct: openai.AsyncOpenAI, n: int,
                   pause_s: float) -> dict[str, float]:  # fmt: skip
    plain, served = [], []
    for _ in range(n):
        plain.append(await timed(direct.chat.completions.create(model="m", messages=MESSAGES)))
        await asyncio.sleep(pause_s)
        served.append(await timed(client.chat.completions.create(model="one", messages=MESSAGES)))
    return {"direct_p50_ms": percentile(plain, 0.5) * 1000,
            "serve_p50_ms": percentile(served, 0.5) * 1000,
            "added_p50_ms": (percentile(served, 0.5) - percentile(plain, 0.5)) * 1000}  # fmt: skip


async def overhead_three(client: openai.AsyncOpenAI, direct: openai.AsyncOpenAI, n: int,
                         pause_s: float) -> dict[str, float]:  # fmt: skip
    plain, beyond = [], []
    for _ in range(n):
        three = [await timed(direct.chat.completions.create(model="m", messages=MESSAGES))
                 for _ in range(3)]  # fmt: skip
        plain.append(sum(three))
        await asyncio.sleep(pause_s)
        started = time.perf_counter()
        answer = await client.chat.completions.create(model="three", messages=MESSAGES)
        wall = time.perf_counter() - started
        beyond.append(wall - (answer.model_extra or {})["sandfleet"]["tool_time_s"])
    return {"direct_3_calls_p50_ms": percentile(plain, 0.5) * 1000,
            "serve_beyond_tools_p50_ms": percentile(beyond, 0.5) * 1000,
            "added_p50_ms": (percentile(beyond, 0.5) - percentile(plain, 0.5)) * 1000}  # fmt: skip


async def qpm(client: openai.AsyncOpenAI, concurrency: int, seconds: float, *, pid: int,
              state_dir: Path, metrics_url: str) -> dict[str, object]:  # fmt: skip
    idle_rss = rss_mib(pid)
    done = failed = 0
    failures: dict[str, int] = {}
    peak = {"server": 0.0, "sandboxes": 0.0, "loops": 0.0}
    stop = time.monotonic() + seconds

    async def worker() -> None:
        nonlocal done, failed
        while time.monotonic() < stop:
            try:
                await client.chat.completions.create(model="one", messages=MESSAGES)
                done += 1
            except openai.OpenAIError as error:
                failed += 1
                kind = f"{type(error).__name__} {getattr(error, 'status_code', '')}".strip()
                failures[kind] = failures.get(kind, 0) + 1

    async def sampler() -> None:
        async with httpx.AsyncClient(timeout=60) as http:
            while time.monotonic() < stop:
                try:
                    text = (await http.get(metrics_url)).text
                except httpx.HTTPError:
                    continue
                loops = sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
                            if line.startswith("sandfleet_serve_loops_in_flight{"))  # fmt: skip
                peak["server"] = max(peak["server"], rss_mib(pid) - idle_rss)
                peak["loops"] = max(peak["loops"], loops)
                peak["sandboxes"] = max(peak["sandboxes"], sandbox_rss_mib(state_dir))
                await asyncio.sleep(0.5)

    started = time.monotonic()
    await asyncio.gather(sampler(), *(worker() for _ in range(concurrency)))
    elapsed = time.monotonic() - started
    # Every client always has one request in flight: waiting for a sandbox to start, or in
    # its loop (a one-turn loop is short, so few are in the loop at any sampled moment).
    return {"qpm": done / elapsed * 60, "failed": failed, "failures": failures,
            "peak_loops": peak["loops"],
            "server_mib_per_request": peak["server"] / concurrency,
            "sandboxes_peak_mib": peak["sandboxes"]}  # fmt: skip


async def main(quick: bool, levels: list[int | None]) -> None:
    n, seconds = (10, 8.0) if quick else (40, 20.0)
    with tempfile.TemporaryDirectory(prefix="sandfleet-bench-serve-") as scratch:
        folder = Path(scratch)
        with upstream(0) as one, upstream(2) as three:
            for concurrency in levels:
                warm = 2 if concurrency is None else min(concurrency // 2, MAX_WARM)
                config = write_config(folder, one, three, warm)
                async with serve(config, folder) as (base_url, pid):
                    client = openai.AsyncOpenAI(base_url=base_url, api_key="x", max_retries=0,
                                                timeout=600)  # fmt: skip
                    direct = openai.AsyncOpenAI(base_url=one, api_key="x", max_retries=0)
                    await asyncio.sleep(3 + warm / 8)  # the warm pool fills
                    print(f"load average {os.getloadavg()}", flush=True)
                    if concurrency is None:
                        print("overhead-1", await overhead(client, direct, n, 0.5), flush=True)
                        print("overhead-3", await overhead_three(client, direct, n, 0.5),
                              flush=True)  # fmt: skip
                    else:
                        metrics_url = base_url.removesuffix("/v1") + "/metrics"
                        result = await qpm(
                            client, concurrency, seconds, pid=pid,
                            state_dir=folder / "state", metrics_url=metrics_url,
                        )  # fmt: skip
                        print(f"qpm-{concurrency}", result, flush=True)
                    print(f"load average {os.getloadavg()}", flush=True)
                    await client.close()
                    await direct.close()


def levels_of(text: str) -> list[int | None]:
    """`overhead,16,64,256`: the overhead scenarios and QPM at each concurrency."""
    return [None if item == "overhead" else int(item) for item in text.split(",") if item]


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true")
    parser.add_argument(
        "--scenarios",
        default="overhead,16,64,256",
        type=levels_of,
        help="overhead and/or QPM concurrency levels, comma-separated",
    )
    arguments = parser.parse_args()
    asyncio.run(main(arguments.quick, arguments.scenarios))
