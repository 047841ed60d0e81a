"""The claim path: warm pool pods claimed and bound by the gateway itself, cold sessions otherwise.

A warm claim (warm_claims.py) is one conditional pod patch, then a BindSession over the
channel IdlePods already holds open and one SandboxSession create, at once. The session's
token derives from the fleet's session key. A pool without idle pods, or a template, gets a
cold session the operator starts.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import grpc.aio
import pydantic

from sandfleet.api import (
    DEFAULT_WORKDIR,
    FINALIZER,
    Annotation,
    Phase,
    SandboxSessionSpec,
    derive_session_token,
)
from sandfleet.clients.runtime.client import RuntimeClient
from sandfleet.fleet.manifests import ManifestError, raw_session_spec, session_body
from sandfleet.fleet.pod_index import pod_ip, runtime_address
from sandfleet.fleet.sessions import SessionClient, SessionGoneError, SessionWaitTimeoutError
from sandfleet.fleet.status import SessionState
from sandfleet.gateway.claim_ids import (
    CALLER_ANNOTATION,
    CLAIM_ID_ANNOTATION,
    check_same_claim,
    claim_session_names,
    session_name,
)
from sandfleet.gateway.claim_sources import Workdirs
from sandfleet.gateway.claim_types import Claimed, ClaimError, ClaimFailure, ClaimSpec
from sandfleet.gateway.idle_pods import IdlePods
from sandfleet.gateway.resume import request_resume
from sandfleet.gateway.warm_claims import WarmClaims, WarmClaimSettings, sandbox_path
from sandfleet.kube import (
    ConflictError,
    InvalidError,
    KubeClient,
    NotFoundError,
)
from sandfleet.logs import get_logger

log = get_logger(__name__)

Resume = Callable[[str, str], Awaitable[None]]
"""Asks for a Suspended session's resume, given its namespace and name."""

_DELETE_OPTIONS = {"apiVersion": "v1", "kind": "DeleteOptions", "propagationPolicy": "Background"}


@dataclasses.dataclass(frozen=True, slots=True)
class ClaimSettings:
    namespaces: tuple[str, ...]
    """Namespaces whose pools the gateway claims from; empty: all."""
    session_key: bytes
    """The fleet's session key (shared with the operator): session tokens derive from it."""
    replica: str
    """This gateway replica's name (claimed-by annotations)."""
    default_timeout_s: float = 120.0
    """How long a cold start may take when the request names no timeout."""
    lookup_cache_s: float = 5.0
    """How long a pool's or template's existence (and workdir) is remembered."""
    rpc_timeout_s: float = 10.0
    """Deadline of each runtime call on the claim path (warm-up, bind, one file)."""


class Claimer:
    """Hands out sandboxes: warm claims from the idle pods, cold sessions for the rest."""

    def __init__(self, kube: KubeClient, settings: ClaimSettings) -> None:
        self._kube = kube
        self._settings = settings
        self.idle = IdlePods(kube, settings.namespaces, rpc_timeout_s=settings.rpc_timeout_s)
        self._workdirs = Workdirs(kube, cache_s=settings.lookup_cache_s)
        self._warm = WarmClaims(
            kube,
            self.idle,
            WarmClaimSettings(settings.session_key, settings.replica),
            create_session=lambda spec, name, pod: self._create_session(
                spec, name, claimed_pod=pod
            ),
            release=self.release,
        )
        self.returning = self._warm.returning

    @property
    def hand_over(self) -> Callable[[str, grpc.aio.Channel], None] | None:
        """Takes the runtime channel a warm claim bound over (the proxy's channel cache),
        keyed by the runtime's address; None: the channel is closed."""
        return self._warm.hand_over

    @hand_over.setter
    def hand_over(self, take: Callable[[str, grpc.aio.Channel], None] | None) -> None:
        self._warm.hand_over = take

    async def start(self) -> None:
        await self.idle.start()
        log.info("claimer_started", replica=self._settings.replica)

    async def stop(self) -> None:
        await self.idle.stop()
        await self._workdirs.close()

    def pod_address(self, namespace: str, pod: str) -> str | None:
        """A sandbox pod's runtime host:port from the watch-fed pod index (no API request)."""
        found = self.idle.index.get(namespace, pod)
        ip = pod_ip(found) if found is not None else None
        return runtime_address(ip) if ip else None

    # --- claim -----------------------------------------------------------------------------
    async def claim(self, spec: ClaimSpec) -> list[Claimed]:
        """`spec.count` Ready sessions, or none: on any failure the ones made are released."""
        if spec.count < 1:
            raise ClaimError(ClaimFailure.INVALID, f"count must be at least 1, not {spec.count}")
        if spec.pool and spec.template:
            raise ClaimError(ClaimFailure.INVALID, "name a pool or a template, not both")
        workdir = await self._workdirs.of_claim(spec)
        if spec.claim_id:
            results = await self._claim_idempotent(spec, workdir)
        else:
            names: Sequence[str | None] = spec.names or [None] * spec.count
            results = await asyncio.gather(
                *(self._claim_one(spec, workdir, name) for name in names),
                return_exceptions=True,
            )
        claimed = [r for r in results if isinstance(r, Claimed)]
        failures = [r for r in results if isinstance(r, BaseException)]
        if failures:
            await self.release(spec.namespace, [c.name for c in claimed])
            failure = failures[0]
            if isinstance(failure, ClaimError):
                raise failure
            raise ClaimError(ClaimFailure.UNAVAILABLE, f"claim failed: {failure}") from failure
        return claimed

    async def _claim_one(self, spec: ClaimSpec, workdir: str, name: str | None) -> Claimed:
        """One sandbox; `name` (an idempotent claim's) or a random one. A session of that
        name made meanwhile (a retry racing the first attempt) is returned instead."""
        try:
            if spec.pool:
                warm_name = name or session_name(spec.generate_name)
                claimed = await self._warm.claim(spec, spec.pool, workdir, warm_name)
                if claimed is not None:
                    return claimed
            return await self._start_cold(spec, workdir, name)
        except ConflictError:
            if name is None or not spec.claim_id:
                raise  # a random name taken: not a retry of this claim
            log.info("claim_raced_its_retry", session=f"{spec.namespace}/{name}")
            return await self._existing(spec, name)

    async def _claim_idempotent(
        self, spec: ClaimSpec, workdir: str
    ) -> list[Claimed | BaseException]:
        """Each of the claim id's sessions: the one an earlier Claim with the id made (a lost
        answer, an attempt still running or cut short), else a new one under that name.
        UNAVAILABLE when an earlier attempt failed and its sessions are being released."""
        names = list(spec.names) or claim_session_names(spec)
        sessions = SessionClient(self._kube, spec.namespace)
        made: set[str] = set()
        for name in names:
            try:
                body = await self._kube.get(sessions.path(name))
            except NotFoundError:
                continue
            check_same_claim(spec, body)
            if body["metadata"].get("deletionTimestamp"):
                raise ClaimError(
                    ClaimFailure.UNAVAILABLE,
                    f"the claim {spec.claim_id!r} failed earlier and its sessions are being "
                    "released; claim with a new claim_id",
                )
            made.add(name)
        if made:
            log.info("claim_repeated", claim_id=spec.claim_id, found=len(made), of=len(names))
        return await asyncio.gather(
            *(
                self._existing(spec, name) if name in made else self._claim_one(spec, workdir, name)
                for name in names
            ),
            return_exceptions=True,
        )

    async def _existing(self, spec: ClaimSpec, name: str) -> Claimed:
        """A session this claim id made before, once Ready (as Connect hands it out)."""
        try:
            body = await self._kube.get(SessionClient(self._kube, spec.namespace).path(name))
        except NotFoundError as exc:
            raise ClaimError(
                ClaimFailure.UNAVAILABLE, f"the claim {spec.claim_id!r}'s session {name} is gone"
            ) from exc
        check_same_claim(spec, body)
        timeout = spec.timeout_s if spec.timeout_s > 0 else self._settings.default_timeout_s
        try:
            return await self.connect(spec.namespace, name, timeout)
        except ClaimError as exc:
            if exc.failure is ClaimFailure.NOT_FOUND:
                raise ClaimError(ClaimFailure.UNAVAILABLE, str(exc)) from exc
            raise

    async def _create_session(
        self, spec: ClaimSpec, name: str | None, *, claimed_pod: str | None = None
    ) -> SessionState:
        """The claim's SandboxSession: of the pool whose pod `claimed_pod` it claimed (the
        operator adopts it), or one the operator starts; named `name` or generated."""
        body = self._session_body(spec)
        metadata = body["metadata"]
        if name is not None:
            metadata.pop("generateName", None)
            metadata["name"] = name
        # Set here so kopf need not add it with a patch of its own.
        metadata["finalizers"] = [FINALIZER]
        metadata["annotations"] = {
            **({Annotation.CLAIMED_POD.value: claimed_pod} if claimed_pod else {}),
            Annotation.CLAIMED_BY.value: self._settings.replica,
            CALLER_ANNOTATION: spec.caller,
            **({CLAIM_ID_ANNOTATION: spec.claim_id} if spec.claim_id else {}),
        }
        try:
            return await SessionClient(self._kube, spec.namespace).create(body)
        except InvalidError as exc:
            raise ClaimError(ClaimFailure.INVALID, f"invalid session: {exc}") from exc

    def _session_body(self, spec: ClaimSpec) -> dict[str, Any]:
        try:
            session_spec = raw_session_spec(
                template=spec.template,
                pool=spec.pool,
                env=spec.env,
                lifecycle=spec.lifecycle,
                egress=spec.egress,
            )
        except ManifestError as exc:
            raise ClaimError(ClaimFailure.INVALID, str(exc)) from exc
        return session_body(session_spec, generate_name=spec.generate_name or "sbx-")

    # --- cold ------------------------------------------------------------------------------
    async def _start_cold(self, spec: ClaimSpec, workdir: str, name: str | None = None) -> Claimed:
        """A session the operator starts (a template, or a pool without idle pods)."""
        sessions = SessionClient(self._kube, spec.namespace)
        created = await self._create_session(spec, name)
        try:
            timeout = spec.timeout_s if spec.timeout_s > 0 else self._settings.default_timeout_s
            claimed = await self._ready(
                sessions, created, timeout, claimed_pod=None, workdir=workdir
            )
            if spec.files:
                client = RuntimeClient(claimed.address, claimed.token)
                try:
                    for path, content, mode in spec.files:
                        await client.upload(content, sandbox_path(path, workdir), mode=mode)
                finally:
                    await client.close()
        except BaseException:
            await sessions.delete(created.name)
            raise
        log.info("cold_claim", session=created.reference, pod=claimed.pod)
        return claimed

    async def _ready(
        self,
        sessions: SessionClient,
        state: SessionState,
        timeout_s: float,
        *,
        claimed_pod: str | None,
        workdir: str,
    ) -> Claimed:
        """The session once Ready (waiting up to `timeout_s` from `state`) with its token;
        UNAVAILABLE when it ends or the wait runs out first."""
        if not state.ready:
            try:
                state = await sessions.wait_until(
                    state.name, lambda s: s.ready or s.finished, timeout_s, since=state
                )
            except (SessionWaitTimeoutError, SessionGoneError) as exc:
                raise ClaimError(ClaimFailure.UNAVAILABLE, str(exc)) from exc
        if not state.ready or state.pod_ip is None or state.pod_name is None:
            raise ClaimError(ClaimFailure.UNAVAILABLE, f"not serving: {state.summary()}")
        return Claimed(
            namespace=state.namespace,
            name=state.name,
            token=await self._token(sessions, state, claimed_pod),
            pod=state.pod_name,
            address=runtime_address(state.pod_ip),
            warm=bool(claimed_pod),
            workdir=workdir,
        )

    async def _token(
        self, sessions: SessionClient, state: SessionState, claimed_pod: str | None
    ) -> str:
        """A gateway-claimed session's token is derived; any other's is in its Secret."""
        if claimed_pod:
            key = self._settings.session_key
            return derive_session_token(key, state.namespace, state.name, claimed_pod)
        if not state.token_secret_name:
            raise ClaimError(ClaimFailure.UNAVAILABLE, f"{state.reference} has no token Secret")
        return await sessions.runtime_token(state.token_secret_name)

    # --- connect / release ---------------------------------------------------------------
    async def connect(
        self, namespace: str, name: str, timeout_s: float, *, resume: Resume | None = None
    ) -> Claimed:
        """An existing session once Ready: its runtime's address and token. A Suspended one
        is resumed first, by `resume` (the gateway's, which admits it by the quota) or by
        asking the operator directly."""
        sessions = SessionClient(self._kube, namespace)
        try:
            body = await self._kube.get(sessions.path(name))
        except NotFoundError as exc:
            raise ClaimError(
                ClaimFailure.NOT_FOUND, f"no SandboxSession {namespace}/{name}"
            ) from exc
        annotations = body["metadata"].get("annotations") or {}
        timeout = timeout_s if timeout_s > 0 else self._settings.default_timeout_s
        state = SessionState.from_object(body)
        if state.phase == Phase.SUSPENDED:  # resume on access: the wait below covers it
            await (resume or functools.partial(request_resume, self._kube))(namespace, name)
        return await self._ready(
            sessions,
            state,
            timeout,
            claimed_pod=annotations.get(Annotation.CLAIMED_POD),
            workdir=await self._session_workdir(namespace, body),
        )

    async def release(self, namespace: str, names: Sequence[str]) -> int:
        """Delete the sessions (the operator reclaims their pods); returns how many existed."""
        sessions = SessionClient(self._kube, namespace)

        async def delete(name: str) -> int:
            try:
                # The answer (the session, its finalizer still on) says which pod comes back.
                body = await self._kube.request("DELETE", sessions.path(name), _DELETE_OPTIONS)
            except NotFoundError:
                return 0
            self.returning.released(namespace, body)
            return 1

        return sum(await asyncio.gather(*(delete(n) for n in names)))

    async def _session_workdir(self, namespace: str, body: dict[str, Any]) -> str:
        try:
            spec = SandboxSessionSpec.model_validate(body.get("spec") or {})
        except pydantic.ValidationError:
            return DEFAULT_WORKDIR  # the operator reports what is wrong with it
        return await self._workdirs.of_session(namespace, spec)
