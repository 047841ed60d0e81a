"""`sandfleet serve`: the OpenAI API (chat completions, responses), every answer computed by
the agent loop in a sandbox against an upstream OpenAI-compatible endpoint.

Modules, one job each: `config` (served models from a TOML/YAML file), `engine` (one
request's loop in a sandbox, its steps as events), `sandboxes` (where sandboxes come from:
a warm local pool), `conversations` (previous_response_id keeps its sandbox), `files`
(input parts in, output files out), `limits` (per-tenant concurrency), `metrics`
(Prometheus), `chat` and `responses` (the two APIs' request and response mappings, built
from the `openai` package's own types), `errors` (OpenAI error objects) and `app` (the
HTTP adapter: starlette + uvicorn, the only module importing them). This package module
imports none of them, so `serve_available()` can say what is missing first.
"""

from __future__ import annotations

import importlib.util

INSTALL_HINT = "sandfleet serve needs an HTTP server stack: pip install 'sandfleet[serve]'"


def serve_available() -> bool:
    """Whether starlette, uvicorn and prometheus-client are installed."""
    return all(
        importlib.util.find_spec(name) is not None
        for name in ("starlette", "uvicorn", "prometheus_client")
    )
