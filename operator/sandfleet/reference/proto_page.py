"""The gRPC reference page, from the .proto files themselves (services, then each file whole)."""

from __future__ import annotations

import re
from pathlib import Path

from sandfleet.reference.markdown import GENERATED_NOTE

_SERVICE = re.compile(r"^service\s+(\w+)\s*\{(.*?)^\}", re.M | re.S)
_RPC = re.compile(
    r"rpc\s+(\w+)\s*\(\s*(stream\s+)?([\w.]+)\s*\)\s*returns\s*\(\s*(stream\s+)?([\w.]+)"
)
_PACKAGE = re.compile(r"^package\s+([\w.]+)\s*;", re.M)


def proto_page(root: Path) -> str:
    """Markdown for every .proto file under `root`: a table of RPCs, then the file."""
    lines = [
        "# gRPC contract",
        "",
        GENERATED_NOTE.format(source="the `.proto` files under `proto/`"),
        "",
        "The gateway serves `sandfleet.gateway.v1.GatewayService` and proxies the runtime's "
        "services; every sandbox's runtime agent serves the `sandfleet.runtime.v1` services. "
        "The comments in the files are the contract's documentation.",
        "",
        "| service | method | request | response |",
        "|---|---|---|---|",
    ]
    files = sorted(root.rglob("*.proto"))
    texts = {path: path.read_text(encoding="utf-8") for path in files}
    for text in texts.values():
        package = _PACKAGE.search(text)
        prefix = package.group(1) + "." if package else ""
        for service in _SERVICE.finditer(text):
            for rpc in _RPC.finditer(service.group(2)):
                request = ("stream " if rpc.group(2) else "") + rpc.group(3)
                response = ("stream " if rpc.group(4) else "") + rpc.group(5)
                lines.append(
                    f"| `{prefix}{service.group(1)}` | `{rpc.group(1)}` | `{request}` "
                    f"| `{response}` |"
                )
    for path, text in texts.items():
        lines += ["", f"## `{path.relative_to(root)}`", "", "```protobuf", text.rstrip(), "```"]
    return "\n".join(lines) + "\n"
