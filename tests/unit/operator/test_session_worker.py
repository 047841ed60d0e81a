"""How a raw session's worker ends: the final status it writes, what it reclaims, in what
order, over a recording Kubernetes client and a scripted sandbox lease."""

from __future__ import annotations

import asyncio
import datetime as dt
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from sandfleet.api import API_VERSION, SESSION_PLURAL, Phase, Reason
from sandfleet.fleet.pod_index import PodIndex
from sandfleet.fleet.resources import PlatformDefaults
from sandfleet.kube import NotFoundError
from sandfleet.operator import session_worker
from sandfleet.operator.context import OperatorContext
from sandfleet.operator.metrics import OperatorMetrics
from sandfleet.operator.pod_watch import PodFailedError, PodProblem
from sandfleet.operator.sandbox_lease import LeaseRequest
from sandfleet.operator.session_status import SessionStatus
from sandfleet.operator.session_worker import SessionWorker
from sandfleet.operator.settings import OperatorSettings
from sandfleet.operator.trajectory_store import DirectoryTrajectoryStore

NS = "team-a"
NOW = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)


class RecordingKube:
    """Every write the worker makes, in order; reads find nothing."""

    def __init__(self, log: list[tuple[str, ...]]) -> None:
        self.log = log
        self.status_patches: list[dict[str, Any]] = []

    async def get(self, path: str) -> dict[str, Any]:
        raise NotFoundError(404, "NotFound", f"{path} not found", {})

    async def patch(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        self.log.append(("patch", path))
        self.status_patches.append(body["status"])
        return body

    async def delete(self, path: str, grace_period_s: int | None = None) -> None:
        self.log.append(("delete", path))

    async def request(self, method: str, path: str, body: object = None) -> dict[str, Any]:
        self.log.append((method, path))
        return {}


class ScriptedLease:
    """A lease whose pod is lost after `lost_after_s` and whose runtime goes idle after
    `idle_after_s` (None: never)."""

    def __init__(
        self, log: list[tuple[str, ...]], *, lost_after_s: float | None, idle_after_s: float | None
    ) -> None:
        self._log = log
        self.waiter = self
        self._lost_after_s = lost_after_s
        self._idle_after_s = idle_after_s
        self.address = "10.0.0.9:50051"
        self.token = "t"

    async def until_lost(self) -> str:
        await _sleep_or_forever(self._lost_after_s)
        return "pod s1 was deleted"

    async def until_idle(self, limit_s: int, check_interval_s: float) -> None:
        await _sleep_or_forever(self._idle_after_s)

    def close(self) -> None:
        self._log.append(("lease_closed",))


async def _sleep_or_forever(seconds: float | None) -> None:
    if seconds is None:
        await asyncio.Event().wait()
    await asyncio.sleep(seconds)


LeaseScript = Callable[[LeaseRequest], Awaitable[Any]]


async def run_worker(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    spec: dict[str, Any],
    lease: LeaseScript,
    log: list[tuple[str, ...]] | None = None,
) -> tuple[RecordingKube, list[tuple[str, ...]], list[tuple[bool, str]]]:
    """Runs one worker to its end; returns the client, the write log (shared with the
    lease when given) and the events."""
    log = [] if log is None else log
    kube = RecordingKube(log)
    events: list[tuple[bool, str]] = []

    def record_event(body: object, *, warning: bool, reason: str, message: str) -> None:
        events.append((warning, reason))

    async def no_files(*_: object) -> list[tuple[str, bytes, int]]:
        return []

    async def scripted_lease(
        ctx: OperatorContext, request: LeaseRequest, status: SessionStatus, event: object
    ) -> Any:
        status.set(podName="s1")
        return await lease(request)

    monkeypatch.setattr(session_worker, "resolve_files", no_files)
    monkeypatch.setattr(session_worker, "lease_sandbox", scripted_lease)
    ctx = OperatorContext(
        settings=OperatorSettings(idle_check_interval_seconds=0.01),
        kube=kube,  # type: ignore[arg-type]
        pods=PodIndex(),
        metrics=OperatorMetrics(),
        store=DirectoryTrajectoryStore(tmp_path),
        defaults=PlatformDefaults("img", operator_namespace="sys", operator_pod_labels={"a": "op"}),
        events=record_event,
        clock=lambda: NOW,
    )
    body = {
        "apiVersion": API_VERSION,
        "kind": "SandboxSession",
        "metadata": {"name": "s1", "namespace": NS, "uid": "u1", "generation": 1},
        "spec": spec,
    }
    await asyncio.wait_for(SessionWorker(ctx, body).run(), 10)
    return kube, log, events


def final_status(kube: RecordingKube) -> dict[str, Any]:
    merged: dict[str, Any] = {}
    for patch in kube.status_patches:
        merged.update(patch)
    return merged


def completed(status: dict[str, Any]) -> tuple[str, str]:
    (condition,) = [c for c in status["conditions"] if c["type"] == "Completed"]
    return condition["status"], condition["reason"]


async def test_an_unplannable_session_fails_then_waits_out_its_ttl_in_the_same_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def never(request: LeaseRequest) -> Any:
        raise AssertionError("no sandbox for an unplannable session")

    spec = {"templateRef": {"name": "missing"}, "lifecycle": {"ttlSecondsAfterFinished": 0}}
    kube, log, events = await run_worker(tmp_path, monkeypatch, spec, never)

    status = final_status(kube)
    assert status["phase"] == Phase.FAILED
    assert completed(status) == ("True", Reason.TEMPLATE_NOT_FOUND)
    assert events == [(True, Reason.TEMPLATE_NOT_FOUND)]
    assert log[-1] == ("DELETE", f"/apis/{API_VERSION}/namespaces/{NS}/{SESSION_PLURAL}/s1")


async def test_a_pod_that_fails_to_start_fails_the_session_and_reclaims_it_as_lost(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def failing(request: LeaseRequest) -> Any:
        raise PodFailedError(PodProblem(Reason.IMAGE_PULL_FAILED, "pod s1: ErrImagePull", True))

    kube, log, events = await run_worker(tmp_path, monkeypatch, {}, failing)

    status = final_status(kube)
    assert status["phase"] == Phase.FAILED
    assert status["reclaimReason"] == "lost"
    assert completed(status) == ("True", Reason.IMAGE_PULL_FAILED)
    assert events == [(True, Reason.IMAGE_PULL_FAILED)]
    assert ("delete", f"/api/v1/namespaces/{NS}/pods/s1") in log


async def test_an_idle_raw_session_expires_and_is_reclaimed_before_its_lease_closes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def idle(request: LeaseRequest) -> Any:
        return ScriptedLease(log, lost_after_s=None, idle_after_s=0)

    log: list[tuple[str, ...]] = []
    spec = {"lifecycle": {"idleTimeoutSeconds": 1}}
    kube, _, events = await run_worker(tmp_path, monkeypatch, spec, idle, log)

    status = final_status(kube)
    assert status["phase"] == Phase.EXPIRED
    assert status["reclaimReason"] == "idle"
    assert completed(status) == ("True", Reason.IDLE_TIMEOUT)
    pod_delete = log.index(("delete", f"/api/v1/namespaces/{NS}/pods/s1"))
    assert log.index(("lease_closed",)) > pod_delete
    assert events == [(True, Reason.IDLE_TIMEOUT)]


async def test_a_lost_raw_session_fails_as_sandbox_lost_without_a_retry(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    leases: list[LeaseRequest] = []

    async def lost(request: LeaseRequest) -> Any:
        leases.append(request)
        return ScriptedLease(log, lost_after_s=0, idle_after_s=None)

    log: list[tuple[str, ...]] = []
    spec = {"lifecycle": {"sandboxLostRetries": 2}}
    kube, _, _ = await run_worker(tmp_path, monkeypatch, spec, lost, log)

    status = final_status(kube)
    assert len(leases) == 1  # a raw session's shells and files are gone with its pod
    assert leases[0].ready_phase == Phase.READY
    assert status["phase"] == Phase.FAILED
    assert status["reclaimReason"] == "lost"
    assert completed(status) == ("True", Reason.SANDBOX_LOST)
    assert ("lease_closed",) in log
