"""Where the operator's memory goes: run it under tracemalloc, read its snapshots.

Run as a script, this module IS the operator (`python -m sandfleet.operator` through
runpy) with tracemalloc on; SIGUSR1 writes a snapshot to $SANDFLEET_BENCH_SNAPSHOT_DIR.
The bench takes one with no session and one with N sessions Ready, and compares them by
source line and by package. Standard library only: it runs in the operator's process.
"""

from __future__ import annotations

import os
import runpy
import signal
import sys
import tracemalloc
from pathlib import Path
from types import FrameType
from typing import Any

SNAPSHOT_DIR_ENV = "SANDFLEET_BENCH_SNAPSHOT_DIR"
FRAMES = 1
"""Frames per allocation: one keeps tracemalloc's own overhead (and the slowdown) small."""


def main() -> None:
    directory = Path(os.environ[SNAPSHOT_DIR_ENV])
    tracemalloc.start(FRAMES)
    taken = [0]

    def snapshot(_signum: int, _frame: FrameType | None) -> None:
        taken[0] += 1
        target = directory / f"snapshot-{taken[0]}.pickle"
        partial = target.with_suffix(".partial")
        tracemalloc.take_snapshot().dump(str(partial))
        partial.rename(target)  # the bench waits for the final name: never a half file

    signal.signal(signal.SIGUSR1, snapshot)
    sys.argv = ["sandfleet-operator"]
    runpy.run_module("sandfleet.operator", run_name="__main__", alter_sys=True)


def package_of(filename: str) -> str:
    if "site-packages/" in filename:
        return filename.split("site-packages/", 1)[1].split("/", 1)[0]
    if "/sandfleet/" in filename:
        rest = filename.split("/sandfleet/", 1)[1]
        return "sandfleet." + rest.split("/", 1)[0].removesuffix(".py")
    if "/lib/python3" in filename:
        return "stdlib " + filename.split("/lib/python3", 1)[1].split("/")[1].removesuffix(".py")
    return filename


def short_path(filename: str) -> str:
    """A source file named from its package down: "kopf/_cogs/structs/bodies.py"."""
    for marker in ("site-packages/", "/operator/", "/lib/python3.11/"):
        if marker in filename:
            return filename.split(marker, 1)[1]
    return filename


def growth(before: Path, after: Path, sessions: int, top: int = 25) -> dict[str, Any]:
    """Memory that appeared between two snapshots, per 1,000 sessions: by package and by
    source line (where the objects were allocated, not who keeps them)."""
    old = tracemalloc.Snapshot.load(str(before))
    new = tracemalloc.Snapshot.load(str(after))
    per_thousand = 1000 / sessions / 2**20
    lines = new.compare_to(old, "lineno")
    packages: dict[str, float] = {}
    for stat in lines:
        frame = stat.traceback[0]
        packages[package_of(frame.filename)] = (
            packages.get(package_of(frame.filename), 0.0) + stat.size_diff
        )
    total = sum(stat.size_diff for stat in lines)
    return {
        "traced_growth_mib_per_1000": round(total * per_thousand, 1),
        "by_package_mib_per_1000": {
            name: round(size * per_thousand, 1)
            for name, size in sorted(packages.items(), key=lambda kv: -kv[1])[:15]
        },
        "by_line_mib_per_1000": [
            {
                "line": f"{short_path(s.traceback[0].filename)}:{s.traceback[0].lineno}",
                "mib": round(s.size_diff * per_thousand, 2),
                "blocks_per_session": round(s.count_diff / sessions, 1),
            }
            for s in lines[:top]
        ],
    }


if __name__ == "__main__":
    main()
