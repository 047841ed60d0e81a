"""GatewayService requests checked and turned into the claim path's terms (ClaimSpec)."""

from __future__ import annotations

import math
import re

from sandfleet.api import ENV_NAME_PATTERN, EgressMode, LifecycleSpec
from sandfleet.errors import SandfleetError
from sandfleet.gateway.claim_types import ClaimSpec
from sandfleet_proto.gateway.v1 import gateway_service_pb2 as gateway_pb

MAX_CLAIM_COUNT = 100
DEFAULT_GENERATE_NAME = "sandbox-"
DEFAULT_FILE_MODE = 0o644
# Kubernetes names: a DNS-1123 subdomain for objects, a label-sized prefix for generated
# names (the API server appends 5 characters and truncates the prefix to 58).
_NAME = re.compile(r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$")
_NAMESPACE = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
_PREFIX = re.compile(r"^[a-z0-9][-a-z0-9.]{0,57}$")
_ENV_NAME = re.compile(ENV_NAME_PATTERN)
_CLAIM_ID = re.compile(r"^[A-Za-z0-9._-]{1,63}$")


class InvalidRequestError(SandfleetError):
    """A request field is wrong (INVALID_ARGUMENT); the message names the field."""

    def __init__(self, field: str, problem: str) -> None:
        super().__init__(f"{field}: {problem}")
        self.field = field


def check_namespace(namespace: str, served: tuple[str, ...] = ()) -> str:
    if not namespace:
        raise InvalidRequestError("namespace", "required")
    if not _NAMESPACE.match(namespace):
        raise InvalidRequestError("namespace", f"{namespace!r} is not a namespace name")
    if served and namespace not in served:
        raise InvalidRequestError(
            "namespace", f"this gateway serves only namespaces {', '.join(served)}"
        )
    return namespace


def check_name(field: str, name: str) -> str:
    if not _NAME.match(name):
        raise InvalidRequestError(field, f"{name!r} is not a Kubernetes object name")
    return name


def check_timeout(field: str, seconds: float) -> float:
    if math.isnan(seconds) or seconds < 0 or math.isinf(seconds):
        raise InvalidRequestError(
            field, f"must be 0 or a positive number of seconds, not {seconds}"
        )
    return seconds


def claim_spec(
    request: gateway_pb.ClaimRequest,
    *,
    caller: str,
    default_timeout_s: float,
    served: tuple[str, ...] = (),
) -> ClaimSpec:
    """The ClaimSpec for a request; InvalidRequestError naming the first wrong field."""
    namespace = check_namespace(request.namespace, served)
    if request.pool and request.template:
        raise InvalidRequestError("pool, template", "set one of them, not both")
    pool = check_name("pool", request.pool) if request.pool else None
    template = check_name("template", request.template) if request.template else None
    count = request.count or 1
    if count > MAX_CLAIM_COUNT:
        raise InvalidRequestError(
            "count", f"1 to {MAX_CLAIM_COUNT} sandboxes per claim, not {count}"
        )
    for name in request.env:
        if not _ENV_NAME.match(name):
            raise InvalidRequestError(
                f"env[{name!r}]", "not a variable name ([A-Za-z_][A-Za-z0-9_]*)"
            )
    generate_name = request.generate_name or DEFAULT_GENERATE_NAME
    if not _PREFIX.match(generate_name):
        raise InvalidRequestError(
            "generate_name",
            f"{generate_name!r} is not a name prefix (lower-case letters, digits, '-', '.'; "
            "at most 58 characters)",
        )
    try:
        egress = EgressMode(request.egress or EgressMode.NONE)
    except ValueError:
        choices = ", ".join(mode.value for mode in EgressMode)
        raise InvalidRequestError("egress", f"{request.egress!r} is not one of {choices}") from None
    timeout_s = check_timeout("timeout_seconds", request.timeout_seconds) or default_timeout_s
    if request.claim_id and not _CLAIM_ID.match(request.claim_id):
        raise InvalidRequestError(
            "claim_id", "1 to 63 characters of letters, digits, '.', '_' and '-' (or empty)"
        )
    return ClaimSpec(
        namespace=namespace,
        pool=pool,
        template=template,
        count=count,
        env=dict(request.env),
        files=_files(request),
        lifecycle=_lifecycle(request.lifecycle),
        generate_name=generate_name,
        egress=egress,
        timeout_s=timeout_s,
        caller=caller,
        claim_id=request.claim_id,
    )


def _files(request: gateway_pb.ClaimRequest) -> list[tuple[str, bytes, int]]:
    files = []
    for i, item in enumerate(request.files):
        field = f"files[{i}]"
        if not item.path:
            raise InvalidRequestError(f"{field}.path", "required")
        if "\0" in item.path:
            raise InvalidRequestError(f"{field}.path", "contains a NUL character")
        if item.mode > 0o7777:
            raise InvalidRequestError(
                f"{field}.mode", f"{item.mode:o} is not a permission (0-7777)"
            )
        files.append((item.path, item.content, item.mode or DEFAULT_FILE_MODE))
    return files


def _lifecycle(lifecycle: gateway_pb.Lifecycle) -> LifecycleSpec:
    # 0 means "not set" in the proto: the template's or the operator's default applies.
    values = {
        "active_deadline_seconds": lifecycle.active_deadline_seconds,
        "idle_timeout_seconds": lifecycle.idle_timeout_seconds,
        "ttl_seconds_after_finished": lifecycle.ttl_seconds_after_finished,
    }
    return LifecycleSpec.model_validate({k: v for k, v in values.items() if v})
