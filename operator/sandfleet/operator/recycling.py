"""Recycling: a released pool sandbox goes back to its pool, idle, instead of being deleted.

Only for pools with `spec.recycle`, only for a session released while its sandbox serves
(deleted by its owner or the gateway's Release), and only when the sandbox verifies clean:

1. BindSession with the session's token: the pool's token replaces it (the session's is
   refused from then on), the bound environment is emptied, the bash sessions are closed
   and Reset's baseline is the image's again.
2. Reset: every process killed, the working tree and every other writable path the pod's
   runtime restores (SANDFLEET_RUNTIME_RESET_PATHS: /tmp, /var/tmp, /dev/shm, the home,
   so its bash history too) back to their state at start, editor undo history and
   detached commands dropped.
3. The check: a second Reset finds nothing to kill, remove or restore, and GetStats shows
   no bash session and no running command.
4. One conditional pod patch (guarded by the resourceVersion the pod was seen at): labels
   state=idle without a session, the pool its owner again, the uses annotation counted up.

Anything else — a runtime that does not answer, a check that finds something, a pod that
changed meanwhile, `maxUses` reached — and the caller deletes the pod as before. The pod
never leaves its namespace: pools, sessions and pods are all namespaced.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from typing import Any

from sandfleet.api import (
    API_VERSION,
    POOL_PLURAL,
    TOKEN_SECRET_KEY,
    Annotation,
    Label,
    PodState,
    SandboxPoolSpec,
    derive_session_token,
)
from sandfleet.clients.runtime.client import RuntimeClient
from sandfleet.errors import SandfleetError
from sandfleet.fleet.naming import label_value, pool_token_secret_name
from sandfleet.fleet.pod_index import Pod, pod_ip, runtime_address
from sandfleet.fleet.resources import ObjectRef, owner_reference, resets_every_writable_path
from sandfleet.kube import ConflictError, NotFoundError, resource_path
from sandfleet.logs import get_logger
from sandfleet.operator.context import OperatorContext
from sandfleet.operator.provisioning import read_secret_value

log = get_logger(__name__)

RECYCLE_RPC_TIMEOUT_S = 20.0
"""Each runtime call of a recycle (a reset of a large tree takes a while)."""


WRITABLE_DIRECTORIES = (
    'home=~; echo "HOME=$home"; echo "PWD=$PWD"; '
    "find / -xdev \\( -path /proc -o -path /sys \\) -prune -o ! -type l -writable -print -prune"
    " 2>/dev/null; true"
)
"""Run in the sandbox before its reset: the files and directories its user can write (a
directory printed once at its top), which only the image decides: a tenant can make
nothing writable outside a writable directory."""
RESTORED = ("/tmp", "/var/tmp", "/dev/shm", "/run/lock")
"""What the runtime of a recycling pool's pod restores besides its working tree and home
(resources.RECYCLED_RESET_PATHS)."""


def writable_outside_the_reset(listing: str) -> list[str]:
    """The writable directories of WRITABLE_DIRECTORIES' output that no reset restores."""
    lines = listing.splitlines()
    home = next((x[5:] for x in lines if x.startswith("HOME=")), "")
    workdir = next((x[4:] for x in lines if x.startswith("PWD=")), "")
    restored = [p for p in (*RESTORED, home, workdir) if p.startswith("/") and p != "/"]
    return [
        line
        for line in lines
        if line.startswith("/")
        and not any(line == root or line.startswith(root.rstrip("/") + "/") for root in restored)
    ]


class NotCleanError(SandfleetError):
    """The sandbox did not verify clean after its reset: it must not be handed out again."""


async def recycle_released(
    ctx: OperatorContext,
    namespace: str,
    session: str,
    pod_name: str,
    *,
    pool: str | None,
    status: Mapping[str, Any],
    annotations: Mapping[str, str],
) -> bool:
    """The released session's pod recycled into `pool`, the one it came from (True), or
    not; the session's token is derived (a gateway claim) or read from its Secret (still
    there). Every decision is logged with its reason (recycle_skipped, recycle_failed)."""
    where = {"pod": f"{namespace}/{pod_name}", "session": session}
    if not pool:
        log.info("recycle_skipped", **where, reason="not a pool sandbox")
        return False
    try:
        if annotations.get(Annotation.CLAIMED_POD):
            if ctx.session_key is None:
                log.warning("recycle_skipped", **where, reason="no session key to derive its token")
                return False
            token = derive_session_token(ctx.session_key, namespace, session, pod_name)
        else:
            secret = status.get("tokenSecretName")
            if not secret:
                log.warning("recycle_skipped", **where, reason="no token Secret recorded")
                return False
            token = await read_secret_value(ctx.kube, namespace, secret, TOKEN_SECRET_KEY)
    except (SandfleetError, KeyError) as exc:
        log.warning("recycle_failed", **where, reason="token unreadable", error=str(exc))
        return False
    return await recycle_sandbox(ctx, namespace, pod_name, str(pool), token)


async def recycle_sandbox(
    ctx: OperatorContext, namespace: str, pod_name: str, pool: str, session_token: str
) -> bool:
    """True when the pod went back to `pool` as an idle sandbox; False when the caller
    must delete it (recycling off, maxUses reached, or it did not verify clean)."""
    where = {"pod": f"{namespace}/{pod_name}", "pool": pool}
    pod = ctx.pods.get(namespace, pod_name)
    if pod is None or pod["metadata"].get("deletionTimestamp") or pod_ip(pod) is None:
        log.info("recycle_skipped", **where, reason="pod gone, leaving or without an address")
        return False
    try:
        body = await ctx.kube.get(resource_path(API_VERSION, POOL_PLURAL, namespace, pool))
    except NotFoundError:
        log.info("recycle_skipped", **where, reason="pool gone")
        return False
    spec = SandboxPoolSpec.model_validate(body.get("spec") or {})
    uses = _uses(pod) + 1
    reason = _not_recyclable(spec, pod, pool, uses)
    if reason is not None:
        log.info("recycle_skipped", **where, reason=reason, uses=uses)
        return False
    template = (pod["metadata"].get("annotations") or {}).get(Annotation.TEMPLATE_HASH, "")
    returning = ctx.pools_returning
    with returning.returning(namespace, pool, pod_name):
        try:
            pool_token = await _pool_token(ctx, namespace, pool)
            # The first release of a template looks at what its image lets the user write;
            # the releases meanwhile wait for that answer instead of each looking again.
            async with returning.template_lock(namespace, template):
                steps = await _reset_and_verify(
                    runtime_address(str(pod_ip(pod))),
                    session_token,
                    pool_token,
                    check_writable=(namespace, template) not in returning.writable_checked,
                )
                returning.writable_checked.add((namespace, template))
            returned = await _return_to_pool(ctx, pod, ObjectRef.of(body), uses)
        except (SandfleetError, OSError, TimeoutError) as exc:
            log.warning("recycle_failed", **where, reason=type(exc).__name__, error=str(exc)[:300])
            return False
    if returned:
        log.info("sandbox_recycled", **where, uses=uses, **steps)
    else:
        log.warning("recycle_failed", **where, reason="pod changed meanwhile", **steps)
    return returned


def _not_recyclable(spec: SandboxPoolSpec, pod: Pod, pool: str, uses: int) -> str | None:
    """Why a released pod goes instead of back to its pool (None: it may go back)."""
    if (pod["metadata"].get("labels") or {}).get(Label.POOL) != label_value(pool):
        return "not a pod of this pool"
    if not spec.recycle:
        return "the pool does not recycle"
    if uses >= spec.max_uses:
        return f"maxUses ({spec.max_uses}) reached"
    if not resets_every_writable_path(pod):
        return "made before the pool recycled (its reset restores only the working tree)"
    return None


async def _reset_and_verify(
    address: str, session_token: str, pool_token: str, *, check_writable: bool
) -> dict[str, float]:
    """Steps 1-3 of the module's doc; returns each step's seconds (for the log). The look at
    what is writable is an image's property: `check_writable` once per pool template."""
    steps: dict[str, float] = {}
    clock = time.perf_counter()

    def step(name: str) -> None:
        nonlocal clock
        now = time.perf_counter()
        steps[name] = round(now - clock, 3)
        clock = now

    async with asyncio.timeout(5 * RECYCLE_RPC_TIMEOUT_S):
        tenant = RuntimeClient(address, session_token, rpc_timeout_s=RECYCLE_RPC_TIMEOUT_S)
        try:
            await tenant.bind_session(pool_token, {}, session="")
        finally:
            await tenant.close()
        step("bind_s")
        runtime = RuntimeClient(address, pool_token, rpc_timeout_s=RECYCLE_RPC_TIMEOUT_S)
        try:
            if check_writable:
                found = await runtime.run_command(
                    WRITABLE_DIRECTORIES, timeout_s=RECYCLE_RPC_TIMEOUT_S
                )
                step("writable_s")
                outside = writable_outside_the_reset(found.stdout)
                if outside:
                    listed = ", ".join(outside[:5])
                    raise NotCleanError(f"writable outside what its reset restores: {listed}")
            await runtime.reset()
            step("reset_s")
            again = await runtime.reset()
            stats = await runtime.stats()
            step("check_s")
        finally:
            await runtime.close()
    left = {
        "killed_processes": again.killed_processes,
        "removed_paths": again.removed_paths,
        "restored_paths": again.restored_paths,
        "closed_sessions": again.closed_sessions,
        "bash_sessions": stats.bash_sessions,
        "running_commands": stats.running_commands,
    }
    if any(left.values()):
        raise NotCleanError(f"not clean after its reset: {left}")
    return steps


async def _return_to_pool(ctx: OperatorContext, pod: Pod, pool: ObjectRef, uses: int) -> bool:
    """The conditional patch that makes the pod the pool's idle sandbox again; a conflict
    with an unrelated write (the kubelet's status) is retried once on the pod as it is now,
    if it is still the same pod, claimed by the same session and not leaving."""
    metadata = pod["metadata"]
    path = resource_path("v1", "pods", metadata["namespace"], metadata["name"])
    for attempt in range(2):
        try:
            patched = await ctx.kube.patch(path, _idle_patch(pod, pool, uses))
        except NotFoundError:
            return False
        except ConflictError:
            if attempt:
                return False
            try:
                fresh: Pod = await ctx.kube.get(path)
            except NotFoundError:
                return False
            if not _same_claim(pod, fresh):
                return False
            pod = fresh
            continue
        ctx.pods.apply("MODIFIED", patched)
        return True
    return False


def _idle_patch(pod: Pod, pool: ObjectRef, uses: int) -> dict[str, Any]:
    return {
        "metadata": {
            "resourceVersion": pod["metadata"]["resourceVersion"],
            "labels": {Label.STATE.value: PodState.IDLE.value, Label.SESSION.value: None},
            "annotations": {
                Annotation.USES.value: str(uses),
                Annotation.CLAIMED_AT.value: None,
                Annotation.CLAIMED_BY.value: None,
            },
            "ownerReferences": [owner_reference(pool)],
        }
    }


def _same_claim(seen: Pod, fresh: Pod) -> bool:
    labels, fresh_labels = (
        seen["metadata"].get("labels") or {},
        fresh["metadata"].get("labels") or {},
    )
    return (
        fresh["metadata"].get("uid") == seen["metadata"].get("uid")
        and not fresh["metadata"].get("deletionTimestamp")
        and fresh_labels.get(Label.SESSION) == labels.get(Label.SESSION)
        and fresh_labels.get(Label.STATE) == PodState.CLAIMED
    )


def _uses(pod: Pod) -> int:
    text = (pod["metadata"].get("annotations") or {}).get(Annotation.USES, "0")
    return int(text) if text.isdigit() else 0


async def _pool_token(ctx: OperatorContext, namespace: str, pool: str) -> str:
    token = ctx.pool_tokens.get(namespace, pool)
    if token is None:
        name = pool_token_secret_name(pool)
        token = await read_secret_value(ctx.kube, namespace, name, TOKEN_SECRET_KEY)
        ctx.pool_tokens.remember(namespace, pool, token)
    return token
