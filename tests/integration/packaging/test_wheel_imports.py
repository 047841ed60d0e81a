"""The generated stubs import cleanly from a built wheel and from the editable install."""

from __future__ import annotations

import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.slow]
ROOT = Path(__file__).resolve().parents[3]
_PROBE = (
    "import sandfleet_proto.runtime.v1.bash_service_pb2_grpc as g, sandfleet_runtime.server as s, "
    "sandfleet.clients.runtime.client as c; print(g.__file__); print(s.__file__); print(c.__file__)"
)


def test_the_editable_install_imports_from_the_source_tree() -> None:
    out = subprocess.run(
        [sys.executable, "-c", _PROBE], capture_output=True, text=True, check=True, timeout=60
    ).stdout.split()
    assert out[0].startswith(str(ROOT / "proto"))
    assert out[1].startswith(str(ROOT / "runtime"))
    assert out[2].startswith(str(ROOT / "operator"))


def test_a_built_wheel_imports_without_the_source_tree(tmp_path: Path) -> None:
    subprocess.run(
        [sys.executable, "-m", "build", "--wheel", "--no-isolation", "--outdir", str(tmp_path)],
        cwd=ROOT,
        check=True,
        capture_output=True,
        timeout=300,
    )
    (wheel,) = tmp_path.glob("sandfleet-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert "sandfleet_proto/runtime/v1/bash_service_pb2_grpc.py" in names
    assert "sandfleet_runtime/__main__.py" in names and "sandfleet/sandbox/facade.py" in names
    target = tmp_path / "site"
    zipfile.ZipFile(wheel).extractall(target)
    # -S skips site-packages .pth processing, so the editable path hooks cannot leak in;
    # the dependencies (grpcio, protobuf) come from this environment's site-packages dir.
    site_packages = sysconfig.get_paths()["purelib"]
    out = subprocess.run(
        [
            sys.executable,
            "-S",
            "-c",
            f"import sys; sys.path[:0] = [{str(target)!r}, {site_packages!r}]; {_PROBE}",
        ],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
        cwd=tmp_path,
    ).stdout.split()
    assert all(path.startswith(str(target)) for path in out), out


def test_the_runtime_imports_nothing_beyond_stdlib_grpc_and_protobuf() -> None:
    probe = (
        "import sys; before = set(sys.modules); import sandfleet_runtime.server, "
        "sandfleet_runtime.__main__; "
        "print('\\n'.join(sorted({m.split('.')[0] for m in set(sys.modules) - before})))"
    )
    loaded = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=60
    ).stdout.split()
    # grpc imports typing_extensions (a grpcio dependency) and, when the dev-only grpcio-tools
    # is installed, grpc_tools; cython_runtime is the Cython extension's own module.
    allowed_third_party = {
        "grpc",
        "grpc_health",
        "grpc_reflection",
        "google",
        "grpc_tools",
        "typing_extensions",
        "cython_runtime",
        "sandfleet_runtime",
        "sandfleet_proto",
    }
    stdlib = set(sys.stdlib_module_names)
    foreign = {
        m
        for m in loaded
        if m not in allowed_third_party and m not in stdlib and not m.startswith("_")
    }
    assert not foreign, f"the runtime imported {foreign}"
