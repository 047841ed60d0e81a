"""Suspend and resume latency of one session per tree size, round after round, onto a warm
pool: from the `spec.suspend` patch to the phase a watching client sees (Suspended, then the
pod released; Ready), with the pool full again before each step so every resume is warm."""

from __future__ import annotations

import time
from typing import Any

from bench.operator_bench.host import load_average
from bench.operator_bench.stats import latency_ms
from bench.suspend_bench.on_cluster import POOL, SuspendBench
from bench.suspend_bench.session_watch import phase, ready, released, suspended

FILE_BYTES = 100_000
"""Incompressible files of 100 kB, as bench_suspend (local) writes them."""


async def fill_tree(bench: SuspendBench, body: dict[str, Any], size_mb: int) -> None:
    """size_mb of random files in /testbed/data, the default shell in it with ROUND=0."""
    files = size_mb * 1_000_000 // FILE_BYTES
    client = await bench.runtime(body)
    try:
        made = await client.run_command(
            f"mkdir -p /testbed/data && cd /testbed/data && for i in $(seq {files}); do "
            f"head -c {FILE_BYTES} /dev/urandom > f$i; done; export ROUND=0",
            timeout_s=600,
        )
        assert made.exit_code == 0, made.stderr
    finally:
        await client.close()


async def check_and_advance(
    bench: SuspendBench, body: dict[str, Any], files: int, rnd: int
) -> None:
    """The resumed sandbox has the files, the cwd and the env of before; the env moves on
    (so the next round's snapshot differs)."""
    client = await bench.runtime(body)
    try:
        out = await client.run_command(f"pwd; echo $ROUND; ls | wc -l; export ROUND={rnd + 1}")
    finally:
        await client.close()
    expected = ["/testbed/data", str(rnd), str(files)]
    assert out.stdout.split() == expected, f"after resume {rnd}: {out.stdout!r} {out.stderr!r}"


async def size_round(bench: SuspendBench, size_mb: int, rounds: int) -> dict[str, Any]:
    name = f"lat-{size_mb}mb"
    watch = bench.watch
    await bench.create(name, {"poolRef": {"name": POOL}})
    _, body = await watch.until(name, ready)
    assert phase(body) == "Ready", body.get("status")
    await fill_tree(bench, body, size_mb)
    suspend_s: list[float] = []
    released_s: list[float] = []
    resume_s: list[float] = []
    cold = 0
    load_before = load_average()
    for rnd in range(rounds):
        await bench.until_pool_full()
        mark, started = watch.mark(name), time.monotonic()
        await bench.set_suspend(name, True)
        stamp, body = await watch.until(name, suspended, since=mark)
        assert phase(body) == "Suspended", body.get("status")
        suspend_s.append(stamp - started)
        stamp, body = await watch.until(name, released, since=mark)
        released_s.append(stamp - started)
        size = int(body["status"]["snapshot"]["sizeBytes"])

        await bench.until_pool_full()
        mark, started = watch.mark(name), time.monotonic()
        await bench.set_suspend(name, False)
        stamp, body = await watch.until(name, ready, since=mark)
        assert phase(body) == "Ready", body.get("status")
        resume_s.append(stamp - started)
        if (body["status"].get("poolName") or "") != POOL:
            cold += 1
        await check_and_advance(bench, body, size_mb * 1_000_000 // FILE_BYTES, rnd)
        watch.forget(name)
    await bench.kube.delete(bench.path(name))
    return {
        "size_mb": size_mb,
        "session": name,
        "rounds": rounds,
        "snapshot_bytes": size,
        "suspend_to_phase": latency_ms(suspend_s),
        "suspend_to_released": latency_ms(released_s),
        "resume_to_ready": latency_ms(resume_s),
        "cold_resumes": cold,
        "loadavg_before": load_before,
        "loadavg_after": load_average(),
    }
