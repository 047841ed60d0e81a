"""Reading a Secret or ConfigMap a session names, only with its owner's consent.

The operator may read every Secret and ConfigMap of a namespace; whoever creates a session
there may not (the tenant Role grants neither). Reading one because a session names it would
make the operator a confused deputy: `apiKeySecretRef: db-credentials` would send that
credential to the model endpoint, `files[].secretKeyRef` would copy it into a sandbox its
creator controls. So an object is used only when it carries the label of its use
(sandfleet.dev/model-credentials or sandfleet.dev/session-files, value "true"). Setting a
label needs update rights on the object, which come with reading it: the label is the
consent of someone who could read the object to let the namespace's sessions use it.
"""

from __future__ import annotations

import base64
from typing import Literal

from sandfleet.api import CONSENT_VALUE, Label, Reason
from sandfleet.fleet.plans import PlanError
from sandfleet.kube import KubeClient, NotFoundError, resource_path

Kind = Literal["secrets", "configmaps"]


async def read_consented_key(
    kube: KubeClient, namespace: str, kind: Kind, name: str, key: str, *, label: Label, use: str
) -> bytes:
    """One key of the object, decoded, when it carries `label`: "true".

    Raises PlanError: SecretNotFound (a missing Secret), InvalidSpec (a missing ConfigMap or
    key), SecretNotLabelled (no consent). `use` says what for, in the messages.
    """
    singular = kind[:-1]
    try:
        body = await kube.get(resource_path("v1", kind, namespace, name))
    except NotFoundError as exc:
        reason = Reason.SECRET_NOT_FOUND if kind == "secrets" else Reason.INVALID_SPEC
        raise PlanError(reason, f"{use}: {singular} {name} not found") from exc
    labels = (body.get("metadata") or {}).get("labels") or {}
    if labels.get(label) != CONSENT_VALUE:
        raise PlanError(
            Reason.SECRET_NOT_LABELLED,
            f"{use}: {singular} {namespace}/{name} lacks the label {label}={CONSENT_VALUE}; "
            "whoever may read it adds that label to let this namespace's sessions use it "
            f"(kubectl label {singular} -n {namespace} {name} {label}={CONSENT_VALUE})",
        )
    data = body.get("data") or {}
    if key in data:
        return base64.b64decode(data[key]) if kind == "secrets" else str(data[key]).encode()
    if kind == "configmaps" and key in (body.get("binaryData") or {}):
        return base64.b64decode(body["binaryData"][key])
    raise PlanError(Reason.INVALID_SPEC, f"{use}: {name} has no key {key!r}")
