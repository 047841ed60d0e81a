"""Warm claims: an idle pool pod taken, bound and given its session, with each step timed.

A warm claim is one conditional pod patch (labels state=claimed, session=<name>), then at
once a BindSession over the channel IdlePods already holds open (and the input files) and
one SandboxSession create (finalizer and claimed-pod annotation set, so the operator adopts
the pod without binding again). The bound channel goes on to the proxy: the session's first
call dials nothing. Each claim logs where its time went (`steps_ms`).
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime as dt
import posixpath
import random
import time
from collections.abc import Awaitable, Callable, Sequence

import grpc.aio

from sandfleet.api import derive_session_token
from sandfleet.clients.runtime.client import RuntimeClient
from sandfleet.errors import SandfleetError
from sandfleet.fleet.claim_patches import gateway_claim_patch
from sandfleet.fleet.pod_index import Pod, pod_ip, runtime_address
from sandfleet.gateway.claim_types import Claimed, ClaimSpec
from sandfleet.gateway.idle_pods import IdlePods, claimable
from sandfleet.gateway.returning_pods import ReturningPods
from sandfleet.kube import ConflictError, KubeClient, NotFoundError, resource_path
from sandfleet.logs import get_logger

log = get_logger(__name__)

CreateSession = Callable[[ClaimSpec, str, str], Awaitable[object]]
"""Writes the claim's SandboxSession: (spec, session name, claimed pod)."""
Release = Callable[[str, Sequence[str]], Awaitable[int]]
"""Deletes sessions: (namespace, names)."""


def sandbox_path(path: str, workdir: str) -> str:
    """A caller's file path in the sandbox: relative paths start at the working directory."""
    return path if path.startswith("/") else posixpath.join(workdir, path)


class StepTimes:
    """Milliseconds per step of one claim, for its log line; steps may overlap (`timed`)."""

    def __init__(self) -> None:
        self._started = time.perf_counter()
        self.ms: dict[str, float] = {}

    def since_start(self, step: str) -> None:
        self.ms[step] = round((time.perf_counter() - self._started) * 1000, 1)

    async def timed(self, step: str, work: Awaitable[object]) -> None:
        """Awaits `work`, recording how long it took under `step`."""
        started = time.perf_counter()
        await work
        self.ms[step] = round((time.perf_counter() - started) * 1000, 1)


@dataclasses.dataclass(frozen=True, slots=True)
class WarmClaimSettings:
    session_key: bytes
    """The fleet's session key: session tokens derive from it."""
    replica: str
    """This gateway replica's name (claimed-by annotations)."""


class WarmClaims:
    """Takes idle pods of `idle` for claims; `create_session` and `release` are the claim
    path's (claims.Claimer), so a session is written one way whatever its start."""

    def __init__(
        self,
        kube: KubeClient,
        idle: IdlePods,
        settings: WarmClaimSettings,
        *,
        create_session: CreateSession,
        release: Release,
    ) -> None:
        self._kube = kube
        self._idle = idle
        self._settings = settings
        self._create_session = create_session
        self._release = release
        self.returning = ReturningPods(idle.index)
        self.hand_over: Callable[[str, grpc.aio.Channel], None] | None = None
        """Takes the runtime channel a warm claim bound over (the proxy's channel cache),
        keyed by the runtime's address; None: the channel is closed."""

    async def claim(self, spec: ClaimSpec, pool: str, workdir: str, name: str) -> Claimed | None:
        """A warm pod of `pool` claimed, bound and given session `name`; None when none is
        left (after waiting for a released pod on its way back, if any)."""
        steps = StepTimes()
        while True:
            claimed = await self._claim_candidate(spec, pool, workdir, name, steps)
            wait_s = self.returning.wait_left_s(spec.namespace, pool)
            if claimed is not None or wait_s <= 0:
                break
            await self._idle.until_warm(wait_s)  # a released pod on its way back
        if claimed is not None:
            steps.since_start("total")
            log.info(
                "warm_claim",
                session=f"{spec.namespace}/{name}",
                pod=claimed.pod,
                seconds=round(steps.ms["total"] / 1000, 4),
                steps_ms=steps.ms,
            )
        return claimed

    async def _claim_candidate(
        self, spec: ClaimSpec, pool: str, workdir: str, name: str, steps: StepTimes
    ) -> Claimed | None:
        """One of the pool's idle pods claimed as session `name`; None when none is left."""
        candidates = self._idle.candidates(spec.namespace, pool)
        random.shuffle(candidates)  # replicas starting from one list would all race
        for pod in candidates:
            client = self._idle.take(spec.namespace, pod["metadata"]["name"])
            if client is None:
                continue  # another claim of this process took it meanwhile
            try:
                claimed = await self._claim_pod(spec, pod, client, name, workdir, steps=steps)
            except BaseException:
                await client.close()
                raise
            if claimed is None:
                await client.close()
                continue
            if self.hand_over is not None:
                self.hand_over(claimed.address, client.detach_channel())
            else:
                await client.close()
            return claimed
        return None

    async def _claim_pod(
        self,
        spec: ClaimSpec,
        pod: Pod,
        client: RuntimeClient,
        name: str,
        workdir: str,
        *,
        steps: StepTimes,
    ) -> Claimed | None:
        """`pod` claimed as session `name`, bound over `client`, and the session written;
        None when another claim took the pod first."""
        pod_name = pod["metadata"]["name"]
        patch_started = time.perf_counter()
        won = await self._patch_claim(spec.namespace, pod, name, steps)
        steps.ms["patch"] = round((time.perf_counter() - patch_started) * 1000, 1)
        if not won:
            return None
        token = derive_session_token(self._settings.session_key, spec.namespace, name, pod_name)
        # The pod is ours from here on: bind it and write its session at once (the
        # operator's adoption needs neither to wait for the other).
        bound, created = await asyncio.gather(
            steps.timed("bind", self._bind(client, spec, name, token, workdir)),
            steps.timed("create", self._create_session(spec, name, pod_name)),
            return_exceptions=True,
        )
        failure = next((r for r in (bound, created) if isinstance(r, BaseException)), None)
        if failure is not None:
            # The pod may hold the caller's files and a half-made binding: never hand it
            # out again (the pool refills), nor the session made for it.
            if not isinstance(created, BaseException):
                await self._release(spec.namespace, [name])
            await self._delete_pod(spec.namespace, pod_name)
            raise failure
        ip = pod_ip(pod)
        assert ip is not None  # claimable pods have an address
        return Claimed(
            namespace=spec.namespace,
            name=name,
            token=token,
            pod=pod_name,
            address=runtime_address(ip),
            warm=True,
            workdir=workdir,
        )

    async def _patch_claim(self, namespace: str, pod: Pod, session: str, steps: StepTimes) -> bool:
        """The conditional claim patch; False when the pod is no longer claimable (another
        claim took it, or it is leaving). A conflict from an unrelated write (the kubelet's
        status, a newer readiness) is retried once on the pod as it is now: losing a warm
        pod to such a race would send the claim to a cold start for nothing."""
        path = resource_path("v1", "pods", namespace, pod["metadata"]["name"])
        for attempt in range(2):
            patch = gateway_claim_patch(
                session,
                pod["metadata"]["resourceVersion"],
                dt.datetime.now(dt.UTC),
                self._settings.replica,
            )
            try:
                patched = await self._kube.patch(path, patch)
            except NotFoundError:
                break
            except ConflictError:
                steps.ms["patch_conflicts"] = steps.ms.get("patch_conflicts", 0) + 1
                if attempt:
                    break
                try:
                    fresh: Pod = await self._kube.get(path)
                except NotFoundError:
                    break
                if fresh["metadata"].get("uid") != pod["metadata"].get("uid") or not claimable(
                    fresh
                ):
                    break
                pod = fresh
                continue
            self._idle.index.apply("MODIFIED", patched)
            return True
        log.info("warm_claim_lost", pod=f"{namespace}/{pod['metadata']['name']}")
        return False

    async def _bind(
        self, client: RuntimeClient, spec: ClaimSpec, name: str, token: str, workdir: str
    ) -> None:
        await client.bind_session(token, dict(spec.env), f"{spec.namespace}/{name}")
        for path, content, mode in spec.files:
            await client.upload(content, sandbox_path(path, workdir), mode=mode)

    async def _delete_pod(self, namespace: str, pod: str) -> None:
        try:
            await self._kube.delete(resource_path("v1", "pods", namespace, pod), grace_period_s=0)
        except SandfleetError as exc:  # the orphan-claim sweep gets it later
            log.warning("claimed_pod_delete_failed", pod=f"{namespace}/{pod}", error=str(exc))
