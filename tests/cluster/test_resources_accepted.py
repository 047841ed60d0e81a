"""The builders' objects on a real API server and node: accepted as built, and a pod that runs.

Every builder's output goes through a server-side dry run (validation and admission, nothing
stored). One session pod is created for real and must become Ready; on the local cluster its
sandbox is then asked, over gRPC with the token from the Secret, what it can see of its own
confinement. A claim patch is raced on a real pool pod: exactly one claimer wins.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import secrets
from collections.abc import Callable

import grpc
import pytest

from sandfleet.api import EgressMode, PodTemplate
from sandfleet.clients.runtime.client import RuntimeClient
from sandfleet.fleet.claim_patches import claim_patch
from sandfleet.fleet.naming import label_value, pool_token_secret_name, token_secret_name
from sandfleet.fleet.resources import (
    ObjectRef,
    PlatformDefaults,
    owner_reference,
    pool_pod,
    pool_token_secret,
    resolve_pod_template,
    session_pod,
    session_token_secret,
)
from sandfleet.operator.network_policies import (
    pool_network_policy,
    session_network_policy,
)
from sandfleet_proto.runtime.v1 import bash_service_pb2, bash_service_pb2_grpc
from tests.cluster.harness.cluster_access import ClusterUnderTest
from tests.cluster.harness.kube_api import JsonObject, KubeApi
from tests.cluster.harness.sandbox_pods import RUNTIME_PORT, wait_ready

pytestmark = pytest.mark.cluster

MERGE_PATCH = "application/merge-patch+json"
# Owners for dry runs only: nothing is stored, so the owner need not exist.
SESSION_KIND = ("SandboxSession", "sandfleet.dev/v1alpha1")
POOL_KIND = ("SandboxPool", "sandfleet.dev/v1alpha1")
FULL_TEMPLATE = PodTemplate.model_validate(
    {
        "env": [{"name": "LANG", "value": "C.UTF-8"}],
        "resources": {"requests": {"cpu": "50m", "memory": "128Mi"}, "limits": {"memory": "1Gi"}},
        "nodeSelector": {"kubernetes.io/os": "linux"},
        "tolerations": [{"key": "sandbox", "operator": "Exists", "effect": "NoSchedule"}],
        "workdir": "/tmp",
    }
)


@pytest.fixture
def defaults(cluster_under_test: ClusterUnderTest, runtime_image: str) -> PlatformDefaults:
    return PlatformDefaults(
        image=runtime_image,
        image_pull_policy=cluster_under_test.image_pull_policy,
        dns_policy="Default",  # the test node has no cluster DNS
        operator_namespace="sandfleet-system",
        operator_pod_labels={"app.kubernetes.io/name": "sandfleet-operator"},
    )


def ref(namespace: str, name: str, kind: tuple[str, str]) -> ObjectRef:
    return ObjectRef(namespace, name, f"00000000-0000-0000-0000-{secrets.token_hex(6)}", *kind)


Build = Callable[[str, PlatformDefaults], tuple[str, JsonObject]]


def _cold_pod(template: PodTemplate | None) -> Build:
    def build(ns: str, defaults: PlatformDefaults) -> tuple[str, JsonObject]:
        resolved = resolve_pod_template(template, defaults)
        return "pods", session_pod(ref(ns, "s-1", SESSION_KIND), resolved, "s-1-token", defaults)

    return build


def _pool_pod(ns: str, defaults: PlatformDefaults) -> tuple[str, JsonObject]:
    resolved = resolve_pod_template(FULL_TEMPLATE, defaults)
    return "pods", pool_pod(ref(ns, "swe", POOL_KIND), resolved, "swe-pool-token", defaults)


def _session_policy(egress: EgressMode) -> Build:
    def build(ns: str, defaults: PlatformDefaults) -> tuple[str, JsonObject]:
        return "networkpolicies", session_network_policy(
            ref(ns, "s-1", SESSION_KIND), egress, defaults
        )

    return build


BUILDERS: dict[str, Build] = {
    "session pod, platform defaults": _cold_pod(None),
    "session pod, every template field": _cold_pod(FULL_TEMPLATE),
    "pool pod": _pool_pod,
    "session token Secret": lambda ns, _: (
        "secrets",
        session_token_secret(ref(ns, "s-1", SESSION_KIND), secrets.token_urlsafe(32)),
    ),
    "pool token Secret": lambda ns, _: (
        "secrets",
        pool_token_secret(ref(ns, "swe", POOL_KIND), secrets.token_urlsafe(32)),
    ),
    "session NetworkPolicy, egress None": _session_policy(EgressMode.NONE),
    "session NetworkPolicy, egress Internet": _session_policy(EgressMode.INTERNET),
    "session NetworkPolicy, egress All": _session_policy(EgressMode.ALL),
    "pool NetworkPolicy": lambda ns, d: (
        "networkpolicies",
        pool_network_policy(ref(ns, "swe", POOL_KIND), d),
    ),
}


def collection(namespace: str, plural: str) -> str:
    group = "/apis/networking.k8s.io/v1" if plural == "networkpolicies" else "/api/v1"
    return f"{group}/namespaces/{namespace}/{plural}"


@pytest.mark.parametrize("built_by", list(BUILDERS))
async def test_the_api_server_accepts_every_built_object_as_it_is(
    kube: KubeApi, namespace: str, defaults: PlatformDefaults, built_by: str
) -> None:
    plural, body = BUILDERS[built_by](namespace, defaults)

    stored = await kube.checked("POST", collection(namespace, plural) + "?dryRun=All", body)

    # Nothing we set was dropped or rewritten by validation, defaulting or admission.
    for key in ("labels", "annotations", "ownerReferences", "generateName"):
        assert stored["metadata"].get(key) == body["metadata"].get(key), key
    if plural == "pods":
        # Admission would have mounted the service account token here, were it not refused.
        assert not stored["spec"].get("volumes"), stored["spec"].get("volumes")
        assert stored["spec"]["securityContext"] == body["spec"]["securityContext"]
        runtime = stored["spec"]["containers"][0]
        assert runtime["securityContext"] == body["spec"]["containers"][0]["securityContext"]
        assert not runtime.get("volumeMounts")
    elif plural == "secrets":
        assert (stored["data"], stored["type"], stored["immutable"]) == (
            body["data"],
            "Opaque",
            True,
        )
    else:
        # An empty egress list comes back omitted; with "Egress" in policyTypes it still
        # means "deny all", so compare without it.
        sent = {k: v for k, v in body["spec"].items() if v != []}
        assert stored["spec"] == sent
        assert "Egress" in stored["spec"]["policyTypes"]


async def _owner(kube: KubeApi, namespace: str, name: str) -> ObjectRef:
    """A real object to own what the test creates (the garbage collector deletes dependents
    of owners that do not exist)."""
    body = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}}
    created = await kube.checked("POST", collection(namespace, "configmaps"), body)
    return ObjectRef(namespace, name, created["metadata"]["uid"], "ConfigMap", "v1")


async def _start_session_pod(
    kube: KubeApi, namespace: str, defaults: PlatformDefaults, template: PodTemplate | None
) -> tuple[JsonObject, str]:
    """Create a session's token Secret and pod as the builders make them; the Ready pod and
    the token."""
    session = await _owner(kube, namespace, "session-1")
    token = secrets.token_urlsafe(32)
    await kube.checked(
        "POST", collection(namespace, "secrets"), session_token_secret(session, token)
    )
    resolved = resolve_pod_template(template, defaults)
    pod = session_pod(session, resolved, token_secret_name(session.name), defaults)
    await kube.checked("POST", collection(namespace, "pods"), pod)
    selector = f"sandfleet.dev/session={label_value(session.name)}"
    (ready,) = await wait_ready(kube, namespace, selector, 1, timeout_s=120)
    return ready, token


async def test_a_built_session_pod_starts_on_the_node_and_becomes_ready(
    kube: KubeApi, namespace: str, defaults: PlatformDefaults
) -> None:
    pod, _ = await _start_session_pod(kube, namespace, defaults, None)

    assert pod["metadata"]["name"] == "session-1"
    assert pod["spec"]["nodeName"]
    (status,) = pod["status"]["containerStatuses"]
    assert status["ready"] is True and status["restartCount"] == 0
    assert not pod["spec"].get("volumes")  # no service account token was mounted


async def test_inside_a_built_pod_the_sandbox_is_unprivileged_and_never_sees_its_token(
    kube: KubeApi,
    namespace: str,
    defaults: PlatformDefaults,
    cluster_under_test: ClusterUnderTest,
) -> None:
    if not cluster_under_test.local:
        pytest.skip("pod IPs of an external cluster are not reachable from the test process")
    pod, token = await _start_session_pod(
        kube, namespace, defaults, PodTemplate.model_validate({"workdir": "/tmp"})
    )
    command = (
        "id -u; id -g; pwd; echo token=${SANDFLEET_RUNTIME_TOKEN:-unset};"
        " grep -E '^(CapBnd|CapEff|NoNewPrivs|Seccomp):' /proc/self/status;"
        " test -e /var/run/secrets/kubernetes.io && echo sa=mounted || echo sa=absent"
    )

    async with grpc.aio.insecure_channel(f"{pod['status']['podIP']}:{RUNTIME_PORT}") as channel:
        bash = bash_service_pb2_grpc.BashServiceStub(channel)
        answer = await bash.RunCommand(
            bash_service_pb2.RunCommandRequest(session="s", command=command, timeout_seconds=30),
            metadata=[("authorization", f"Bearer {token}")],
            timeout=60,
        )

    lines = answer.stdout.splitlines()
    assert answer.exit_code == 0, answer.stderr
    assert lines[:4] == ["1000", "1000", "/tmp", "token=unset"]  # workdir came through args
    status = dict(line.split(":\t", 1) for line in lines[4:8])
    assert status == {
        "CapBnd": "0000000000000000",  # capabilities: drop ALL
        "CapEff": "0000000000000000",
        "NoNewPrivs": "1",  # allowPrivilegeEscalation: false
        "Seccomp": "2",  # filtered: the RuntimeDefault profile
    }
    assert lines[8:] == ["sa=absent"]  # no service account directory at all


# What a shell in the pod can try for the runtime's token: PID 1's (the agent's) /proc
# files, every process's environment and command line, its own environment, and the files
# where a mounted Secret or a leftover token file would be. The tokens to look for come
# from a file (the pattern directory is skipped): an argv holding them would itself match.
_TOKEN_HUNT = (
    "for f in environ maps; do cat /proc/1/$f >/dev/null 2>&1 && echo $f=readable"
    " || echo $f=denied; done; (exec 3</proc/1/mem) 2>/dev/null && echo mem=readable"
    " || echo mem=denied;"
    " for p in /proc/[0-9]*; do cat $p/environ $p/cmdline; echo; done 2>/dev/null"
    " | tr '\\0' '\\n' > /tmp/scan.txt; echo scan=$(grep -c PATH= /tmp/scan.txt);"
    " echo proc=$(grep -c -F -f /tmp/hunt-pattern/tokens /tmp/scan.txt);"
    " echo env=$(env | grep -c SANDFLEET_RUNTIME_TOKEN);"
    " echo files=$(grep -rlsF -f /tmp/hunt-pattern/tokens --exclude-dir=hunt-pattern"
    " --exclude=scan.txt /run /var /etc /tmp /testbed /home /root /mnt /srv | wc -l)"
)


async def _hunt_tokens(pod: JsonObject, token: str, *tokens: str) -> list[str]:
    """Runs _TOKEN_HUNT in the pod (as a client holding `token`) for `tokens`."""
    client = RuntimeClient(f"{pod['status']['podIP']}:{RUNTIME_PORT}", token)
    try:
        await client.upload("\n".join(tokens).encode(), "/tmp/hunt-pattern/tokens")
        answer = await client.run_command(_TOKEN_HUNT, timeout_s=120)
    finally:
        await client.close()
    lines = answer.stdout.split()
    assert lines[3].startswith("scan=") and lines[3] != "scan=0", answer  # it saw environments
    return lines[:3] + lines[4:]


_NOTHING_FOUND = ["environ=denied", "maps=denied", "mem=denied", "proc=0", "env=0", "files=0"]


async def test_a_shell_in_a_session_pod_cannot_find_the_runtimes_token(
    kube: KubeApi,
    namespace: str,
    defaults: PlatformDefaults,
    cluster_under_test: ClusterUnderTest,
) -> None:
    if not cluster_under_test.local:
        pytest.skip("pod IPs of an external cluster are not reachable from the test process")
    pod, token = await _start_session_pod(kube, namespace, defaults, None)
    assert await _hunt_tokens(pod, token, token) == _NOTHING_FOUND


async def test_a_shell_in_a_bound_pool_pod_finds_neither_the_pool_nor_the_session_token(
    kube: KubeApi,
    namespace: str,
    defaults: PlatformDefaults,
    cluster_under_test: ClusterUnderTest,
) -> None:
    if not cluster_under_test.local:
        pytest.skip("pod IPs of an external cluster are not reachable from the test process")
    pool = await _owner(kube, namespace, "pool-1")
    pool_token, session_token = secrets.token_urlsafe(32), secrets.token_urlsafe(32)
    await kube.checked(
        "POST", collection(namespace, "secrets"), pool_token_secret(pool, pool_token)
    )
    resolved = resolve_pod_template(None, defaults)
    await kube.checked(
        "POST",
        collection(namespace, "pods"),
        pool_pod(pool, resolved, pool_token_secret_name(pool.name), defaults),
    )
    selector = f"sandfleet.dev/pool={label_value(pool.name)}"
    (pod,) = await wait_ready(kube, namespace, selector, 1, timeout_s=120)
    client = RuntimeClient(f"{pod['status']['podIP']}:{RUNTIME_PORT}", pool_token)
    try:
        await client.bind_session(session_token, {}, f"{namespace}/session-1")
    finally:
        await client.close()
    found = await _hunt_tokens(pod, session_token, pool_token, session_token)
    assert found == _NOTHING_FOUND


async def _pod_with_condition(kube: KubeApi, path: str, reason: str) -> JsonObject:
    """The pod once the scheduler has written PodScheduled=False with `reason` (after which
    nothing else changes it, so its resourceVersion holds still)."""

    def settled(body: JsonObject) -> bool:
        conditions = (body.get("status") or {}).get("conditions") or []
        return any(c["type"] == "PodScheduled" and c.get("reason") == reason for c in conditions)

    response = await kube.wait_for(path, lambda r: r.status == 200 and settled(r.body), 60)
    return response.body


async def test_of_two_claims_racing_for_one_pool_pod_exactly_one_wins(
    kube: KubeApi, namespace: str, defaults: PlatformDefaults
) -> None:
    pool = await _owner(kube, namespace, "pool-1")
    first = await _owner(kube, namespace, "session-1")
    second = await _owner(kube, namespace, "session-2")
    # A node selector no node matches: the pod stays Pending and never starts a container.
    resolved = resolve_pod_template(
        PodTemplate.model_validate({"nodeSelector": {"sandfleet.dev/test": "no-such-node"}}),
        defaults,
    )
    created = await kube.checked(
        "POST", collection(namespace, "pods"), pool_pod(pool, resolved, "pool-token", defaults)
    )
    path = f"{collection(namespace, 'pods')}/{created['metadata']['name']}"
    idle = await _pod_with_condition(kube, path, "Unschedulable")
    read_at = idle["metadata"]["resourceVersion"]
    now = dt.datetime.now(dt.UTC)

    answers = await asyncio.gather(
        *(
            kube.request("PATCH", path, claim_patch(s, read_at, now), content_type=MERGE_PATCH)
            for s in (first, second)
        )
    )

    assert sorted(a.status for a in answers) == [200, 409], [a.body for a in answers]
    winner = first if answers[0].status == 200 else second
    claimed = (await kube.checked("GET", path))["metadata"]
    assert claimed["labels"]["sandfleet.dev/state"] == "claimed"
    assert claimed["labels"]["sandfleet.dev/session"] == winner.name
    assert claimed["labels"]["sandfleet.dev/pool"] == "pool-1"  # still counted as the pool's
    assert claimed["ownerReferences"] == [owner_reference(winner)]
    assert claimed["annotations"]["sandfleet.dev/claimed-at"] == now.strftime("%Y-%m-%dT%H:%M:%SZ")
    assert "sandfleet.dev/template-hash" in claimed["annotations"]
    # A claim with the resourceVersion read before the first one cannot succeed later either.
    late = await kube.request(
        "PATCH", path, claim_patch(first, read_at, now), content_type=MERGE_PATCH
    )
    assert late.status == 409
