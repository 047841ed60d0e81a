"""The sustained round: `in_flight` claims always in flight for a fixed window (claim -> first
`execute_bash("true")` -> release, then the next), with the operator and the pool's refill
running; and what each claim cost the API server (its write requests, by resource) and the
CPU of every process involved (API server, etcd, kubelet, containerd, operator, gateway).
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from bench.gateway_bench.rounds import GatewayBench, summary_ms
from bench.operator_bench.host import CpuMeter, cluster_pids, load_average
from sandfleet.errors import SandfleetError

WRITE_VERBS = frozenset({"POST", "PUT", "PATCH", "DELETE", "APPLY", "DELETECOLLECTION"})
IGNORED_RESOURCES = frozenset({"leases", "events"})
"""Writes every cluster makes whether or not anyone claims (node and leader leases), and the
Events (rate-limited by the kubelet and the operator, reported apart)."""


def api_writes(metrics_text: str) -> Counter[str]:
    """apiserver_request_total of write verbs, by resource (subresource joined with '/')
    and verb: "pods PATCH"."""
    writes: Counter[str] = Counter()
    for family in text_string_to_metric_families(metrics_text):
        if family.name != "apiserver_request":
            continue
        for sample in family.samples:
            labels = sample.labels
            if sample.name.endswith("_total") and labels.get("verb") in WRITE_VERBS:
                resource = labels.get("resource", "")
                if labels.get("subresource"):
                    resource += "/" + labels["subresource"]
                writes[f"{resource} {labels['verb']}"] += int(sample.value)
    return writes


async def sustained(bench: GatewayBench, in_flight: int, window_s: float) -> dict[str, Any]:
    """Claims completed in `window_s` with `in_flight` always going."""
    await bench.until_pool_full()
    bench.operator_paused(False)
    load = load_average()
    pids = {**cluster_pids(), "operator": bench.operator.pid, "gateway": bench.gateway.pid}
    meter = CpuMeter(pids)
    writes_before = api_writes(await asyncio.to_thread(bench.api_metrics))
    latencies: list[float] = []
    completed = 0
    """Claims done by the end, in the window or after it: what the writes are divided by."""
    failures: list[str] = []
    meter.start()
    started = time.perf_counter()
    deadline = started + window_s

    async def worker() -> None:
        nonlocal completed
        while time.perf_counter() < deadline:
            try:
                seconds, sandbox = await bench.claim_and_first_command()
                await sandbox.close()
            except (SandfleetError, AssertionError) as error:  # counted and reported
                failures.append(f"{type(error).__name__}: {error}"[:200])
                continue
            completed += 1
            if time.perf_counter() <= deadline:
                latencies.append(seconds)

    await asyncio.gather(*(worker() for _ in range(in_flight)))
    wall = time.perf_counter() - started
    done = max(completed, 1)
    cpu = meter.read(per=done)
    # A moment for the last releases' recycles and deletions to be counted with them.
    await asyncio.sleep(5)
    writes = api_writes(await asyncio.to_thread(bench.api_metrics)) - writes_before
    counted = {
        r: n for r, n in writes.items() if r.split()[0].split("/")[0] not in IGNORED_RESOURCES
    }
    return {
        "in_flight": in_flight,
        "window_s": window_s,
        "wall_s": round(wall, 1),
        "load_before": load,
        "load_after": load_average(),
        "done_in_window": len(latencies),
        "completed": completed,
        "claims_per_s": round(len(latencies) / window_s, 2),
        "failures": len(failures),
        "failure_examples": sorted(set(failures))[:5],
        **(summary_ms(latencies) if latencies else {}),
        "api_writes_per_claim": round(sum(counted.values()) / done, 2),
        "api_writes_by_resource": dict(sorted(counted.items())),
        "events_written": sum(n for r, n in writes.items() if r.startswith("events ")),
        "cpu_ms_per_claim": {name: usage.get("cpu_ms_each") for name, usage in cpu.items()},
        "cpu_cores": {name: usage["cpu"] for name, usage in cpu.items()},
    }
