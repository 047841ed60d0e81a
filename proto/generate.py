"""Regenerate the Python gRPC stubs next to the .proto files (committed; drift-tested).

Run from anywhere: `python proto/generate.py`. Needs the pinned grpcio-tools and
mypy-protobuf from the `test` extra. `--out DIR` writes into another tree (the drift test
regenerates into a temporary directory and compares byte for byte).
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
from pathlib import Path

PROTO_ROOT = Path(__file__).resolve().parent
PACKAGE_DIRS = (
    Path("sandfleet_proto") / "runtime" / "v1",
    Path("sandfleet_proto") / "gateway" / "v1",
)
_INIT_DIRS = (
    Path("sandfleet_proto"),
    Path("sandfleet_proto") / "runtime",
    Path("sandfleet_proto") / "gateway",
    *PACKAGE_DIRS,
)


def generate(out_root: Path) -> list[Path]:
    """Write *_pb2.py, *_pb2_grpc.py and their .pyi stubs under out_root; return them."""
    from grpc_tools import protoc  # imported here: a dev-only dependency

    # protoc finds the mypy-protobuf plugins on PATH; they sit beside this interpreter.
    bin_dir = str(Path(sys.executable).parent)
    saved_path = os.environ.get("PATH", "")
    targets = [out_root / package for package in PACKAGE_DIRS]
    for target in targets:
        target.mkdir(parents=True, exist_ok=True)
        for stale in target.glob("*_pb2*"):
            stale.unlink()
    for init_dir in _INIT_DIRS:
        init = out_root / init_dir / "__init__.py"
        if not init.exists():
            init.write_text('"""Generated gRPC code for the Sandfleet contracts."""\n')
    protos = sorted(
        str(p.relative_to(PROTO_ROOT))
        for package in PACKAGE_DIRS
        for p in (PROTO_ROOT / package).glob("*.proto")
    )
    include = str(Path(protoc.__file__).parent / "_proto")
    args = [
        "grpc_tools.protoc",
        f"-I{PROTO_ROOT}",
        f"-I{include}",
        f"--python_out={out_root}",
        f"--grpc_python_out={out_root}",
        f"--mypy_out={out_root}",
        f"--mypy_grpc_out={out_root}",
        *protos,
    ]
    # protoc runs in this process: PATH is changed for its run only, not for whoever
    # imported this (the drift test: later tests' sandboxes must not find this venv's tools).
    os.environ["PATH"] = bin_dir + os.pathsep + saved_path
    try:
        failed = protoc.main(args) != 0
    finally:
        os.environ["PATH"] = saved_path
    if failed:
        raise SystemExit("protoc failed")
    written: list[Path] = []
    for target in targets:
        shutil.rmtree(target / "__pycache__", ignore_errors=True)
        written.extend(sorted(target.glob("*_pb2*")))
    return written


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=PROTO_ROOT)
    written = generate(parser.parse_args().out)
    sys.stdout.write("".join(f"wrote {p}\n" for p in written))


if __name__ == "__main__":
    main()
