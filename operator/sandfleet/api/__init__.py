"""The Sandfleet API: the custom resources' vocabulary and their spec and status models.

The operator, the SDK, the CLI (and the gateway) all speak it; it depends on none of them.
manifests/crds is the API as the API server sees it; tests/unit/api/test_crd_parity.py
keeps these models and those schemas in step.

    from sandfleet.api import API_VERSION, SESSION_KIND, Phase, SandboxSessionSpec
"""

from __future__ import annotations

from sandfleet.api.common import (
    DECIMAL_PATTERN,
    ENV_NAME_PATTERN,
    QUANTITY_PATTERN,
    ApiModel,
    EnvVar,
    KeyRef,
    ObjectName,
)
from sandfleet.api.conditions import ConditionType, Reason, StatusCondition
from sandfleet.api.labels import (
    CONSENT_VALUE,
    MANAGED_BY_VALUE,
    Annotation,
    Component,
    Label,
    PodState,
)
from sandfleet.api.names import (
    API_VERSION,
    CALLER_AUTHORIZATION,
    DEFAULT_WORKDIR,
    FINALIZER,
    GATEWAY_PORT,
    GATEWAY_SESSION_METADATA,
    GROUP,
    POOL_KIND,
    POOL_PLURAL,
    RUNTIME_CONTAINER,
    RUNTIME_PORT,
    SERVED_MODEL_KIND,
    SERVED_MODEL_PLURAL,
    SESSION_KIND,
    SESSION_PLURAL,
    SUSPEND_REASON_METADATA,
    TEMPLATE_KIND,
    TEMPLATE_PLURAL,
    TOKEN_SECRET_KEY,
    VERSION,
)
from sandfleet.api.phases import Phase, ReclaimReason
from sandfleet.api.pool import SandboxPoolSpec, SandboxPoolStatus
from sandfleet.api.served_model import ServedModelSpec, ServedModelStatus, UpstreamEndpoint
from sandfleet.api.session import (
    AGENT_RESULT_LIMIT_CHARS,
    AgentSpec,
    AgentStatus,
    FileSource,
    SandboxSessionSpec,
    SandboxSessionStatus,
    SnapshotStatus,
)
from sandfleet.api.session_tokens import derive_session_token
from sandfleet.api.template import (
    EgressMode,
    LifecycleSpec,
    NetworkSpec,
    PodTemplate,
    ResourceList,
    Resources,
    SandboxTemplateSpec,
    Toleration,
)

__all__ = [
    "AGENT_RESULT_LIMIT_CHARS",
    "API_VERSION",
    "CALLER_AUTHORIZATION",
    "CONSENT_VALUE",
    "DECIMAL_PATTERN",
    "DEFAULT_WORKDIR",
    "ENV_NAME_PATTERN",
    "FINALIZER",
    "GATEWAY_PORT",
    "GATEWAY_SESSION_METADATA",
    "GROUP",
    "MANAGED_BY_VALUE",
    "POOL_KIND",
    "POOL_PLURAL",
    "QUANTITY_PATTERN",
    "RUNTIME_CONTAINER",
    "RUNTIME_PORT",
    "SERVED_MODEL_KIND",
    "SERVED_MODEL_PLURAL",
    "SESSION_KIND",
    "SESSION_PLURAL",
    "SUSPEND_REASON_METADATA",
    "TEMPLATE_KIND",
    "TEMPLATE_PLURAL",
    "TOKEN_SECRET_KEY",
    "VERSION",
    "AgentSpec",
    "AgentStatus",
    "Annotation",
    "ApiModel",
    "Component",
    "ConditionType",
    "EgressMode",
    "EnvVar",
    "FileSource",
    "KeyRef",
    "Label",
    "LifecycleSpec",
    "NetworkSpec",
    "ObjectName",
    "Phase",
    "PodState",
    "PodTemplate",
    "Reason",
    "ReclaimReason",
    "ResourceList",
    "Resources",
    "SandboxPoolSpec",
    "SandboxPoolStatus",
    "SandboxSessionSpec",
    "SandboxSessionStatus",
    "SandboxTemplateSpec",
    "ServedModelSpec",
    "ServedModelStatus",
    "SnapshotStatus",
    "StatusCondition",
    "Toleration",
    "UpstreamEndpoint",
    "derive_session_token",
]
