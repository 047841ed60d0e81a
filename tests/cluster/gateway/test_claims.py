"""The gateway's claim path on the real cluster: warm claims bound over pre-opened channels,
adopted by the operator; all-or-nothing counts; races with other replicas and kubectl;
cold fallback; release and reclaim; adoption after a restart; the orphan-claim sweep; the
pool's NetworkPolicy over claimed pods."""

from __future__ import annotations

import asyncio
import base64
import copy
import datetime as dt
import time
from typing import Any

import pytest

from sandfleet.api import EgressMode, LifecycleSpec, derive_session_token
from sandfleet.clients.runtime.client import RuntimeClient
from sandfleet.errors import SandboxLostError
from sandfleet.fleet.claim_patches import gateway_claim_patch
from sandfleet.gateway.claim_types import Claimed, ClaimError, ClaimFailure, ClaimSpec
from sandfleet.gateway.claims import Claimer
from tests.cluster.gateway.conftest import ORPHAN_CLAIM_GRACE_S, MakeClaimer
from tests.cluster.harness.cluster_access import ClusterUnderTest
from tests.cluster.harness.kube_api import KubeApi
from tests.cluster.harness.operator_harness import (
    OPERATOR_NAMESPACE,
    POOLS,
    SESSIONS,
    OperatorProcess,
    condition,
    create_session,
    phase_is,
    wait_no_leftovers,
    wait_session,
)
from tests.cluster.harness.probe_pods import operator_image, probe_pod, result_of, run_probe

pytestmark = pytest.mark.cluster

PODS = "/api/v1/namespaces/{ns}/pods"
TEMPLATES = "/apis/sandfleet.dev/v1alpha1/namespaces/{ns}/sandboxtemplates"


def spec(namespace: str, pool: str | None, count: int = 1, **kw: Any) -> ClaimSpec:
    fields: dict[str, Any] = {
        "namespace": namespace,
        "pool": pool,
        "template": None,
        "count": count,
        "env": {},
        "files": (),
        "lifecycle": LifecycleSpec(),
        "generate_name": "gw-",
        "egress": EgressMode.NONE,
        "timeout_s": 120.0,
        "caller": "tester",
    }
    return ClaimSpec(**{**fields, **kw})


async def create_pool(kube: KubeApi, ns: str, name: str, replicas: int, **spec_fields: Any) -> None:
    body = {
        "apiVersion": "sandfleet.dev/v1alpha1",
        "kind": "SandboxPool",
        "metadata": {"name": name},
        "spec": {"replicas": replicas, **spec_fields},
    }
    await kube.checked("POST", POOLS.format(ns=ns), body)


async def until_warm(
    claimer: Claimer, ns: str, pool: str, count: int, timeout_s: float = 120
) -> None:
    """Until `count` pods of the pool are idle, ready and have a warm channel."""
    deadline = time.monotonic() + timeout_s
    while len(claimer.idle.candidates(ns, pool)) < count:
        if time.monotonic() > deadline:
            raise TimeoutError(f"pool {pool}: {claimer.idle.candidates(ns, pool)} warm")
        await asyncio.sleep(0.2)


async def run(claimed: Claimed, command: str) -> str:
    """A command on the claimed runtime, from the host, at its pod IP with its token."""
    client = RuntimeClient(claimed.address, claimed.token, rpc_timeout_s=20)
    try:
        return (await client.run_command(command)).stdout
    finally:
        await client.close()


async def pool_pods(kube: KubeApi, ns: str, state: str) -> list[dict[str, Any]]:
    selector = f"sandfleet.dev/state={state}"
    items = await kube.checked("GET", f"{PODS.format(ns=ns)}?labelSelector={selector}")
    return [p for p in items["items"] if not p["metadata"].get("deletionTimestamp")]


async def test_a_warm_claim_binds_its_token_env_and_files_and_the_operator_adopts_it(
    kube: KubeApi, namespace: str, operator: OperatorProcess, make_claimer: MakeClaimer
) -> None:
    await create_pool(kube, namespace, "warm", 2)
    claimer = await make_claimer(namespace)
    await until_warm(claimer, namespace, "warm", 2)
    files = (("in/data.txt", b"hello file\n", 0o600),)

    started = time.perf_counter()
    (claimed,) = await claimer.claim(spec(namespace, "warm", env={"GREETING": "hi"}, files=files))
    claim_s = time.perf_counter() - started

    assert claimed.warm and claimed.pod.startswith("warm-")
    assert claimed.token == derive_session_token(
        claimer._settings.session_key, namespace, claimed.name, claimed.pod
    )
    output = await run(claimed, "echo $GREETING; cat /testbed/in/data.txt; stat -c %a in/data.txt")
    assert output.split() == ["hi", "hello", "file", "600"]
    body = await wait_session(kube, namespace, claimed.name, phase_is("Ready"), timeout_s=30)
    status = body["status"]
    assert (status["podName"], status["poolName"]) == (claimed.pod, "warm")
    assert not status.get("tokenSecretName")  # derived, never stored
    assert condition(body, "Ready")["status"] == "True"
    assert condition(body, "Scheduled")["reason"] == "WarmSandboxClaimed"
    pod = await kube.checked("GET", f"{PODS.format(ns=namespace)}/{claimed.pod}")
    (owner,) = pod["metadata"]["ownerReferences"]
    assert (owner["kind"], owner["name"], owner["controller"]) == (
        "SandboxSession",
        claimed.name,
        True,
    )
    assert pod["metadata"]["annotations"]["sandfleet.dev/claimed-by"] == "gateway-0"
    # The pool's token no longer opens the sandbox.
    secret = await kube.checked("GET", f"/api/v1/namespaces/{namespace}/secrets/warm-pool-token")
    pool_token = base64.b64decode(secret["data"]["token"]).decode()
    pool_token_client = RuntimeClient(claimed.address, pool_token, rpc_timeout_s=10)
    with pytest.raises(SandboxLostError):
        await pool_token_client.run_command("true")
    await pool_token_client.close()
    connected = await claimer.connect(namespace, claimed.name, 10)
    assert (connected.token, connected.address, connected.pod) == (
        claimed.token,
        claimed.address,
        claimed.pod,
    )
    print(f"\nwarm claim (patch, bind, 1 file, session create): {claim_s * 1000:.0f} ms")

    assert await claimer.release(namespace, [claimed.name, "never-existed"]) == 1
    await kube.wait_for(f"{PODS.format(ns=namespace)}/{claimed.pod}", lambda r: r.status == 404, 30)
    await kube.checked("DELETE", f"{POOLS.format(ns=namespace)}/warm")
    await wait_no_leftovers(kube, namespace)


async def test_replicas_and_kubectl_racing_for_one_pool_never_share_a_pod(
    kube: KubeApi, namespace: str, operator: OperatorProcess, make_claimer: MakeClaimer
) -> None:
    """Twice: over fresh pods, then (the pool recycles) over pods released by the first
    round and back in the pool."""
    await create_pool(kube, namespace, "race", 4, recycle=True)
    first, second = await make_claimer(namespace), await make_claimer(namespace)
    for round_ in ("fresh", "recycled"):
        await until_warm(first, namespace, "race", 4)
        await until_warm(second, namespace, "race", 4)
        await race_for_one_pool(kube, namespace, first, second, round_)
    await kube.checked("DELETE", f"{POOLS.format(ns=namespace)}/race")
    await wait_no_leftovers(kube, namespace, timeout_s=60)


async def race_for_one_pool(
    kube: KubeApi, namespace: str, first: Claimer, second: Claimer, round_: str
) -> None:
    claims = await asyncio.gather(
        first.claim(spec(namespace, "race", count=5)),
        second.claim(spec(namespace, "race", count=3)),
        create_session(kube, namespace, f"kubectl-a-{round_}", {"poolRef": {"name": "race"}}),
        create_session(kube, namespace, f"kubectl-b-{round_}", {"poolRef": {"name": "race"}}),
    )

    gateway_claims: list[Claimed] = [*claims[0], *claims[1]]
    assert len(gateway_claims) == 8
    kubectl = [f"kubectl-a-{round_}", f"kubectl-b-{round_}"]
    sessions = [c.name for c in gateway_claims] + kubectl
    bodies = await asyncio.gather(
        *(wait_session(kube, namespace, s, phase_is("Ready"), 120) for s in sessions)
    )
    pods = [b["status"]["podName"] for b in bodies]
    assert len(set(pods)) == 10, pods
    assert [c.pod for c in gateway_claims] == pods[:8]
    # Warm claims took the pool's pods: the 4 idle ones, or (over recycled pods) ones
    # released in the round before that a claim waited for on their way back.
    assert all(c.pod.startswith("race-") for c in gateway_claims if c.warm)
    assert round_ == "recycled" or sum(c.warm for c in gateway_claims) <= 4
    answers = await asyncio.gather(*(run(c, "hostname") for c in gateway_claims))
    assert [a.strip() for a in answers] == [c.pod for c in gateway_claims]

    await first.release(namespace, [c.name for c in claims[0]])
    await second.release(namespace, [c.name for c in claims[1]])
    for name in kubectl:
        await kube.checked("DELETE", f"{SESSIONS.format(ns=namespace)}/{name}")


async def test_a_pod_touched_by_an_unrelated_write_since_the_index_saw_it_is_still_claimed_warm(
    kube: KubeApi,
    namespace: str,
    operator: OperatorProcess,
    make_claimer: MakeClaimer,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The claim patch is conditional on the pod's resourceVersion; a write that does not
    claim the pod (the kubelet's status, someone's annotation) must not cost a warm start."""
    await create_pool(kube, namespace, "touched", 1)
    claimer = await make_claimer(namespace)
    await until_warm(claimer, namespace, "touched", 1)
    (stale,) = [copy.deepcopy(p) for p in claimer.idle.candidates(namespace, "touched")]
    await kube.checked(
        "PATCH",
        f"{PODS.format(ns=namespace)}/{stale['metadata']['name']}",
        {"metadata": {"annotations": {"example.com/touched": "yes"}}},
        content_type="application/merge-patch+json",
    )
    # The claim sees the pod as the index had it before that write.
    monkeypatch.setattr(claimer.idle, "candidates", lambda ns, pool: [stale])

    (claimed,) = await claimer.claim(spec(namespace, "touched"))

    assert claimed.warm and claimed.pod == stale["metadata"]["name"]
    assert (await run(claimed, "echo warm")).strip() == "warm"
    await claimer.release(namespace, [claimed.name])
    await kube.checked("DELETE", f"{POOLS.format(ns=namespace)}/touched")
    await wait_no_leftovers(kube, namespace, timeout_s=60)


async def test_an_empty_pool_or_a_template_gives_a_cold_session_and_a_missing_one_is_not_found(
    kube: KubeApi, namespace: str, operator: OperatorProcess, make_claimer: MakeClaimer
) -> None:
    await create_pool(kube, namespace, "empty", 0)
    template = {
        "apiVersion": "sandfleet.dev/v1alpha1",
        "kind": "SandboxTemplate",
        "metadata": {"name": "tpl"},
        "spec": {"pod": {"workdir": "/tmp"}},
    }
    await kube.checked("POST", TEMPLATES.format(ns=namespace), template)
    claimer = await make_claimer(namespace)
    files = (("note.txt", b"cold file", 0o644),)

    (from_pool,), (from_template,) = await asyncio.gather(
        claimer.claim(spec(namespace, "empty", env={"X": "cold"})),
        claimer.claim(spec(namespace, None, template="tpl", files=files)),
    )
    failures = []
    for pool, tpl in (("no-such-pool", None), (None, "no-such-template")):
        with pytest.raises(ClaimError) as missing:
            await claimer.claim(spec(namespace, pool, template=tpl))
        failures.append(missing.value)

    assert not from_pool.warm and not from_template.warm
    assert (await run(from_pool, "echo $X")).strip() == "cold"
    assert from_template.workdir == "/tmp"
    assert (await run(from_template, "cat /tmp/note.txt")) == "cold file"
    assert [f.failure for f in failures] == [ClaimFailure.NOT_FOUND, ClaimFailure.NOT_FOUND]
    assert "no-such-pool" in str(failures[0]) and "no-such-template" in str(failures[1])
    connected = await claimer.connect(namespace, from_template.name, 10)
    assert (connected.token, connected.workdir) == (from_template.token, "/tmp")
    with pytest.raises(ClaimError) as gone:
        await claimer.connect(namespace, "no-such-session", 1)
    assert gone.value.failure is ClaimFailure.NOT_FOUND
    await claimer.release(namespace, [from_pool.name, from_template.name])
    await kube.checked("DELETE", f"{POOLS.format(ns=namespace)}/empty")
    await wait_no_leftovers(kube, namespace)


async def test_a_session_claimed_while_no_operator_runs_is_adopted_when_it_starts(
    kube: KubeApi, namespace: str, operator: OperatorProcess, make_claimer: MakeClaimer
) -> None:
    await create_pool(kube, namespace, "adopt", 2)
    claimer = await make_claimer(namespace)
    await until_warm(claimer, namespace, "adopt", 2)
    operator.stop()
    try:
        claimed, dropped = await claimer.claim(spec(namespace, "adopt", count=2))
        assert (await run(claimed, "echo served")).strip() == "served"  # no operator needed
        body = await kube.checked("GET", f"{SESSIONS.format(ns=namespace)}/{claimed.name}")
        assert not (body.get("status") or {}).get("podName")
        # Released before any operator saw it: its finalizer holds it until one does.
        assert await claimer.release(namespace, [dropped.name]) == 1
    finally:
        operator.start()

    body = await wait_session(kube, namespace, claimed.name, phase_is("Ready"), timeout_s=60)
    assert body["status"]["podName"] == claimed.pod
    await kube.wait_for(f"{PODS.format(ns=namespace)}/{dropped.pod}", _gone_or_deleting, 30)
    # And once more: a restart picks the adopted session up again (token derived, no Secret).
    operator.stop()
    operator.start()
    await asyncio.sleep(2)
    body = await wait_session(kube, namespace, claimed.name, phase_is("Ready"), timeout_s=30)
    assert body["status"]["podName"] == claimed.pod
    assert (await run(claimed, "echo still")).strip() == "still"
    assert "session_adopted" in "\n".join(operator.log_lines())
    await claimer.release(namespace, [claimed.name])
    await kube.checked("DELETE", f"{POOLS.format(ns=namespace)}/adopt")
    await wait_no_leftovers(kube, namespace)


async def test_a_claim_whose_session_never_came_is_swept_after_the_grace_period(
    kube: KubeApi, namespace: str, operator: OperatorProcess
) -> None:
    await create_pool(kube, namespace, "orphan", 1)
    path = f"{POOLS.format(ns=namespace)}/orphan"
    await kube.wait_for(
        path, lambda r: r.status == 200 and (r.body.get("status") or {}).get("replicas") == 1, 90
    )
    (pod,) = await pool_pods(kube, namespace, "idle")
    name = pod["metadata"]["name"]
    # What a gateway that died right after its claim patch leaves behind.
    patch = gateway_claim_patch(
        "never-created", pod["metadata"]["resourceVersion"], dt.datetime.now(dt.UTC), "gone-gw"
    )
    await kube.checked(
        "PATCH",
        f"{PODS.format(ns=namespace)}/{name}",
        patch,
        content_type="application/merge-patch+json",
    )
    claimed_at = time.monotonic()

    await kube.wait_for(f"{PODS.format(ns=namespace)}/{name}", _gone_or_deleting, 30)

    assert time.monotonic() - claimed_at >= ORPHAN_CLAIM_GRACE_S - 1  # not before the grace
    await kube.checked("DELETE", path)
    await wait_no_leftovers(kube, namespace)


def _gone_or_deleting(response: Any) -> bool:
    return response.status == 404 or bool(response.body["metadata"].get("deletionTimestamp"))


_CONNECT_UNTIL = """
import json, socket, time
want_connected = {want_connected}
deadline, attempts, outcome = time.monotonic() + 30, 0, None
while time.monotonic() < deadline:
    attempts += 1
    try:
        socket.create_connection(("{ip}", 50051), timeout=2).close()
        outcome = "connected"
    except OSError as error:
        outcome = type(error).__name__
    if (outcome == "connected") == want_connected:
        break
    time.sleep(0.5)
print("RESULT " + json.dumps({{"outcome": outcome, "attempts": attempts}}))
"""


async def test_a_claimed_pod_stays_under_the_pools_policy_gateway_in_and_others_out(
    kube: KubeApi,
    namespace: str,
    operator: OperatorProcess,
    make_claimer: MakeClaimer,
    cluster_under_test: ClusterUnderTest,
) -> None:
    await create_pool(kube, namespace, "fenced", 1)
    claimer = await make_claimer(namespace)
    await until_warm(claimer, namespace, "fenced", 1)
    (claimed,) = await claimer.claim(spec(namespace, "fenced"))
    ip = claimed.address.rsplit(":", 1)[0]
    image, pull = operator_image(cluster_under_test), cluster_under_test.image_pull_policy
    gateway_labels = {"app.kubernetes.io/name": "sandfleet-gateway"}
    suffix = claimed.name[-5:]

    def client(name: str, want: bool, labels: dict[str, str]) -> dict[str, Any]:
        script = _CONNECT_UNTIL.format(want_connected=want, ip=ip)
        return probe_pod(f"{name}-{suffix}", image, script, pull, labels=labels)

    admitted, refused = await asyncio.gather(
        run_probe(kube, OPERATOR_NAMESPACE, client("gateway-like", True, gateway_labels)),
        run_probe(kube, namespace, client("tenant", False, {})),
    )

    await kube.request("DELETE", f"{PODS.format(ns=OPERATOR_NAMESPACE)}/gateway-like-{suffix}")
    assert result_of(admitted)["outcome"] == "connected"
    assert result_of(refused)["outcome"] in {"TimeoutError", "ConnectionRefusedError"}
    await claimer.release(namespace, [claimed.name])
    await kube.checked("DELETE", f"{POOLS.format(ns=namespace)}/fenced")
    await wait_no_leftovers(kube, namespace)
