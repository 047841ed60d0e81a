"""What a session will run on: its spec resolved against its template or pool.

A session names its pod settings in one of three ways (inline template, templateRef,
poolRef); this module turns any of them into one SessionPlan, reading the referenced
SandboxTemplate/SandboxPool objects. Lifecycle and network defaults come from the template;
the session's own values win.
"""

from __future__ import annotations

import dataclasses

import pydantic

from sandfleet.api import (
    API_VERSION,
    POOL_PLURAL,
    TEMPLATE_PLURAL,
    EgressMode,
    LifecycleSpec,
    PodTemplate,
    Reason,
    SandboxPoolSpec,
    SandboxSessionSpec,
    SandboxTemplateSpec,
)
from sandfleet.errors import SandfleetError
from sandfleet.kube import KubeClient, NotFoundError, resource_path


class PlanError(SandfleetError):
    """The session cannot be planned until its spec or a referenced object changes."""

    def __init__(self, reason: Reason, message: str) -> None:
        super().__init__(message)
        self.reason = reason


@dataclasses.dataclass(frozen=True, slots=True)
class SessionPlan:
    pod: PodTemplate | None
    """None: the operator's defaults."""
    egress: EgressMode
    lifecycle: LifecycleSpec
    pool: str | None
    """The pool to claim a warm sandbox from (cold start from `pod` on a miss)."""


def readable(exc: pydantic.ValidationError) -> str:
    """A validation error on one line: `field.path: problem; ...` (camelCase paths)."""
    return "; ".join(f"{'.'.join(map(str, e['loc'])) or 'spec'}: {e['msg']}" for e in exc.errors())


def parse_session_spec(raw: dict[str, object]) -> SandboxSessionSpec:
    try:
        return SandboxSessionSpec.model_validate(raw)
    except pydantic.ValidationError as exc:
        raise PlanError(Reason.INVALID_SPEC, f"invalid spec: {readable(exc)}") from exc


async def read_template(kube: KubeClient, namespace: str, name: str) -> SandboxTemplateSpec:
    path = resource_path(API_VERSION, TEMPLATE_PLURAL, namespace, name)
    try:
        body = await kube.get(path)
    except NotFoundError as exc:
        raise PlanError(
            Reason.TEMPLATE_NOT_FOUND, f"SandboxTemplate {namespace}/{name} not found"
        ) from exc
    try:
        return SandboxTemplateSpec.model_validate(body.get("spec") or {})
    except pydantic.ValidationError as exc:
        raise PlanError(Reason.INVALID_SPEC, f"SandboxTemplate {name}: {readable(exc)}") from exc


async def read_pool(kube: KubeClient, namespace: str, name: str) -> SandboxPoolSpec:
    path = resource_path(API_VERSION, POOL_PLURAL, namespace, name)
    try:
        body = await kube.get(path)
    except NotFoundError as exc:
        raise PlanError(Reason.POOL_NOT_FOUND, f"SandboxPool {namespace}/{name} not found") from exc
    try:
        return SandboxPoolSpec.model_validate(body.get("spec") or {})
    except pydantic.ValidationError as exc:
        raise PlanError(Reason.INVALID_SPEC, f"SandboxPool {name}: {readable(exc)}") from exc


async def pool_pod_template(
    kube: KubeClient, namespace: str, pool: SandboxPoolSpec
) -> tuple[PodTemplate | None, SandboxTemplateSpec | None]:
    """A pool's pod settings, and the template they came from (for its defaults)."""
    if pool.template_ref is not None:
        template = await read_template(kube, namespace, pool.template_ref.name)
        return template.pod, template
    return pool.template, None


async def plan_session(kube: KubeClient, namespace: str, spec: SandboxSessionSpec) -> SessionPlan:
    template: SandboxTemplateSpec | None = None
    pod: PodTemplate | None = spec.template
    pool_name: str | None = None
    if spec.template_ref is not None:
        template = await read_template(kube, namespace, spec.template_ref.name)
        pod = template.pod
    elif spec.pool_ref is not None:
        pool_name = spec.pool_ref.name
        pool = await read_pool(kube, namespace, pool_name)
        pod, template = await pool_pod_template(kube, namespace, pool)
    egress = (
        spec.network.egress
        if spec.network is not None
        else (template.network.egress if template is not None else EgressMode.NONE)
    )
    lifecycle = merge_lifecycle(template.lifecycle if template else None, spec.lifecycle)
    return SessionPlan(pod=pod, egress=egress, lifecycle=lifecycle, pool=pool_name)


def merge_lifecycle(defaults: LifecycleSpec | None, own: LifecycleSpec) -> LifecycleSpec:
    """The session's lifecycle with unset fields taken from the template's defaults."""
    if defaults is None:
        return own
    # model_fields_set tells "not given" from an explicit value (0 retries, say).
    merged = {
        field: getattr(own if field in own.model_fields_set else defaults, field)
        for field in LifecycleSpec.model_fields
    }
    return LifecycleSpec(**merged)
