"""Adopting a session the gateway wrote after claiming its pod: check, own, derive the token.

The gateway claims an idle pool pod (labels state=claimed, session=<name>), binds its
runtime and only then creates the SandboxSession, annotated with the pod's name. There is
nothing left to start or bind: the operator checks that the pod really is that session's,
makes the session its owner and derives the runtime token the gateway bound (no Secret).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sandfleet.api import (
    Annotation,
    Label,
    PodState,
    Reason,
    derive_session_token,
)
from sandfleet.fleet.claim_patches import adoption_patch
from sandfleet.fleet.naming import label_value
from sandfleet.fleet.plans import PlanError
from sandfleet.fleet.pod_index import Pod
from sandfleet.fleet.resources import ObjectRef
from sandfleet.kube import KubeClient, NotFoundError, resource_path
from sandfleet.logs import get_logger
from sandfleet.operator.context import OperatorContext

log = get_logger(__name__)


def claimed_pod_of(annotations: Mapping[str, str] | None) -> str | None:
    """The pod the gateway claimed for a session (its claimed-pod annotation), if any."""
    return (annotations or {}).get(Annotation.CLAIMED_POD) or None


def adoption_problem(pod: Pod | None, namespace: str, session: str, pod_name: str) -> str | None:
    """Why `pod` may not be adopted by `session` (None: it may). Pure.

    Only a pod claimed for exactly this session, in its namespace, qualifies: the annotation
    is written by whoever creates the session, and must not let anyone take another's pod.
    """
    if pod is None:
        return f"the claimed pod {pod_name} does not exist"
    meta = pod["metadata"]
    labels = meta.get("labels") or {}
    if meta.get("namespace", namespace) != namespace:
        return f"the claimed pod {pod_name} is not in namespace {namespace}"
    if meta.get("deletionTimestamp"):
        return f"the claimed pod {pod_name} is being deleted"
    if labels.get(Label.STATE) != PodState.CLAIMED or not labels.get(Label.POOL):
        return f"pod {pod_name} is not a claimed pool pod"
    if labels.get(Label.SESSION) != label_value(session):
        return f"pod {pod_name} was claimed for another session"
    return None


def session_token(ctx: OperatorContext, session: ObjectRef, pod_name: str) -> str:
    """The runtime token the gateway bound: derived from the fleet's session key."""
    if ctx.session_key is None:
        raise PlanError(
            Reason.ADOPTION_FAILED,
            "the session was claimed through the gateway, and this operator has no session "
            "key to derive its token from (set SANDFLEET_OPERATOR_SESSION_KEY_FILE)",
        )
    return derive_session_token(ctx.session_key, session.namespace, session.name, pod_name)


async def claimed_pod(ctx: OperatorContext, session: ObjectRef, pod_name: str) -> Pod:
    """The pod a gateway claimed for `session`, checked; owned by the session from now on.
    Raises PlanError (AdoptionFailed) when it is not that session's pod."""
    pod = ctx.pods.get(session.namespace, pod_name)
    if adoption_problem(pod, session.namespace, session.name, pod_name) is not None:
        # The watch may not have delivered the claim yet: the API server has the last word.
        pod = await _get_pod(ctx.kube, session.namespace, pod_name)
    problem = adoption_problem(pod, session.namespace, session.name, pod_name)
    if problem is not None or pod is None:
        raise PlanError(Reason.ADOPTION_FAILED, problem or f"pod {pod_name} is gone")
    if not any(o.get("uid") == session.uid for o in pod["metadata"].get("ownerReferences") or []):
        patched = await ctx.kube.patch(
            resource_path("v1", "pods", session.namespace, pod_name), adoption_patch(session)
        )
        ctx.pods.apply("MODIFIED", patched)
        pod = patched
        log.info("claimed_pod_adopted", session=f"{session.namespace}/{session.name}", pod=pod_name)
    return pod


async def _get_pod(kube: KubeClient, namespace: str, name: str) -> Pod | None:
    try:
        pod: dict[str, Any] = await kube.get(resource_path("v1", "pods", namespace, name))
    except NotFoundError:
        return None
    return pod


async def unadopted_pod_to_reclaim(
    kube: KubeClient, namespace: str, session: str, annotations: Mapping[str, str] | None
) -> str | None:
    """The claimed pod of a session deleted before it was adopted, when it still is that
    session's (checked like an adoption): the reclaim deletes it at once."""
    pod_name = claimed_pod_of(annotations)
    if pod_name is None:
        return None
    pod = await _get_pod(kube, namespace, pod_name)
    if adoption_problem(pod, namespace, session, pod_name) is not None:
        return None
    return pod_name
