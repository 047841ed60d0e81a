"""`sandfleet mcp`: Sandfleet sandboxes as tools of any MCP client (stdio and HTTP).

The thin adapter to the official `mcp` SDK (`pip install 'sandfleet[mcp]'`): `server` is
the only module that imports it; `tools` is the session's tools on the one tool-call
contract (sandfleet.tool_calls), without the SDK. This package itself imports neither,
so `mcp_available()` can say what is missing before anything fails.
"""

from __future__ import annotations

import importlib.util

INSTALL_HINT = "sandfleet mcp needs the MCP SDK: pip install 'sandfleet[mcp]'"


def mcp_available() -> bool:
    """Whether the `mcp` SDK (and the HTTP server under it) is installed."""
    return all(importlib.util.find_spec(name) is not None for name in ("mcp", "uvicorn"))
