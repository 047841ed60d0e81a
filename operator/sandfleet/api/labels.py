"""The labels and annotations the operator puts on everything it creates, and their values."""

from __future__ import annotations

import enum
from typing import Final


class Label(enum.StrEnum):
    """Labels the operator puts on everything it creates (selectors and the orphan sweep)."""

    MANAGED_BY = "app.kubernetes.io/managed-by"
    COMPONENT = "app.kubernetes.io/component"
    SESSION = "sandfleet.dev/session"
    POOL = "sandfleet.dev/pool"
    STATE = "sandfleet.dev/state"
    MODEL_CREDENTIALS = "sandfleet.dev/model-credentials"
    """On a Secret, set (value "true") by someone who may read it: sessions of its namespace
    may use it as apiKeySecretRef. The operator never reads an unlabelled one for them."""
    SESSION_FILES = "sandfleet.dev/session-files"
    """On a Secret or ConfigMap, set (value "true") by someone who may read it: sessions of
    its namespace may copy it into their sandbox (files[].secretKeyRef/configMapKeyRef)."""


MANAGED_BY_VALUE: Final = "sandfleet-operator"
CONSENT_VALUE: Final = "true"
"""The value of Label.MODEL_CREDENTIALS and Label.SESSION_FILES that grants use."""


class Component(enum.StrEnum):
    """Value of the component label."""

    SANDBOX = "sandbox"
    """A sandbox pod (cold, warm or claimed)."""
    TOKEN = "runtime-token"
    """A Secret holding a runtime bearer token."""
    NETWORK_POLICY = "sandbox-network"


class PodState(enum.StrEnum):
    """Value of the state label on pool pods: idle ones can be claimed, exactly once."""

    IDLE = "idle"
    CLAIMED = "claimed"


class Annotation(enum.StrEnum):
    CLAIMED_AT = "sandfleet.dev/claimed-at"
    CLAIMED_POD = "sandfleet.dev/claimed-pod"
    """On a session the gateway wrote after claiming its pod: the operator adopts that pod
    (already bound, token derived with the fleet's session key) instead of claiming one."""
    CLAIMED_BY = "sandfleet.dev/claimed-by"
    """Which gateway replica made the claim (on the session and on the pod), for debugging."""
    RESET_PATHS = "sandfleet.dev/reset-paths"
    """On a recycling pool's pod: what its runtime's Reset restores besides the working tree
    (set with the runtime's environment when the pod is made)."""
    USES = "sandfleet.dev/uses"
    """On a recycled pool pod: how many sessions it has served (the pool's maxUses bounds it)."""
    TEMPLATE_HASH = "sandfleet.dev/template-hash"
    """Hash of the pod settings a pool pod was made from; stale idle pods are replaced."""
