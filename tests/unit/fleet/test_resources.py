"""The pure builders: pods, token Secrets, NetworkPolicies and the claim patch, field by field.

The security properties of a sandbox pod are asserted one by one, each in a test of its own,
so that loosening one shows up as a failing test with a name that says what was lost.
"""

from __future__ import annotations

import base64
import dataclasses
import datetime as dt
import ipaddress
import json
from typing import Any

import pytest
import yaml

from sandfleet.api import EgressMode, PodTemplate
from sandfleet.fleet.claim_patches import adoption_patch, claim_patch, gateway_claim_patch
from sandfleet.fleet.naming import label_value
from sandfleet.fleet.resources import (
    ObjectRef,
    PlatformDefaults,
    ResolvedPod,
    owner_reference,
    pool_pod,
    pool_token_secret,
    resolve_pod_template,
    session_pod,
    session_token_secret,
    template_hash,
    token_secret,
)
from sandfleet.operator.network_policies import (
    pool_network_policy,
    session_network_policy,
)

DEFAULTS = PlatformDefaults(
    image="registry.example/sandbox:1",
    operator_namespace="sandfleet-system",
    operator_pod_labels={"app.kubernetes.io/name": "sandfleet-operator"},
)
SESSION = ObjectRef("team-a", "fix-bug-42", "uid-s", "SandboxSession", "sandfleet.dev/v1alpha1")
POOL = ObjectRef("team-a", "swe", "uid-p", "SandboxPool", "sandfleet.dev/v1alpha1")
LONG_NAME = "a-session-name-that-is-far-longer-than-any-label-may-be-" * 3


def template(**fields: Any) -> PodTemplate:
    return PodTemplate.model_validate(fields)


def cold_pod(pod_template: PodTemplate | None = None, **kw: Any) -> dict[str, Any]:
    defaults = kw.pop("defaults", DEFAULTS)
    session = kw.pop("session", SESSION)
    resolved = resolve_pod_template(pod_template, defaults)
    return session_pod(session, resolved, "fix-bug-42-token", defaults)


def container(pod: dict[str, Any]) -> dict[str, Any]:
    (only,) = pod["spec"]["containers"]
    assert isinstance(only, dict)
    return only


# --- the session pod -----------------------------------------------------------------------


def test_a_cold_pod_is_named_after_its_session_labelled_and_owned_by_it() -> None:
    pod = cold_pod()

    assert pod["apiVersion"] == "v1" and pod["kind"] == "Pod"
    assert pod["metadata"]["name"] == "fix-bug-42"
    assert pod["metadata"]["namespace"] == "team-a"
    assert pod["metadata"]["labels"] == {
        "app.kubernetes.io/managed-by": "sandfleet-operator",
        "app.kubernetes.io/component": "sandbox",
        "sandfleet.dev/session": "fix-bug-42",
    }
    assert pod["metadata"]["ownerReferences"] == [
        {
            "apiVersion": "sandfleet.dev/v1alpha1",
            "kind": "SandboxSession",
            "name": "fix-bug-42",
            "uid": "uid-s",
            "controller": True,
            "blockOwnerDeletion": True,
        }
    ]


def test_a_sandbox_gets_no_service_account_token_and_no_service_links() -> None:
    spec = cold_pod()["spec"]

    assert spec["automountServiceAccountToken"] is False
    assert spec["enableServiceLinks"] is False
    assert "serviceAccountName" not in spec
    assert "volumes" not in spec


def test_a_sandbox_runs_as_uid_1000_never_as_root() -> None:
    security = cold_pod()["spec"]["securityContext"]

    assert security["runAsNonRoot"] is True
    assert (security["runAsUser"], security["runAsGroup"], security["fsGroup"]) == (1000,) * 3


def test_a_sandbox_runs_under_the_runtime_default_seccomp_profile() -> None:
    assert cold_pod()["spec"]["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}


def test_the_runtime_container_drops_all_capabilities_and_cannot_escalate() -> None:
    security = container(cold_pod())["securityContext"]

    assert security["allowPrivilegeEscalation"] is False
    assert security["capabilities"] == {"drop": ["ALL"]}
    assert "add" not in security["capabilities"]
    assert "privileged" not in security


def test_nothing_in_a_sandbox_pod_shares_the_hosts_namespaces() -> None:
    spec = cold_pod(template(node_selector={"pool": "a"}))["spec"]

    for key in ("hostNetwork", "hostPID", "hostIPC", "shareProcessNamespace"):
        assert key not in spec


def test_the_token_reaches_the_runtime_only_through_a_secret_key_ref() -> None:
    (token_env,) = [e for e in container(cold_pod())["env"] if "TOKEN" in e["name"]]

    assert token_env == {
        "name": "SANDFLEET_RUNTIME_TOKEN",
        "valueFrom": {"secretKeyRef": {"name": "fix-bug-42-token", "key": "token"}},
    }


def test_a_template_cannot_replace_the_token_but_its_other_env_is_kept_in_order() -> None:
    pod = cold_pod(
        template(
            env=[
                {"name": "B", "value": "2"},
                {"name": "SANDFLEET_RUNTIME_TOKEN", "value": "chosen-by-the-user"},
                {"name": "SANDFLEET_RUNTIME_TOKEN_FILE", "value": "/etc/hostname"},
                {"name": "A", "value": "1"},
            ]
        )
    )

    env = container(pod)["env"]
    assert [e["name"] for e in env] == [
        "SANDFLEET_RUNTIME_TOKEN",
        "B",
        "A",
        "SANDFLEET_RUNTIME_MAX_UPLOAD_BYTES",
    ]
    assert env[1:3] == [{"name": "B", "value": "2"}, {"name": "A", "value": "1"}]
    assert "chosen-by-the-user" not in json.dumps(pod)


def test_a_crashed_runtime_is_never_restarted_in_place() -> None:
    assert cold_pod()["spec"]["restartPolicy"] == "Never"


def test_the_runtime_serves_grpc_on_50051_and_is_ready_when_its_health_check_passes() -> None:
    runtime = container(cold_pod())

    assert runtime["name"] == "runtime"
    assert runtime["ports"] == [{"name": "grpc", "containerPort": 50051, "protocol": "TCP"}]
    assert runtime["readinessProbe"] == {"grpc": {"port": 50051}, "periodSeconds": 1}


def test_the_platform_defaults_fill_image_pull_policy_resources_dns_and_grace_period() -> None:
    pod = cold_pod()
    runtime = container(pod)

    assert (runtime["image"], runtime["imagePullPolicy"]) == (
        "registry.example/sandbox:1",
        "IfNotPresent",
    )
    assert runtime["resources"] == {
        "requests": {"cpu": "10m", "memory": "64Mi", "ephemeral-storage": "64Mi"},
        "limits": {"memory": "512Mi", "ephemeral-storage": "1Gi"},
    }
    assert pod["spec"]["dnsPolicy"] == "ClusterFirst"
    assert pod["spec"]["terminationGracePeriodSeconds"] == 5


def test_a_platform_cpu_limit_is_applied_when_set() -> None:
    defaults = PlatformDefaults(
        image="i", operator_namespace="o", operator_pod_labels={"a": "b"}, cpu_limit="2"
    )

    assert container(cold_pod(defaults=defaults))["resources"]["limits"] == {
        "memory": "512Mi",
        "cpu": "2",
        "ephemeral-storage": "1Gi",
    }


def test_a_templates_image_and_resources_replace_the_defaults_whole() -> None:
    runtime = container(
        cold_pod(
            template(
                image="python:3.12",
                imagePullPolicy="Always",
                resources={"requests": {"memory": "1Gi"}},
            )
        )
    )

    assert (runtime["image"], runtime["imagePullPolicy"]) == ("python:3.12", "Always")
    # Not mixed with the default 512Mi limit, which would be below the 1Gi request.
    assert runtime["resources"] == {
        "requests": {"memory": "1Gi", "ephemeral-storage": "64Mi"},
        "limits": {"ephemeral-storage": "1Gi"},
    }


def test_every_sandbox_gets_the_platforms_disk_limit_and_upload_cap_whatever_its_template() -> None:
    """Issue 26, item 9: no sandbox without an ephemeral-storage limit (past it the kubelet
    evicts the pod), and no template that lifts the runtime's upload cap."""
    defaults = dataclasses.replace(
        DEFAULTS,
        ephemeral_storage_request="100Mi",
        ephemeral_storage_limit="2Gi",
        max_upload_bytes=1000,
    )
    sneaky = template(
        # The CRD has no ephemeral-storage field: the model drops it like any unknown field.
        resources={"requests": {"memory": "1Gi"}, "limits": {"ephemeral-storage": "1Ti"}},
        env=[{"name": "SANDFLEET_RUNTIME_MAX_UPLOAD_BYTES", "value": str(2**40)}],
    )

    for pod in (cold_pod(defaults=defaults), cold_pod(sneaky, defaults=defaults)):
        runtime = container(pod)
        assert runtime["resources"]["requests"]["ephemeral-storage"] == "100Mi"
        assert runtime["resources"]["limits"]["ephemeral-storage"] == "2Gi"
        caps = [e for e in runtime["env"] if e["name"] == "SANDFLEET_RUNTIME_MAX_UPLOAD_BYTES"]
        assert caps == [{"name": "SANDFLEET_RUNTIME_MAX_UPLOAD_BYTES", "value": "1000"}]
    pooled = resolve_pod_template(sneaky, defaults)
    assert pooled.resources["limits"] == {"ephemeral-storage": "2Gi"}
    # A pool's idle pods made before the cap or the limit changed are replaced.
    assert template_hash(pooled) != template_hash(resolve_pod_template(sneaky, DEFAULTS))


def test_the_default_workdir_passes_no_arguments_and_another_one_is_passed_as_a_flag() -> None:
    assert "args" not in container(cold_pod())
    assert container(cold_pod(template(workdir="/work")))["args"] == ["--workdir", "/work"]


def test_runtime_class_node_selector_and_tolerations_are_passed_through() -> None:
    spec = cold_pod(
        template(
            runtimeClassName="gvisor",
            nodeSelector={"sandfleet.dev/sandboxes": "yes"},
            tolerations=[{"key": "sandbox", "operator": "Exists", "effect": "NoSchedule"}],
        )
    )["spec"]

    assert spec["runtimeClassName"] == "gvisor"
    assert spec["nodeSelector"] == {"sandfleet.dev/sandboxes": "yes"}
    assert spec["tolerations"] == [{"key": "sandbox", "operator": "Exists", "effect": "NoSchedule"}]
    assert not {"runtimeClassName", "nodeSelector", "tolerations"} & set(cold_pod()["spec"])


def test_a_long_session_name_gives_a_bounded_pod_name_and_label() -> None:
    session = ObjectRef("team-a", LONG_NAME, "uid", "SandboxSession", "sandfleet.dev/v1alpha1")
    pod = cold_pod(session=session)

    assert len(pod["metadata"]["name"]) <= 63
    assert pod["metadata"]["labels"]["sandfleet.dev/session"] == label_value(LONG_NAME)
    assert pod["metadata"]["ownerReferences"][0]["name"] == LONG_NAME


# --- the pool pod and the template hash ----------------------------------------------------


def test_a_pool_pod_is_idle_owned_by_its_pool_and_named_by_the_api_server() -> None:
    resolved = resolve_pod_template(template(image="python:3.12"), DEFAULTS)
    pod = pool_pod(POOL, resolved, "swe-pool-token", DEFAULTS)
    metadata = pod["metadata"]

    assert "name" not in metadata
    assert metadata["generateName"] == "swe-"
    assert metadata["labels"] == {
        "app.kubernetes.io/managed-by": "sandfleet-operator",
        "app.kubernetes.io/component": "sandbox",
        "sandfleet.dev/pool": "swe",
        "sandfleet.dev/state": "idle",
    }
    assert metadata["annotations"] == {"sandfleet.dev/template-hash": template_hash(resolved)}
    assert [(o["kind"], o["uid"], o["controller"]) for o in metadata["ownerReferences"]] == [
        ("SandboxPool", "uid-p", True)
    ]
    assert pod["spec"] == session_pod(SESSION, resolved, "swe-pool-token", DEFAULTS)["spec"]


def test_the_template_hash_changes_with_the_pod_settings_and_only_with_them() -> None:
    base = resolve_pod_template(template(image="python:3.12"), DEFAULTS)
    same = resolve_pod_template(template(image="python:3.12"), DEFAULTS)
    other_image = resolve_pod_template(template(image="python:3.13"), DEFAULTS)
    other_env = resolve_pod_template(
        template(image="python:3.12", env=[{"name": "A", "value": "1"}]), DEFAULTS
    )

    assert template_hash(base) == template_hash(same)
    assert len({template_hash(p) for p in (base, other_image, other_env)}) == 3


def test_a_new_default_image_changes_the_hash_of_templates_that_name_none() -> None:
    newer = PlatformDefaults(
        image="registry.example/sandbox:2",
        operator_namespace="sandfleet-system",
        operator_pod_labels={"app.kubernetes.io/name": "sandfleet-operator"},
    )

    assert template_hash(resolve_pod_template(None, DEFAULTS)) != template_hash(
        resolve_pod_template(None, newer)
    )


def test_the_template_hash_is_the_same_in_every_process_and_release() -> None:
    # A changed hash replaces every idle pod of every pool: it must not vary by process.
    pod = ResolvedPod(
        image="img",
        image_pull_policy="Never",
        resources={"requests": {}, "limits": {}},
    )

    # sha256 of the canonical JSON, worked out by hand:
    #   {"env":[],"image":"img","imagePullPolicy":"Never","nodeSelector":{},"resources":
    #    {"limits":{},"requests":{}},"runtimeClassName":null,"tolerations":[],"workdir":"/testbed"}
    assert template_hash(pod) == "5ac9df6b2b8a28a2"


# --- the claim -----------------------------------------------------------------------------


def test_a_claim_patch_is_conditional_on_the_resource_version_and_moves_ownership() -> None:
    now = dt.datetime(2026, 11, 22, 10, 0, 0, 123456, tzinfo=dt.UTC)

    patch = claim_patch(SESSION, "4711", now)

    assert patch == {
        "metadata": {
            "resourceVersion": "4711",
            "labels": {"sandfleet.dev/state": "claimed", "sandfleet.dev/session": "fix-bug-42"},
            "annotations": {"sandfleet.dev/claimed-at": "2026-11-22T10:00:00Z"},
            "ownerReferences": [owner_reference(SESSION)],
        }
    }


def test_the_gateways_claim_patch_is_conditional_and_leaves_ownership_to_the_adoption() -> None:
    now = dt.datetime(2026, 11, 22, 10, 0, 0, tzinfo=dt.UTC)

    patch = gateway_claim_patch(LONG_NAME, "4711", now, "gateway-7d9-x")

    assert patch == {
        "metadata": {
            "resourceVersion": "4711",
            "labels": {
                "sandfleet.dev/state": "claimed",
                "sandfleet.dev/session": label_value(LONG_NAME),
            },
            "annotations": {
                "sandfleet.dev/claimed-at": "2026-11-22T10:00:00Z",
                "sandfleet.dev/claimed-by": "gateway-7d9-x",
            },
        }
    }
    assert "ownerReferences" not in patch["metadata"]  # the session has no uid yet


def test_an_adoption_makes_the_session_the_pods_only_controlling_owner() -> None:
    assert adoption_patch(SESSION) == {"metadata": {"ownerReferences": [owner_reference(SESSION)]}}
    assert owner_reference(SESSION)["controller"] is True


# --- token Secrets -------------------------------------------------------------------------


def test_a_token_secret_holds_the_token_base64_encoded_under_token() -> None:
    secret = token_secret(SESSION, "fix-bug-42-token", "s3cr3t/+=", {"extra": "x"})

    assert (secret["kind"], secret["type"], secret["immutable"]) == ("Secret", "Opaque", True)
    assert base64.b64decode(secret["data"]["token"]).decode() == "s3cr3t/+="
    assert "stringData" not in secret
    assert secret["metadata"]["name"] == "fix-bug-42-token"
    assert secret["metadata"]["labels"] == {
        "app.kubernetes.io/managed-by": "sandfleet-operator",
        "app.kubernetes.io/component": "runtime-token",
        "extra": "x",
    }
    assert secret["metadata"]["ownerReferences"] == [owner_reference(SESSION)]


def test_session_and_pool_token_secrets_are_named_and_labelled_after_their_owner() -> None:
    session_secret = session_token_secret(SESSION, "t")
    pool_secret = pool_token_secret(POOL, "t")

    assert session_secret["metadata"]["name"] == "fix-bug-42-token"
    assert session_secret["metadata"]["labels"]["sandfleet.dev/session"] == "fix-bug-42"
    assert pool_secret["metadata"]["name"] == "swe-pool-token"
    assert pool_secret["metadata"]["labels"]["sandfleet.dev/pool"] == "swe"


# --- NetworkPolicies -----------------------------------------------------------------------


def test_only_the_operators_and_gateways_pods_may_connect_and_only_to_the_runtime_port() -> None:
    policy = session_network_policy(SESSION, EgressMode.NONE, DEFAULTS)
    system = {"matchLabels": {"kubernetes.io/metadata.name": "sandfleet-system"}}

    assert policy["spec"]["ingress"] == [
        {
            "from": [
                {
                    "namespaceSelector": system,
                    "podSelector": {
                        "matchLabels": {"app.kubernetes.io/name": "sandfleet-operator"}
                    },
                },
                {
                    "namespaceSelector": system,
                    "podSelector": {"matchLabels": {"app.kubernetes.io/name": "sandfleet-gateway"}},
                },
            ],
            "ports": [{"protocol": "TCP", "port": 50051}],
        }
    ]


def test_the_gateways_pod_labels_come_from_the_platform_defaults() -> None:
    defaults = PlatformDefaults(
        image="i",
        operator_namespace="sys",
        operator_pod_labels={"app": "op"},
        gateway_pod_labels={"app": "gw", "tier": "edge"},
    )

    (rule,) = pool_network_policy(POOL, defaults)["spec"]["ingress"]
    selectors = [peer["podSelector"]["matchLabels"] for peer in rule["from"]]
    namespaces = {
        peer["namespaceSelector"]["matchLabels"]["kubernetes.io/metadata.name"]
        for peer in rule["from"]
    }
    assert selectors == [{"app": "op"}, {"app": "gw", "tier": "edge"}]
    assert namespaces == {"sys"}


def test_egress_none_denies_everything_including_dns() -> None:
    spec = session_network_policy(SESSION, EgressMode.NONE, DEFAULTS)["spec"]

    assert spec["policyTypes"] == ["Ingress", "Egress"]
    assert spec["egress"] == []


def test_egress_all_allows_everything() -> None:
    assert session_network_policy(SESSION, EgressMode.ALL, DEFAULTS)["spec"]["egress"] == [{}]


def allowed_by(egress: list[dict[str, Any]], address: str, port: int | None = None) -> bool:
    """Whether an ipBlock of `egress` lets traffic to `address` out (on `port`; None: on
    any port). A rule without `to` lets everything out; one without `ports`, every port."""
    ip = ipaddress.ip_address(address)
    for rule in egress:
        ports = {p["port"] for p in rule.get("ports", [])}
        if ports and (port is None or port not in ports):
            continue
        if "to" not in rule:
            return True
        for peer in rule["to"]:
            if "ipBlock" not in peer:
                continue
            block = peer["ipBlock"]
            cidr = ipaddress.ip_network(block["cidr"])
            if ip.version != cidr.version or ip not in cidr:
                continue
            if not any(ip in ipaddress.ip_network(e) for e in block.get("except", [])):
                return True
    return False


@pytest.mark.parametrize(
    "address",
    [
        "169.254.169.254",  # cloud metadata: node credentials
        "10.96.0.1",  # the kubernetes Service
        "172.16.5.4",
        "192.168.1.1",
        "100.64.0.10",
        "127.0.0.1",
        "fd00::1",
        "fe80::1",
    ],
)
def test_egress_internet_cannot_reach_private_link_local_or_metadata_addresses(
    address: str,
) -> None:
    egress = session_network_policy(SESSION, EgressMode.INTERNET, DEFAULTS)["spec"]["egress"]

    assert not allowed_by(egress, address)


@pytest.mark.parametrize("address", ["8.8.8.8", "140.82.112.3", "2606:4700::1111"])
def test_egress_internet_reaches_public_addresses(address: str) -> None:
    egress = session_network_policy(SESSION, EgressMode.INTERNET, DEFAULTS)["spec"]["egress"]

    assert allowed_by(egress, address)


@pytest.mark.parametrize("address", ["10.244.0.1", "10.96.0.10", "192.168.1.1", "169.254.169.254"])
def test_egress_internet_opens_port_53_of_no_private_address(address: str) -> None:
    """Issue 26, item 6: port 53 was open to every destination, so a listener on port 53 of
    the node (10.244.0.1 on the test cluster) or of any pod was reachable."""
    egress = session_network_policy(SESSION, EgressMode.INTERNET, DEFAULTS)["spec"]["egress"]

    assert not allowed_by(egress, address, 53)
    assert allowed_by(egress, "8.8.8.8", 53)  # public resolvers stay public addresses


def test_egress_internet_lets_dns_out_to_the_cluster_resolvers_pods_only() -> None:
    egress = session_network_policy(SESSION, EgressMode.INTERNET, DEFAULTS)["spec"]["egress"]

    (dns,) = [rule for rule in egress if "ports" in rule]
    assert dns == {
        "to": [
            {
                "namespaceSelector": {
                    "matchLabels": {"kubernetes.io/metadata.name": "kube-system"}
                },
                "podSelector": {"matchLabels": {"k8s-app": "kube-dns"}},
            }
        ],
        "ports": [{"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53}],
    }


def test_the_resolver_is_configurable_and_may_include_addresses() -> None:
    defaults = dataclasses.replace(
        DEFAULTS,
        dns_namespace="dns",
        dns_pod_labels={"app": "unbound"},
        dns_cidrs=("169.254.20.10/32",),
    )
    egress = session_network_policy(SESSION, EgressMode.INTERNET, defaults)["spec"]["egress"]

    (dns,) = [rule for rule in egress if "ports" in rule]
    assert dns["to"] == [
        {
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "dns"}},
            "podSelector": {"matchLabels": {"app": "unbound"}},
        },
        {"ipBlock": {"cidr": "169.254.20.10/32"}},
    ]
    assert allowed_by(egress, "169.254.20.10", 53)
    assert not allowed_by(egress, "169.254.20.10", 80)
    with pytest.raises(ValueError, match="dns_pod_labels"):
        dataclasses.replace(DEFAULTS, dns_pod_labels={})


def test_a_sessions_policy_selects_exactly_the_label_its_pod_and_claimed_pods_carry() -> None:
    session = ObjectRef("team-a", LONG_NAME, "uid", "SandboxSession", "sandfleet.dev/v1alpha1")
    policy = session_network_policy(session, EgressMode.NONE, DEFAULTS)
    pod = cold_pod(session=session)
    claimed = claim_patch(session, "1", dt.datetime.now(dt.UTC))

    selector = policy["spec"]["podSelector"]["matchLabels"]
    assert selector == {"sandfleet.dev/session": label_value(LONG_NAME)}
    assert selector.items() <= pod["metadata"]["labels"].items()
    assert selector.items() <= claimed["metadata"]["labels"].items()
    assert len(policy["metadata"]["name"]) <= 63
    assert policy["metadata"]["ownerReferences"] == [owner_reference(session)]


def test_a_pools_policy_covers_idle_and_claimed_pods_alike_and_lets_nothing_out() -> None:
    policy = pool_network_policy(POOL, DEFAULTS)
    idle = pool_pod(POOL, resolve_pod_template(None, DEFAULTS), "swe-pool-token", DEFAULTS)
    claimed_labels = {
        **idle["metadata"]["labels"],
        **gateway_claim_patch("s", "1", dt.datetime.now(dt.UTC), "gw-0")["metadata"]["labels"],
    }

    selector = policy["spec"]["podSelector"]["matchLabels"]
    assert policy["metadata"]["name"] == "swe-pool"
    assert selector == {"sandfleet.dev/pool": "swe"}
    assert selector.items() <= idle["metadata"]["labels"].items()
    # A claim keeps the pool label, so the claimed pod never leaves the pool's policy.
    assert claimed_labels["sandfleet.dev/state"] == "claimed"
    assert selector.items() <= claimed_labels.items()
    assert policy["spec"]["egress"] == []
    assert (
        policy["spec"]["ingress"]
        == session_network_policy(SESSION, EgressMode.NONE, DEFAULTS)["spec"]["ingress"]
    )


# --- plumbing ------------------------------------------------------------------------------


def test_every_built_object_is_plain_json_and_yaml() -> None:
    resolved = resolve_pod_template(None, DEFAULTS)
    built = [
        session_pod(SESSION, resolved, "t", DEFAULTS),
        pool_pod(POOL, resolved, "t", DEFAULTS),
        session_token_secret(SESSION, "t"),
        session_network_policy(SESSION, EgressMode.INTERNET, DEFAULTS),
        pool_network_policy(POOL, DEFAULTS),
        claim_patch(SESSION, "1", dt.datetime.now(dt.UTC)),
        gateway_claim_patch("s", "1", dt.datetime.now(dt.UTC), "gw"),
        adoption_patch(SESSION),
    ]

    for body in built:
        assert json.loads(json.dumps(body)) == body
        assert yaml.safe_load(yaml.safe_dump(body)) == body  # no enum members left inside


def test_each_call_returns_a_fresh_object_that_is_safe_to_edit() -> None:
    resolved = resolve_pod_template(template(nodeSelector={"a": "b"}), DEFAULTS)
    first = session_pod(SESSION, resolved, "t", DEFAULTS)

    first["spec"]["nodeSelector"]["a"] = "changed"
    first["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "99"

    second = session_pod(SESSION, resolved, "t", DEFAULTS)
    assert second["spec"]["nodeSelector"] == {"a": "b"}
    assert second["spec"]["containers"][0]["resources"]["requests"]["cpu"] == "10m"


def test_an_object_ref_is_read_from_an_api_object() -> None:
    body = {
        "apiVersion": "sandfleet.dev/v1alpha1",
        "kind": "SandboxSession",
        "metadata": {"namespace": "team-a", "name": "fix-bug-42", "uid": "uid-s"},
    }

    assert ObjectRef.of(body) == SESSION


def test_platform_defaults_refuse_an_empty_operator_selector() -> None:
    # An empty podSelector would admit every pod of the operator's namespace.
    with pytest.raises(ValueError, match="operator"):
        PlatformDefaults(image="i", operator_namespace="o", operator_pod_labels={})


def test_platform_defaults_refuse_an_empty_gateway_selector() -> None:
    with pytest.raises(ValueError, match="gateway"):
        PlatformDefaults(
            image="i", operator_namespace="o", operator_pod_labels={"a": "b"}, gateway_pod_labels={}
        )
