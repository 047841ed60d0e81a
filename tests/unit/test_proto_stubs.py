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
    assert len(written) == 16  # 4 services x (pb2, pb2_grpc) x (.py, .pyi)
    committed = ROOT / "proto" / "sandfleet_proto" / "runtime" / "v1"
    for fresh in written:
        assert (committed / fresh.name).read_bytes() == fresh.read_bytes(), (
            f"{fresh.name} is stale: run `python proto/generate.py`"
        )
    stale = {p.name for p in committed.glob("*_pb2*")} - {p.name for p in written}
    assert not stale, f"stubs without a .proto: {stale}"
