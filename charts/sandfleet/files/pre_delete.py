"""The chart's pre-delete hook: delete every SandboxSession and SandboxPool the operator
serves while the operator still runs, and wait until they are gone.

Without it, `helm uninstall` would stop the operator with sessions and pools still carrying
its finalizer: they could no longer be deleted, and their sandbox pods would run on with
nobody to reclaim them. Runs in the operator image (the sandfleet package is there).
Environment: SANDFLEET_HOOK_NAMESPACES (JSON list; empty: all namespaces),
SANDFLEET_HOOK_TIMEOUT_SECONDS.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time

from sandfleet.kube import KubeClient, KubeConfig, resource_path

API_VERSION = "sandfleet.dev/v1alpha1"
PLURALS = ("sandboxsessions", "sandboxpools")


async def _remaining(kube: KubeClient, namespaces: list[str | None]) -> list[str]:
    names: list[str] = []
    for namespace in namespaces:
        for plural in PLURALS:
            for item in await kube.list(resource_path(API_VERSION, plural, namespace)):
                meta = item["metadata"]
                names.append(f"{plural}/{meta['namespace']}/{meta['name']}")
    return names


async def delete_and_wait(namespaces: list[str | None], timeout_s: float) -> list[str]:
    """Delete them all; what is still there after timeout_s (empty on success)."""
    deadline = time.monotonic() + timeout_s
    async with KubeClient(KubeConfig.load()) as kube:
        for namespace in namespaces:
            for plural in PLURALS:
                for item in await kube.list(resource_path(API_VERSION, plural, namespace)):
                    meta = item["metadata"]
                    path = resource_path(API_VERSION, plural, meta["namespace"], meta["name"])
                    await kube.delete(path)
        while remaining := await _remaining(kube, namespaces):
            if time.monotonic() > deadline:
                return remaining
            await asyncio.sleep(1.0)
    return []


def main() -> int:
    served: list[str] = json.loads(os.environ.get("SANDFLEET_HOOK_NAMESPACES") or "[]")
    namespaces: list[str | None] = list(served) or [None]
    timeout_s = float(os.environ.get("SANDFLEET_HOOK_TIMEOUT_SECONDS", "240"))
    remaining = asyncio.run(delete_and_wait(namespaces, timeout_s))
    if remaining:
        print(f"still present after {timeout_s:g}s: {', '.join(remaining)}", file=sys.stderr)
        return 1
    print("every SandboxSession and SandboxPool is gone")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
