"""Every error class of `sandfleet` derives from SandfleetError: callers can catch one root."""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import pytest

import sandfleet
import sandfleet.errors
from sandfleet.agent.model import ContextLengthExceededError
from sandfleet.errors import GatewayError, ModelError, QuotaExceededError, SandfleetError

# Entry points and kopf wiring register handlers or parse argv on import; they define no errors.
_NOT_IMPORTED = {
    "sandfleet.operator.__main__",
    "sandfleet.operator.handlers",
    "sandfleet.cli.__main__",
}
_KNOWN_OUTSIDE: set[str] = set()


def _error_classes() -> dict[str, type[BaseException]]:
    found: dict[str, type[BaseException]] = {}
    for module_info in pkgutil.walk_packages(sandfleet.__path__, "sandfleet."):
        if module_info.name in _NOT_IMPORTED:
            continue
        module = importlib.import_module(module_info.name)
        for name, value in vars(module).items():
            if (
                inspect.isclass(value)
                and issubclass(value, BaseException)
                and value.__module__ == module.__name__
            ):
                found[f"{module.__name__}.{name}"] = value
    return found


def test_every_error_class_of_sandfleet_derives_from_sandfleet_error() -> None:
    classes = _error_classes()
    assert "sandfleet.operator.pod_watch.PodLostError" in classes  # the walk reached the operator
    outside = {
        name
        for name, cls in classes.items()
        if not issubclass(cls, SandfleetError) and name not in _KNOWN_OUTSIDE
    }
    assert not outside, f"error classes outside the SandfleetError hierarchy: {sorted(outside)}"


def test_only_the_sdk_error_is_named_sandbox_lost() -> None:
    named = [name for name in _error_classes() if name.endswith(".SandboxLostError")]
    assert named == ["sandfleet.errors.SandboxLostError"]


def test_every_error_class_name_ends_in_error() -> None:
    classes = _error_classes()
    assert "sandfleet.gateway.claim_types.ClaimError" in classes
    misnamed = sorted(name for name in classes if not name.endswith("Error"))
    assert not misnamed, f"error classes whose name does not end in Error: {misnamed}"


def test_one_class_per_concept_and_the_old_name_still_resolves_with_a_warning() -> None:
    with pytest.warns(DeprecationWarning, match="ModelEndpointError is deprecated: use ModelError"):
        old = sandfleet.errors.ModelEndpointError
    assert old is ModelError
    assert issubclass(ContextLengthExceededError, ModelError)
    quota = QuotaExceededError("namespace team-a is full", namespace="team-a")
    assert (quota.code, quota.namespace) == ("RESOURCE_EXHAUSTED", "team-a")
    assert isinstance(quota, GatewayError)
