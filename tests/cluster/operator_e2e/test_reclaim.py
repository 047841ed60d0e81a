"""Every way a sandbox is taken back: TTL, idle timeout, deadline, deletion, orphan sweep."""

from __future__ import annotations

import asyncio

import pytest

from tests.cluster.harness.kube_api import KubeApi
from tests.cluster.harness.operator_harness import (
    SESSIONS,
    OperatorProcess,
    condition,
    create_session,
    leftovers,
    phase_is,
    wait_no_leftovers,
    wait_session,
)
from tests.support.scripted_openai import Hang, Reply, ScriptedOpenAIServer, bash, submit

pytestmark = [pytest.mark.cluster, pytest.mark.slow]


async def test_a_finished_session_is_deleted_when_its_ttl_runs_out(
    kube: KubeApi, namespace: str, operator: OperatorProcess
) -> None:
    async with ScriptedOpenAIServer([Reply(tool_calls=[submit()])]) as model:
        spec = {
            "agent": {"model": "m", "baseURL": model.base_url, "prompt": "go"},
            "lifecycle": {"ttlSecondsAfterFinished": 2},
        }
        await create_session(kube, namespace, "short-lived", spec)
        await wait_session(kube, namespace, "short-lived", phase_is("Succeeded"))
    path = f"{SESSIONS.format(ns=namespace)}/short-lived"
    await kube.wait_for(path, lambda r: r.status == 404, 30)
    await wait_no_leftovers(kube, namespace)


async def test_an_idle_raw_session_expires_and_is_reclaimed(
    kube: KubeApi, namespace: str, operator: OperatorProcess
) -> None:
    await create_session(kube, namespace, "idle", {"lifecycle": {"idleTimeoutSeconds": 3}})
    ready = await wait_session(kube, namespace, "idle", phase_is("Ready"))
    assert ready["status"]["podName"]
    body = await wait_session(kube, namespace, "idle", phase_is("Expired", "Failed"), 60)
    assert body["status"]["phase"] == "Expired"
    assert condition(body, "Completed")["reason"] == "IdleTimeout"
    assert body["status"]["reclaimReason"] == "idle"
    await wait_no_leftovers(kube, namespace)


async def test_a_session_past_its_active_deadline_expires(
    kube: KubeApi, namespace: str, operator: OperatorProcess
) -> None:
    await create_session(kube, namespace, "bounded", {"lifecycle": {"activeDeadlineSeconds": 4}})
    body = await wait_session(kube, namespace, "bounded", phase_is("Expired", "Failed"), 60)
    assert body["status"]["phase"] == "Expired"
    assert condition(body, "Completed")["reason"] == "DeadlineExceeded"
    await wait_no_leftovers(kube, namespace)


async def test_deleting_a_running_session_cancels_its_loop_and_leaves_nothing(
    kube: KubeApi, namespace: str, operator: OperatorProcess
) -> None:
    async with ScriptedOpenAIServer([Reply(tool_calls=[bash("sleep 0")]), Hang()]) as model:
        spec = {"agent": {"model": "m", "baseURL": model.base_url, "prompt": "go"}}
        await create_session(kube, namespace, "doomed", spec)
        await model.wait_for_requests(2, timeout_s=90)
        await kube.checked("DELETE", f"{SESSIONS.format(ns=namespace)}/doomed")
        path = f"{SESSIONS.format(ns=namespace)}/doomed"
        await kube.wait_for(path, lambda r: r.status == 404, 30)
    assert await leftovers(kube, namespace) == []


async def test_the_orphan_sweep_removes_objects_whose_session_is_gone(
    kube: KubeApi, namespace: str, operator: OperatorProcess, runtime_image: str
) -> None:
    labels = {
        "app.kubernetes.io/managed-by": "sandfleet-operator",
        "app.kubernetes.io/component": "sandbox",
        "sandfleet.dev/session": "gone",
    }
    owner = {
        "apiVersion": "sandfleet.dev/v1alpha1",
        "kind": "SandboxSession",
        "name": "gone",
        "uid": "00000000-0000-0000-0000-000000000000",
    }
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        # No owner at all: the garbage collector would never touch it; only the sweep does.
        "metadata": {"name": "stray", "labels": labels},
        "spec": {
            "nodeSelector": {"sandfleet.dev/nowhere": "true"},  # never scheduled: cheap
            "containers": [{"name": "runtime", "image": runtime_image}],
        },
    }
    secret = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": "gone-token", "labels": labels, "ownerReferences": [owner]},
        "stringData": {"token": "x" * 32},
    }
    await kube.checked("POST", f"/api/v1/namespaces/{namespace}/pods", pod)
    await kube.checked("POST", f"/api/v1/namespaces/{namespace}/secrets", secret)
    await wait_no_leftovers(kube, namespace, timeout_s=30)
    assert 'sandfleet_reclaims_total{reason="orphan"}' in operator.metrics()


async def test_a_session_naming_a_missing_template_fails_with_the_reason(
    kube: KubeApi, namespace: str, operator: OperatorProcess
) -> None:
    await create_session(kube, namespace, "no-template", {"templateRef": {"name": "absent"}})
    body = await wait_session(kube, namespace, "no-template", phase_is("Failed"))
    completed = condition(body, "Completed")
    assert completed["reason"] == "TemplateNotFound"
    assert "absent" in completed["message"]
    await asyncio.sleep(0)
