"""Where a claim's sandbox comes from (a pool, a template, the default image) and its
working directory, each pool's and template's checked to exist at most every few seconds."""

from __future__ import annotations

import enum
import time

from sandfleet.api import DEFAULT_WORKDIR, PodTemplate, Reason, SandboxSessionSpec
from sandfleet.fleet.plans import PlanError, pool_pod_template, read_pool, read_template
from sandfleet.gateway.claim_types import ClaimError, ClaimFailure, ClaimSpec
from sandfleet.kube import KubeClient


class SourceKind(enum.Enum):
    """What a session's sandbox is made from."""

    POOL = "pool"
    TEMPLATE = "template"


class Workdirs:
    """Working directories of pools and templates, each remembered for `cache_s` seconds."""

    def __init__(self, kube: KubeClient, *, cache_s: float) -> None:
        self._kube = kube
        self._cache_s = cache_s
        self._seen: dict[tuple[str, SourceKind, str], tuple[float, str]] = {}

    async def of_claim(self, spec: ClaimSpec) -> str:
        """The working directory of the claim's pool or template; NOT_FOUND if it is missing."""
        if spec.pool:
            return await self.lookup(spec.namespace, SourceKind.POOL, spec.pool)
        if spec.template:
            return await self.lookup(spec.namespace, SourceKind.TEMPLATE, spec.template)
        return DEFAULT_WORKDIR

    async def of_session(self, namespace: str, spec: SandboxSessionSpec) -> str:
        """An existing session's working directory (the default when its source is gone)."""
        for kind, ref in (
            (SourceKind.POOL, spec.pool_ref),
            (SourceKind.TEMPLATE, spec.template_ref),
        ):
            if ref is not None:
                try:
                    return await self.lookup(namespace, kind, ref.name)
                except ClaimError:
                    return DEFAULT_WORKDIR
        return (spec.template or PodTemplate()).workdir

    async def lookup(self, namespace: str, kind: SourceKind, name: str) -> str:
        key = (namespace, kind, name)
        cached = self._seen.get(key)
        if cached is not None and time.monotonic() - cached[0] < self._cache_s:
            return cached[1]
        workdir = await self._read(namespace, kind, name)
        self._seen[key] = (time.monotonic(), workdir)
        return workdir

    async def _read(self, namespace: str, kind: SourceKind, name: str) -> str:
        try:
            if kind is SourceKind.POOL:
                pool = await read_pool(self._kube, namespace, name)
                pod, _ = await pool_pod_template(self._kube, namespace, pool)
            else:
                pod = (await read_template(self._kube, namespace, name)).pod
        except PlanError as exc:
            missing = exc.reason in {Reason.POOL_NOT_FOUND, Reason.TEMPLATE_NOT_FOUND}
            failure = ClaimFailure.NOT_FOUND if missing else ClaimFailure.INVALID
            raise ClaimError(failure, str(exc)) from exc
        return (pod or PodTemplate()).workdir
