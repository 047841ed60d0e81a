"""ServedModel objects as served models: a tenant's object in its namespace mapped onto the
config file's own ServedModelSpec (one type for both sources), with its upstream key read
from a consented Secret and its pool or template checked.

Names are "<namespace>/<name>": unique across tenants without any registry, and saying
whose model it is; the `/` keeps them apart from the config file's names, which have none.
"""

from __future__ import annotations

import base64
import dataclasses
from typing import Any

from pydantic import ValidationError

from sandfleet import api
from sandfleet.api import CONSENT_VALUE, Label, Reason
from sandfleet.errors import SandfleetError
from sandfleet.kube import KubeClient, NotFoundError, resource_path
from sandfleet.serve.config import ServedModel, ServedModelSpec, UpstreamSpec, agent_config


def model_name(namespace: str, name: str) -> str:
    """The name clients send as `model` for the ServedModel `name` in `namespace`."""
    return f"{namespace}/{name}"


def namespace_of(model: str) -> str | None:
    """The namespace of a ServedModel's name; None for a config file's model (no `/`)."""
    namespace, slash, name = model.partition("/")
    return namespace if slash and namespace and name else None


@dataclasses.dataclass(frozen=True, slots=True)
class NotServable:
    """Why an object is not served: its Ready condition's reason and message."""

    reason: Reason
    message: str


class NotServableError(SandfleetError):
    """The ServedModel cannot be served; `problem` says why (its Ready condition)."""

    def __init__(self, problem: NotServable) -> None:
        super().__init__(problem.message)
        self.problem = problem


def parse_spec(obj: dict[str, Any]) -> api.ServedModelSpec:
    """The object's spec; NotServableError (InvalidSpec, naming the field) when it is bad
    (the API server checks the schema first: this catches what only the model checks)."""
    try:
        return api.ServedModelSpec.model_validate(obj.get("spec") or {})
    except ValidationError as error:
        first = error.errors()[0]
        where = ".".join(str(part) for part in first["loc"]) or "spec"
        raise NotServableError(
            NotServable(Reason.INVALID_SPEC, f"spec.{where}: {first['msg']}")
        ) from None


def to_served(namespace: str, name: str, spec: api.ServedModelSpec, key: str | None) -> ServedModel:
    """The served model an object's spec describes, its upstream key being `key`."""
    upstream = spec.upstream
    served = ServedModelSpec(
        upstream=UpstreamSpec(base_url=upstream.base_url, model=upstream.model),
        description=spec.description,
        sandbox="cluster",
        pool=spec.pool_ref.name if spec.pool_ref is not None else None,
        template=spec.template_ref.name if spec.template_ref is not None else None,
        namespace=namespace,
        system_prompt=spec.system_prompt,
        max_turns=spec.max_turns,
        tool_timeout_seconds=float(spec.tool_timeout_seconds),
        temperature=spec.temperature,
        top_p=spec.top_p,
        max_tokens=spec.max_tokens,
    )
    return ServedModel(model_name(namespace, name), served, agent_config(served, key))


async def resolve(kube: KubeClient, obj: dict[str, Any]) -> ServedModel:
    """The served model of a ServedModel object, its key read and its sandbox source found;
    NotServableError saying why not (InvalidSpec, SecretNotFound, SecretNotLabelled,
    PoolNotFound, TemplateNotFound)."""
    meta = obj.get("metadata") or {}
    namespace, name = str(meta.get("namespace") or ""), str(meta.get("name") or "")
    spec = parse_spec(obj)
    if spec.pool_ref is not None:
        await _must_exist(kube, namespace, api.POOL_PLURAL, spec.pool_ref.name,
                          reason=Reason.POOL_NOT_FOUND, field="spec.poolRef")  # fmt: skip
    if spec.template_ref is not None:
        await _must_exist(kube, namespace, api.TEMPLATE_PLURAL, spec.template_ref.name,
                          reason=Reason.TEMPLATE_NOT_FOUND, field="spec.templateRef")  # fmt: skip
    ref = spec.upstream.api_key_secret_ref
    key = None if ref is None else await read_key(kube, namespace, ref.name, ref.key)
    return to_served(namespace, name, spec, key)


async def _must_exist(
    kube: KubeClient, namespace: str, plural: str, name: str, *, reason: Reason, field: str
) -> None:
    try:
        await kube.get(resource_path(api.API_VERSION, plural, namespace, name))
    except NotFoundError:
        raise NotServableError(
            NotServable(reason, f"{field}: {plural} {namespace}/{name} not found")
        ) from None


async def read_key(kube: KubeClient, namespace: str, secret: str, key: str) -> str:
    """The upstream key in the Secret, used only when the Secret carries the label
    sandfleet.dev/model-credentials=true: whoever may create a ServedModel may not read
    Secrets, and a ServedModel whose baseURL they choose would otherwise send any Secret of
    the namespace to a server of theirs (the operator asks the same of managed sessions)."""
    where = "spec.upstream.apiKeySecretRef"
    try:
        body = await kube.get(resource_path("v1", "secrets", namespace, secret))
    except NotFoundError:
        raise NotServableError(
            NotServable(Reason.SECRET_NOT_FOUND, f"{where}: secret {namespace}/{secret} not found")
        ) from None
    labels = (body.get("metadata") or {}).get("labels") or {}
    label = Label.MODEL_CREDENTIALS
    if labels.get(label) != CONSENT_VALUE:
        raise NotServableError(NotServable(
            Reason.SECRET_NOT_LABELLED,
            f"{where}: secret {namespace}/{secret} lacks the label {label}={CONSENT_VALUE}; "
            "whoever may read it adds that label to let this namespace's served models use it "
            f"(kubectl label secret -n {namespace} {secret} {label}={CONSENT_VALUE})",
        ))  # fmt: skip
    data = body.get("data") or {}
    if key not in data:
        raise NotServableError(
            NotServable(Reason.INVALID_SPEC, f"{where}: secret {secret} has no key {key!r}")
        )
    value = base64.b64decode(data[key]).decode("utf-8", errors="replace").strip()
    if not value:
        raise NotServableError(
            NotServable(Reason.INVALID_SPEC, f"{where}: key {key!r} of {secret} is empty")
        )
    return value
