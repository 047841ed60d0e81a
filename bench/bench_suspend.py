"""Suspend/resume benchmark of local sandboxes: p50/p99 of `suspend()` and of
`Sandbox.resume(id)` (start included: a resume is a new sandbox process) for working trees
of 1 MB, 10 MB and 100 MB (incompressible files of 100 kB), with one bash session's cwd and env.

    .venv/bin/python -m bench.bench_suspend [--rounds 10] [--sizes-mb 1 10 100] [--json out.json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import tempfile
import time
from pathlib import Path

from sandfleet import LocalSandboxConfig, Sandbox
from tests.support.stats import percentile

_FILE_BYTES = 100_000


async def _one_size(size_mb: int, rounds: int, state_dir: Path) -> dict[str, float]:
    config = LocalSandboxConfig(state_dir=state_dir)
    files = size_mb * 1_000_000 // _FILE_BYTES
    sandbox = await Sandbox.local(config)
    suspend_s: list[float] = []
    resume_s: list[float] = []
    try:
        made = await sandbox.bash(
            f"mkdir -p data && for i in $(seq {files}); do head -c {_FILE_BYTES} /dev/urandom"
            " > data/f$i; done; cd data; export ROUND=0"
        )
        assert made.exit_code == 0, made.stderr
        size = 0
        for _ in range(rounds):
            start = time.perf_counter()
            record = await sandbox.suspend()
            suspend_s.append(time.perf_counter() - start)
            size = record.size_bytes
            start = time.perf_counter()
            sandbox = await Sandbox.resume(record.id, state_dir=state_dir)
            resume_s.append(time.perf_counter() - start)
    finally:
        await sandbox.close()
    ms = 1000.0
    return {
        "archive_mb": size / 1e6,
        "suspend_p50_ms": percentile(suspend_s, 0.5) * ms,
        "suspend_p99_ms": percentile(suspend_s, 0.99) * ms,
        "resume_p50_ms": percentile(resume_s, 0.5) * ms,
        "resume_p99_ms": percentile(resume_s, 0.99) * ms,
    }


async def _main(rounds: int, sizes: list[int]) -> dict[str, object]:
    results: dict[str, object] = {"rounds": rounds, "load_before": os.getloadavg()[0]}
    with tempfile.TemporaryDirectory(prefix="sandfleet-bench-suspend-") as state:
        for size in sizes:
            results[f"{size}mb"] = await _one_size(size, rounds, Path(state))
    results["load_after"] = os.getloadavg()[0]
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--sizes-mb", type=int, nargs="+", default=[1, 10, 100])
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    results = asyncio.run(_main(args.rounds, args.sizes_mb))
    text = json.dumps(results, indent=2)
    print(text)
    if args.json is not None:
        args.json.write_text(text + "\n")


if __name__ == "__main__":
    main()
