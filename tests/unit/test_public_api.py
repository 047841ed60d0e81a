"""The public SDK is `sandfleet.__all__` (plus the public packages' own `__all__`): every
exception the SDK raises on purpose is in it, SyncSandbox is Sandbox's exact twin, and the
examples import nothing else."""

from __future__ import annotations

import ast
import importlib
import inspect
import pkgutil
from pathlib import Path

import sandfleet
from sandfleet import Sandbox, SyncSandbox
from sandfleet.errors import SandfleetError

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
PUBLIC_PACKAGES = ("sandfleet", "sandfleet.agent", "sandfleet.rl", "sandfleet.tool_calls")
"""Packages whose `__all__` is public API; `sandfleet.api` (the resource types) is public
whole."""
SDK_PACKAGES = ("sandfleet.sandbox", "sandfleet.backends", "sandfleet.clients")
SDK_MODULES = ("sandfleet.errors", "sandfleet.fleet.manifests", "sandfleet.tool_calls")


def test_every_public_name_resolves_and_all_is_sorted() -> None:
    assert sandfleet.__all__ == sorted(set(sandfleet.__all__))
    assert set(sandfleet.__all__) == set(sandfleet._LAZY)
    missing = [name for name in sandfleet.__all__ if getattr(sandfleet, name, None) is None]
    assert not missing


def _sdk_modules() -> list[str]:
    names = list(SDK_MODULES)
    for package in SDK_PACKAGES:
        module = importlib.import_module(package)
        names += [
            info.name
            for info in pkgutil.walk_packages(module.__path__, f"{package}.")
            if not info.name.endswith(".nsinit")  # the sandbox's PID 1, run as a script
        ]
    return names


def test_every_exception_of_the_sdk_is_exported() -> None:
    raised = {
        name
        for module_name in _sdk_modules()
        for name, value in vars(importlib.import_module(module_name)).items()
        if inspect.isclass(value)
        and issubclass(value, SandfleetError)
        and value.__module__ == module_name
        and not name.startswith("_")
    }
    assert raised - set(sandfleet.__all__) == set()


def _public_methods(cls: type) -> dict[str, inspect.Signature]:
    return {
        name: inspect.signature(getattr(cls, name))
        for name, _ in inspect.getmembers(cls, callable)
        if not name.startswith("_") and name != "from_opened"  # a backend's hook, not an opener
    }


def _parameters(signature: inspect.Signature) -> list[tuple[str, object, object]]:
    return [(p.name, p.kind, p.default) for p in signature.parameters.values()]


def test_the_blocking_sandbox_is_an_exact_twin_of_the_async_one() -> None:
    async_methods, sync_methods = _public_methods(Sandbox), _public_methods(SyncSandbox)

    assert sorted(async_methods) == sorted(sync_methods)
    for name, signature in async_methods.items():
        assert _parameters(signature) == _parameters(sync_methods[name]), name


def _public_names(module: str) -> set[str] | None:
    """The names `module` exports publicly; None: everything (sandfleet.api); empty: an
    internal module."""
    if module == "sandfleet.api" or module.startswith("sandfleet.api."):
        return None
    if module in PUBLIC_PACKAGES:
        return set(importlib.import_module(module).__all__)
    return set()


def internal_imports(source: str) -> list[str]:
    """The imports of internal sandfleet modules or names in `source`."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            modules = [(alias.name, None) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            modules = [(node.module, [alias.name for alias in node.names])]
        else:
            continue
        for module, names in modules:
            if module.split(".")[0] != "sandfleet":
                continue
            public = _public_names(module)
            if public is None:
                continue
            if names is None:
                if module not in PUBLIC_PACKAGES:
                    found.append(f"import {module}")
                continue
            found += [f"from {module} import {n}" for n in names if n not in public]
    return found


def test_the_examples_import_only_the_public_api() -> None:
    scripts = sorted(EXAMPLES.rglob("*.py"))
    assert scripts, f"no examples found under {EXAMPLES}"

    found = {
        str(script.relative_to(EXAMPLES)): internal
        for script in scripts
        if (internal := internal_imports(script.read_text()))
    }

    assert found == {}


def test_the_examples_check_sees_internal_imports() -> None:
    source = (
        "import sandfleet.backends.local\n"
        "from sandfleet.sandbox.core import SandboxCore\n"
        "from sandfleet import Sandbox, _LAZY\n"
        "from sandfleet.agent import Task\n"
        "from sandfleet.api import EgressMode\n"
    )
    assert internal_imports(source) == [
        "import sandfleet.backends.local",
        "from sandfleet.sandbox.core import SandboxCore",
        "from sandfleet import _LAZY",
    ]
