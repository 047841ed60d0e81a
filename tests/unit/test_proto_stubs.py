"""The committed gRPC stubs are exactly what proto/generate.py produces from the .proto files."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _load_generator() -> object:
    spec = importlib.util.spec_from_file_location("proto_generate", ROOT / "proto" / "generate.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_committed_stubs_match_a_fresh_generation(tmp_path: Path) -> None:
    pytest.importorskip("grpc_tools", reason="grpcio-tools is in the test extra")
    generator = _load_generator()
    written = generator.generate(tmp_path)  # type: ignore[attr-defined]
    assert len(written) == 20  # 5 services x (pb2, pb2_grpc) x (.py, .pyi)
    proto_root = ROOT / "proto"
    for fresh in written:
        committed = proto_root / fresh.relative_to(tmp_path)
        assert committed.read_bytes() == fresh.read_bytes(), (
            f"{committed.name} is stale: run `python proto/generate.py`"
        )
    for package in generator.PACKAGE_DIRS:  # type: ignore[attr-defined]
        stale = {p.name for p in (proto_root / package).glob("*_pb2*")} - {
            p.name for p in written if p.parent == tmp_path / package
        }
        assert not stale, f"stubs without a .proto: {stale}"
