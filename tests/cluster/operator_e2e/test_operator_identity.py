"""The operator's identity is least privilege, and what it reports (metrics, events)."""

from __future__ import annotations

import pytest

from tests.cluster.harness.kube_api import KubeApi
from tests.cluster.harness.operator_harness import (
    OPERATOR_ACCOUNT,
    OPERATOR_NAMESPACE,
    OperatorProcess,
    create_session,
    phase_is,
    wait_session,
)

pytestmark = pytest.mark.cluster

OPERATOR_USER = f"system:serviceaccount:{OPERATOR_NAMESPACE}:{OPERATOR_ACCOUNT}"


async def allowed(kube: KubeApi, verb: str, resource: str, group: str = "", **extra: str) -> bool:
    review = {
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SubjectAccessReview",
        "spec": {
            "user": OPERATOR_USER,
            "groups": ["system:serviceaccounts", f"system:serviceaccounts:{OPERATOR_NAMESPACE}"],
            "resourceAttributes": {"verb": verb, "resource": resource, "group": group, **extra},
        },
    }
    answer = await kube.checked(
        "POST", "/apis/authorization.k8s.io/v1/subjectaccessreviews", review
    )
    return bool(answer["status"]["allowed"])


@pytest.mark.parametrize(
    "action",
    [
        ("create", "pods", "", "exec"),
        ("list", "nodes", "", ""),
        ("create", "deployments", "apps", ""),
        ("update", "secrets", "", ""),
        ("create", "clusterroles", "rbac.authorization.k8s.io", ""),
        ("create", "serviceaccounts", "", "token"),
        ("delete", "customresourcedefinitions", "apiextensions.k8s.io", ""),
        ("update", "sandboxsessions", "sandfleet.dev", ""),
    ],
)
async def test_the_operator_account_cannot_do_what_it_never_needs(
    kube: KubeApi, operator: OperatorProcess, action: tuple[str, str, str, str]
) -> None:
    verb, resource, group, subresource = action
    extra = {"subresource": subresource} if subresource else {}
    assert not await allowed(kube, verb, resource, group, **extra)


async def test_the_metrics_report_sessions_starts_and_reclaims(
    kube: KubeApi, namespace: str, operator: OperatorProcess
) -> None:
    await create_session(kube, namespace, "counted", {})
    await wait_session(kube, namespace, "counted", phase_is("Ready"))
    metrics = operator.metrics()
    assert 'sandfleet_sessions{phase="Ready"}' in metrics
    assert 'sandfleet_session_start_seconds_count{source="cold"}' in metrics
    await kube.checked(
        "DELETE", f"/apis/sandfleet.dev/v1alpha1/namespaces/{namespace}/sandboxsessions/counted"
    )
    await kube.wait_for(
        f"/apis/sandfleet.dev/v1alpha1/namespaces/{namespace}/sandboxsessions/counted",
        lambda r: r.status == 404,
        30,
    )
    after = operator.metrics()
    deleted = [
        line
        for line in after.splitlines()
        if line.startswith('sandfleet_reclaims_total{reason="deleted"}')
    ]
    assert deleted and float(deleted[0].split()[-1]) >= 1


async def test_transitions_are_posted_as_kubernetes_events(
    kube: KubeApi, namespace: str, operator: OperatorProcess
) -> None:
    await create_session(kube, namespace, "noted", {"templateRef": {"name": "absent"}})
    await wait_session(kube, namespace, "noted", phase_is("Failed"))

    def has_event(response: object) -> bool:
        items = getattr(response, "body", {}).get("items") or []
        return any(e.get("reason") == "TemplateNotFound" for e in items)

    await kube.wait_for(
        f"/api/v1/namespaces/{namespace}/events?fieldSelector=involvedObject.name=noted",
        has_event,
        30,
    )
