"""Pure builders of the objects the operator creates: sandbox pods and token Secrets (the
patches that claim and adopt a pool pod: fleet.claim_patches; NetworkPolicies: the operator's
network_policies).

No I/O: typed inputs in, plain JSON-ready dicts out (a fresh dict on every call, safe to edit).
Security properties of a sandbox live here in one place, each with the reason it exists:
a sandbox runs whatever commands a model writes, so it is treated as hostile.
"""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import json
from collections.abc import Mapping
from typing import Any, Final

from sandfleet.api import (
    DEFAULT_WORKDIR,
    MANAGED_BY_VALUE,
    RUNTIME_CONTAINER,
    RUNTIME_PORT,
    TOKEN_SECRET_KEY,
    Annotation,
    Component,
    Label,
    PodState,
    PodTemplate,
)
from sandfleet.fleet.naming import (
    label_value,
    pool_pod_generate_name,
    pool_token_secret_name,
    session_pod_name,
    token_secret_name,
)

TOKEN_ENV: Final = "SANDFLEET_RUNTIME_TOKEN"
MAX_UPLOAD_BYTES_ENV: Final = "SANDFLEET_RUNTIME_MAX_UPLOAD_BYTES"
"""The runtime's cap on one uploaded file (sandfleet_runtime.settings reads it)."""
SANDBOX_UID: Final = 1000
"""The unprivileged user (and group) the sandbox image creates and runs as."""


@dataclasses.dataclass(frozen=True, slots=True)
class ObjectRef:
    """Enough of an object to own others and to be named in their labels."""

    namespace: str
    name: str
    uid: str
    kind: str
    api_version: str

    @classmethod
    def of(cls, body: Mapping[str, Any]) -> ObjectRef:
        """The reference of an object as the API returns it (apiVersion, kind, metadata)."""
        metadata = body["metadata"]
        return cls(
            namespace=metadata["namespace"],
            name=metadata["name"],
            uid=metadata["uid"],
            kind=body["kind"],
            api_version=body["apiVersion"],
        )


def owner_reference(owner: ObjectRef, *, controller: bool = True) -> dict[str, Any]:
    """An ownerReference to `owner`: the garbage collector deletes the dependent with it.

    blockOwnerDeletion makes a foreground deletion of the owner wait for the dependent.
    """
    return {
        "apiVersion": owner.api_version,
        "kind": owner.kind,
        "name": owner.name,
        "uid": owner.uid,
        "controller": controller,
        "blockOwnerDeletion": True,
    }


@dataclasses.dataclass(frozen=True, slots=True)
class PlatformDefaults:
    """Platform policy the builders apply (from the operator's settings, never from a CR)."""

    image: str
    """The sandbox image when a template names none."""
    operator_namespace: str
    operator_pod_labels: Mapping[str, str]
    """Labels of the operator's own pods: with the gateway's, the only pods a sandbox accepts
    connections from."""
    gateway_pod_labels: Mapping[str, str] = dataclasses.field(
        default_factory=lambda: {"app.kubernetes.io/name": "sandfleet-gateway"}
    )
    """Labels of the gateway's pods (in `operator_namespace`, like the operator's)."""
    image_pull_policy: str = "IfNotPresent"
    cpu_request: str = "10m"
    memory_request: str = "64Mi"
    memory_limit: str = "512Mi"
    cpu_limit: str | None = None
    """None: no CPU limit by default (a limit throttles even on an idle node)."""
    ephemeral_storage_request: str = "64Mi"
    ephemeral_storage_limit: str = "1Gi"
    """Disk a sandbox may fill (its writable layer, logs, emptyDirs): past it the kubelet
    evicts the pod and the session ends SandboxLost. Always the platform's: a template's
    resources cannot lift it (the CRDs have no ephemeral-storage field)."""
    max_upload_bytes: int = 128 * 1024 * 1024
    """The runtime's cap on one uploaded file (SANDFLEET_RUNTIME_MAX_UPLOAD_BYTES)."""
    dns_policy: str = "ClusterFirst"
    dns_namespace: str = "kube-system"
    dns_pod_labels: Mapping[str, str] = dataclasses.field(
        default_factory=lambda: {"k8s-app": "kube-dns"}
    )
    """The cluster resolver's pods (CoreDNS and kube-dns both carry k8s-app=kube-dns): the
    only destination of egress Internet's DNS (port 53)."""
    dns_cidrs: tuple[str, ...] = ()
    """Further resolvers Internet's port 53 may reach, as CIDRs: NodeLocal DNSCache's
    169.254.20.10/32, or the node's resolver under dnsPolicy Default."""
    scheduler_name: str | None = None
    """None: the cluster's default scheduler (a template's schedulerName wins)."""
    termination_grace_period_s: int = 5
    """The runtime shuts down in well under a second; nothing in a sandbox needs longer."""

    def __post_init__(self) -> None:
        # An empty podSelector would let every pod of the operator's namespace in.
        if not self.operator_pod_labels:
            raise ValueError("operator_pod_labels must name the operator's pods")
        if not self.gateway_pod_labels:
            raise ValueError("gateway_pod_labels must name the gateway's pods")
        # An empty podSelector would open port 53 to every pod of the resolver's namespace.
        if not self.dns_pod_labels:
            raise ValueError("dns_pod_labels must name the cluster resolver's pods")

    def default_resources(self) -> dict[str, dict[str, str]]:
        limits = {"memory": self.memory_limit}
        if self.cpu_limit is not None:
            limits["cpu"] = self.cpu_limit
        return {
            "requests": {"cpu": self.cpu_request, "memory": self.memory_request},
            "limits": limits,
        }

    def with_ephemeral_storage(
        self, resources: Mapping[str, Mapping[str, str]]
    ) -> dict[str, dict[str, str]]:
        """`resources` with the platform's ephemeral-storage request and limit added (an
        explicit request: left out, Kubernetes would request the whole limit per pod)."""
        return {
            "requests": {
                **resources.get("requests", {}),
                "ephemeral-storage": self.ephemeral_storage_request,
            },
            "limits": {
                **resources.get("limits", {}),
                "ephemeral-storage": self.ephemeral_storage_limit,
            },
        }


@dataclasses.dataclass(frozen=True, slots=True)
class ResolvedPod:
    """A PodTemplate with the platform defaults filled in: everything a sandbox pod varies by."""

    image: str
    image_pull_policy: str
    resources: Mapping[str, Mapping[str, str]]
    """{"requests": {...}, "limits": {...}}, both always present (maybe empty)."""
    env: tuple[tuple[str, str], ...] = ()
    runtime_class_name: str | None = None
    scheduler_name: str | None = None
    node_selector: Mapping[str, str] = dataclasses.field(default_factory=dict)
    tolerations: tuple[Mapping[str, Any], ...] = ()
    workdir: str = DEFAULT_WORKDIR
    max_upload_bytes: int | None = None
    """SANDFLEET_RUNTIME_MAX_UPLOAD_BYTES of the runtime; None: the runtime's default."""


def resolve_pod_template(template: PodTemplate | None, defaults: PlatformDefaults) -> ResolvedPod:
    """`template` (None: all defaults) with the image, pull policy and resources filled in.

    Resources given in a template replace the defaults as a whole, never field by field:
    a mix could pair a template's 1Gi request with the default 512Mi limit, which the API
    server refuses. Ephemeral storage and the upload cap are the platform's in every case.
    """
    template = template or PodTemplate()
    if template.resources is None:
        resources = defaults.default_resources()
    else:
        resources = {
            "requests": template.resources.requests.model_dump(exclude_none=True),
            "limits": template.resources.limits.model_dump(exclude_none=True),
        }
    return ResolvedPod(
        image=template.image or defaults.image,
        image_pull_policy=template.image_pull_policy or defaults.image_pull_policy,
        resources=defaults.with_ephemeral_storage(resources),
        max_upload_bytes=defaults.max_upload_bytes,
        env=tuple((e.name, e.value) for e in template.env),
        runtime_class_name=template.runtime_class_name,
        scheduler_name=template.scheduler_name or defaults.scheduler_name,
        node_selector=dict(template.node_selector),
        tolerations=tuple(t.to_k8s() for t in template.tolerations),
        workdir=template.workdir,
    )


def template_hash(pod: ResolvedPod) -> str:
    """A stable digest of the pod settings (a pool pod's template-hash annotation).

    Equal settings give equal hashes in every process, so a pool can tell its stale idle
    pods (made before the template or the default image changed) from current ones.
    """
    canonical = json.dumps(
        {
            "image": pod.image,
            "imagePullPolicy": pod.image_pull_policy,
            "resources": pod.resources,
            "env": pod.env,
            "runtimeClassName": pod.runtime_class_name,
            "nodeSelector": pod.node_selector,
            "tolerations": pod.tolerations,
            "workdir": pod.workdir,
            **({"maxUploadBytes": pod.max_upload_bytes} if pod.max_upload_bytes else {}),
            # Only when set, so the hashes of existing pools' pods stay what they were.
            **({"schedulerName": pod.scheduler_name} if pod.scheduler_name else {}),
        },
        sort_keys=True,
        separators=(",", ":"),
    )
    return hashlib.sha256(canonical.encode()).hexdigest()[:16]


def common_labels(component: Component) -> dict[str, str]:
    """The labels on everything the operator creates (its orphan sweep selects on them)."""
    return {Label.MANAGED_BY.value: MANAGED_BY_VALUE, Label.COMPONENT.value: component.value}


def object_metadata(owner: ObjectRef, labels: Mapping[str, str], **fields: Any) -> dict[str, Any]:
    return {
        **fields,
        "namespace": owner.namespace,
        "labels": dict(labels),
        "ownerReferences": [owner_reference(owner)],
    }


def _runtime_container(pod: ResolvedPod, token_secret: str) -> dict[str, Any]:
    # The token reaches the runtime only through a secretKeyRef: never in the pod spec (which
    # anyone allowed to list pods can read), and no Secret volume (a file the shells, which
    # share the agent's uid, could read). The agent (PID 1) turns non-dumpable before any
    # shell exists, so its /proc/1/environ and memory are closed to them; it also drops the
    # variable from its environment and wipes it from the /proc copy (token_source.py). A
    # warm pod's pool token stops working once BindSession installs the session's.
    env: list[dict[str, Any]] = [
        {
            "name": TOKEN_ENV,
            "valueFrom": {"secretKeyRef": {"name": token_secret, "key": TOKEN_SECRET_KEY}},
        }
    ]
    # A template cannot swap the token (SANDFLEET_RUNTIME_TOKEN_FILE would override it), nor
    # lift the platform's upload cap.
    env += [
        {"name": n, "value": v}
        for n, v in pod.env
        if not n.startswith(TOKEN_ENV) and n != MAX_UPLOAD_BYTES_ENV
    ]
    if pod.max_upload_bytes is not None:
        env.append({"name": MAX_UPLOAD_BYTES_ENV, "value": str(pod.max_upload_bytes)})
    container: dict[str, Any] = {
        "name": RUNTIME_CONTAINER,
        "image": pod.image,
        "imagePullPolicy": pod.image_pull_policy,
        "env": env,
        "ports": [{"name": "grpc", "containerPort": RUNTIME_PORT, "protocol": "TCP"}],
        # Ready as soon as the runtime serves: a 1 s period keeps cold starts short.
        "readinessProbe": {"grpc": {"port": RUNTIME_PORT}, "periodSeconds": 1},
        "resources": {kind: dict(values) for kind, values in pod.resources.items()},
        # A crash's last log lines land in the pod status, where the operator reads the reason.
        "terminationMessagePolicy": "FallbackToLogsOnError",
        "securityContext": {
            "allowPrivilegeEscalation": False,
            "capabilities": {"drop": ["ALL"]},
        },
    }
    if pod.workdir != DEFAULT_WORKDIR:
        # The image's entrypoint passes --workdir /testbed; a later flag wins.
        container["args"] = ["--workdir", pod.workdir]
    return container


def _pod_spec(pod: ResolvedPod, token_secret: str, defaults: PlatformDefaults) -> dict[str, Any]:
    spec: dict[str, Any] = {
        # No Kubernetes credentials inside a sandbox: the model's commands must not reach
        # the API server as anyone.
        "automountServiceAccountToken": False,
        # No *_SERVICE_HOST variables advertising the namespace's services.
        "enableServiceLinks": False,
        # A crashed runtime lost its shells and files: the session sees SandboxLost instead
        # of a silently restarted, empty sandbox.
        "restartPolicy": "Never",
        "dnsPolicy": defaults.dns_policy,
        "terminationGracePeriodSeconds": defaults.termination_grace_period_s,
        "securityContext": {
            "runAsNonRoot": True,
            "runAsUser": SANDBOX_UID,
            "runAsGroup": SANDBOX_UID,
            "fsGroup": SANDBOX_UID,
            # The container runtime's default syscall filter (the kubelet's default is none).
            "seccompProfile": {"type": "RuntimeDefault"},
        },
        "containers": [_runtime_container(pod, token_secret)],
    }
    if pod.runtime_class_name is not None:
        spec["runtimeClassName"] = pod.runtime_class_name
    if pod.scheduler_name is not None:
        spec["schedulerName"] = pod.scheduler_name
    if pod.node_selector:
        spec["nodeSelector"] = dict(pod.node_selector)
    if pod.tolerations:
        spec["tolerations"] = [dict(t) for t in pod.tolerations]
    return spec


def session_pod(
    session: ObjectRef, pod: ResolvedPod, token_secret: str, defaults: PlatformDefaults
) -> dict[str, Any]:
    """The pod of a cold-started session, owned by it and labelled with its name."""
    labels = {
        **common_labels(Component.SANDBOX),
        Label.SESSION.value: label_value(session.name),
    }
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": object_metadata(session, labels, name=session_pod_name(session.name)),
        "spec": _pod_spec(pod, token_secret, defaults),
    }


RESET_PATHS_ENV = "SANDFLEET_RUNTIME_RESET_PATHS"
RECYCLED_RESET_PATHS = "/tmp:/var/tmp:/dev/shm:/run/lock:~"
"""What the runtime of a recycling pool's pod restores besides the working tree."""


def pool_pod(
    pool: ObjectRef,
    pod: ResolvedPod,
    token_secret: str,
    defaults: PlatformDefaults,
    *,
    recycle: bool = False,
) -> dict[str, Any]:
    """An idle warm pod of `pool` (the API server picks its name), owned by the pool;
    `recycle`: its runtime's Reset covers every writable path, so it can be recycled."""
    labels = {
        **common_labels(Component.SANDBOX),
        Label.POOL.value: label_value(pool.name),
        Label.STATE.value: PodState.IDLE.value,
    }
    metadata = object_metadata(pool, labels, generateName=pool_pod_generate_name(pool.name))
    metadata["annotations"] = {Annotation.TEMPLATE_HASH.value: template_hash(pod)}
    spec = _pod_spec(pod, token_secret, defaults)
    if recycle:
        metadata["annotations"][Annotation.RESET_PATHS.value] = RECYCLED_RESET_PATHS
        env = spec["containers"][0]["env"]
        env[:] = [e for e in env if e["name"] != RESET_PATHS_ENV]
        env.append({"name": RESET_PATHS_ENV, "value": RECYCLED_RESET_PATHS})
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec}


def resets_every_writable_path(pod: Mapping[str, Any]) -> bool:
    """The pod was made by a recycling pool (pool_pod with recycle): only such a pod's
    Reset covers more than its working tree, so only such a pod may be recycled. (The
    annotation, not the spec's env: the pod index keeps no spec.)"""
    annotations = (pod.get("metadata") or {}).get("annotations") or {}
    return annotations.get(Annotation.RESET_PATHS) == RECYCLED_RESET_PATHS


def token_secret(
    owner: ObjectRef, name: str, token: str, labels: Mapping[str, str] | None = None
) -> dict[str, Any]:
    """An Opaque Secret with the runtime bearer token under data.token, owned by `owner`.

    Immutable: a token never changes in place (a new token is a new Secret), and the kubelet
    need not watch immutable Secrets.
    """
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "Opaque",
        "immutable": True,
        "metadata": object_metadata(
            owner, {**common_labels(Component.TOKEN), **(labels or {})}, name=name
        ),
        "data": {TOKEN_SECRET_KEY: base64.b64encode(token.encode()).decode("ascii")},
    }


def session_token_secret(session: ObjectRef, token: str) -> dict[str, Any]:
    """The token Secret of a session: "<session>-token", labelled with the session."""
    return token_secret(
        session,
        token_secret_name(session.name),
        token,
        {Label.SESSION.value: label_value(session.name)},
    )


def pool_token_secret(pool: ObjectRef, token: str) -> dict[str, Any]:
    """The token Secret a pool's idle pods start with: "<pool>-pool-token"."""
    return token_secret(
        pool, pool_token_secret_name(pool.name), token, {Label.POOL.value: label_value(pool.name)}
    )
