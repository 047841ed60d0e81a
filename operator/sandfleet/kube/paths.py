"""REST paths of Kubernetes resources, built from apiVersion, plural and optional parts."""

from __future__ import annotations

from urllib.parse import quote


def _segment(value: str, what: str) -> str:
    if not value or "/" in value or value in (".", ".."):
        raise ValueError(f"invalid {what} for a resource path: {value!r}")
    # Names are DNS-like, but RBAC names may hold ":" (system:...); keep that readable.
    return quote(value, safe=":@")


def resource_path(
    api_version: str,
    plural: str,
    namespace: str | None = None,
    name: str | None = None,
    subresource: str | None = None,
) -> str:
    """The path of a collection, an object or an object's subresource.

    `api_version` is what objects carry in `apiVersion`: "v1" for the core group (served
    under /api), "group/version" otherwise (under /apis). A namespace None means a
    cluster-scoped resource, or the collection across all namespaces.

    >>> resource_path("v1", "pods", "ns", "p")
    '/api/v1/namespaces/ns/pods/p'
    >>> resource_path("sandfleet.dev/v1alpha1", "sandboxsessions", "ns", "s", "status")
    '/apis/sandfleet.dev/v1alpha1/namespaces/ns/sandboxsessions/s/status'
    """
    parts = api_version.split("/")
    if len(parts) == 1 and parts[0]:
        parts = ["api", parts[0]]
    elif len(parts) == 2 and all(parts):
        parts = ["apis", *parts]
    else:
        raise ValueError(f"invalid apiVersion {api_version!r}: want 'v1' or 'group/version'")
    if namespace is not None:
        parts += ["namespaces", _segment(namespace, "namespace")]
    parts.append(_segment(plural, "plural"))
    if name is not None:
        parts.append(_segment(name, "name"))
    if subresource is not None:
        if name is None:
            raise ValueError(f"subresource {subresource!r} needs an object name")
        parts.append(_segment(subresource, "subresource"))
    return "/" + "/".join(parts)
