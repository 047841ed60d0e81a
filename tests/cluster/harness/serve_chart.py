"""`sandfleet serve` installed by the chart on the test cluster: the values that switch it on
against the test's scripted upstream, and the script a tenant pod runs against it with the
official `openai` client (its only credential: its ServiceAccount's mounted token)."""

from __future__ import annotations

import json
from typing import Any

from tests.cluster.harness.chart_install import BRIDGE_HOST

SERVE = "sandfleet-serve"
"""The serve Deployment, Service and pods' name label (release `sandfleet`)."""
SERVE_SELECTOR = "app.kubernetes.io/name=sandfleet-serve"
MODEL = "sandboxed"
REPLICA_HEADER = "x-sandfleet-replica"


def serve_values(
    values: dict[str, Any], *, tenant: str, gateway: str, upstream: str
) -> dict[str, Any]:
    """`values` with serve on: two replicas claiming from `tenant`'s warm pool through the
    gateway at `gateway` (its ClusterIP: the test node has no cluster DNS) as each client's
    own token, against the scripted upstream at `upstream` on the host's bridge address."""
    serve = {
        "enabled": True,
        "replicas": 2,
        "namespace": tenant,
        "identity": "client",
        "gateway": gateway,
        "models": {
            MODEL: {
                "upstream": {"base_url": upstream, "model": "m"},
                "max_retries": 0,
                "pool": "warm",
            },
        },
        "networkPolicy": {"upstreamEgress": [{"to": [{"ipBlock": {"cidr": f"{BRIDGE_HOST}/32"}}]}]},
        "resources": {"requests": {"cpu": "10m", "memory": "64Mi"}},
    }
    return {**json.loads(json.dumps(values)), "serve": serve}


def session_names(listing: dict[str, Any]) -> set[str]:
    """The names in a SandboxSession list (other tests of the release leave some behind)."""
    return {item["metadata"]["name"] for item in listing["items"]}


def client_script(service: str, first: str, second: str) -> str:
    """A streamed chat through serve's Service at `service`, then a two-turn conversation: the
    first turn sent to the replica at `first`, the follow-up (previous_response_id) to the
    one at `second`, then DELETE. Prints one JSON document: what each answer said and which
    replica (its header) answered it."""
    return f"""
import json, openai
token = open("/var/run/secrets/kubernetes.io/serviceaccount/token").read().strip()
def client(address):
    return openai.OpenAI(base_url=f"http://{{address}}/v1", api_key=token, max_retries=0,
                         timeout=120)
out = {{}}
with client({service!r}) as c:
    with c.chat.completions.with_streaming_response.create(
        model={MODEL!r}, messages=[{{"role": "user", "content": "hello"}}], stream=True,
        stream_options={{"include_usage": True}},
    ) as r:
        chunks = list(r.parse())
    out["streamed"] = "".join(
        ch.choices[0].delta.content or "" for ch in chunks if ch.choices)
    out["stream_chunks"] = len(chunks)
    out["usage"] = chunks[-1].usage.total_tokens if chunks[-1].usage else None
with client({first!r}) as a, client({second!r}) as b:
    one = a.responses.with_raw_response.create(model={MODEL!r}, input="keep a note")
    two = b.responses.with_raw_response.create(
        model={MODEL!r}, input="the note?", previous_response_id=one.parse().id)
    out["replicas"] = [one.headers[{REPLICA_HEADER!r}], two.headers[{REPLICA_HEADER!r}]]
    out["second"] = two.parse().output_text
    out["deleted"] = b.responses.with_raw_response.delete(two.parse().id).status_code
print(json.dumps(out))
"""


def served_model(name: str, upstream: str, secret: str) -> dict[str, Any]:
    """A ServedModel claiming from the tenant's warm pool, its key in the Secret `secret`."""
    return {
        "apiVersion": "sandfleet.dev/v1alpha1",
        "kind": "ServedModel",
        "metadata": {"name": name},
        "spec": {
            "upstream": {"baseURL": upstream, "model": "m",
                         "apiKeySecretRef": {"name": secret, "key": "api-key"}},
            "poolRef": {"name": "warm"},
            "maxTurns": 5,
        },
    }  # fmt: skip


def model_key_secret(name: str, key: str) -> dict[str, Any]:
    """The upstream key Secret, labelled so that served models may use it."""
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": name, "labels": {"sandfleet.dev/model-credentials": "true"}},
        "stringData": {"api-key": key},
    }


def ready_status(body: dict[str, Any]) -> str | None:
    """The status of an object's Ready condition (None before serve wrote one)."""
    conditions = (body.get("status") or {}).get("conditions") or []
    return next((c["status"] for c in conditions if c.get("type") == "Ready"), None)
