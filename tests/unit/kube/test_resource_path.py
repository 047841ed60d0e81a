"""resource_path: core and group APIs, namespaced and cluster-scoped, objects and subresources."""

from __future__ import annotations

import pytest

from sandfleet.kube import resource_path


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (("v1", "pods", "ns", "p"), "/api/v1/namespaces/ns/pods/p"),
        (("v1", "pods", "ns"), "/api/v1/namespaces/ns/pods"),
        (("v1", "pods"), "/api/v1/pods"),
        (("v1", "namespaces", None, "ns"), "/api/v1/namespaces/ns"),
        (
            ("v1", "serviceaccounts", "ns", "sa", "token"),
            "/api/v1/namespaces/ns/serviceaccounts/sa/token",
        ),
        (
            ("sandfleet.dev/v1alpha1", "sandboxsessions", "ns", "s", "status"),
            "/apis/sandfleet.dev/v1alpha1/namespaces/ns/sandboxsessions/s/status",
        ),
        (
            ("sandfleet.dev/v1alpha1", "sandboxpools", "ns"),
            "/apis/sandfleet.dev/v1alpha1/namespaces/ns/sandboxpools",
        ),
        (
            ("rbac.authorization.k8s.io/v1", "clusterroles", None, "system:aggregate-to-edit"),
            "/apis/rbac.authorization.k8s.io/v1/clusterroles/system:aggregate-to-edit",
        ),
    ],
)
def test_paths_follow_the_api_servers_layout(args: tuple[str | None, ...], expected: str) -> None:
    assert resource_path(*args) == expected  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("kwargs", "problem"),
    [
        ({"api_version": "", "plural": "pods"}, "invalid apiVersion"),
        ({"api_version": "a/b/c", "plural": "pods"}, "invalid apiVersion"),
        ({"api_version": "/v1", "plural": "pods"}, "invalid apiVersion"),
        ({"api_version": "v1", "plural": "pods", "namespace": "a/b"}, "invalid namespace"),
        ({"api_version": "v1", "plural": "pods", "namespace": "ns", "name": ""}, "invalid name"),
        ({"api_version": "v1", "plural": "pods", "name": ".."}, "invalid name"),
        ({"api_version": "v1", "plural": "pods", "subresource": "status"}, "needs an object name"),
    ],
)
def test_malformed_parts_are_refused_instead_of_building_another_path(
    kwargs: dict[str, str], problem: str
) -> None:
    with pytest.raises(ValueError, match=problem):
        resource_path(**kwargs)
