"""ClaimRequest -> ClaimSpec: defaults, and the field each refusal names."""

from __future__ import annotations

import math

import pytest

from sandfleet.api import EgressMode, LifecycleSpec
from sandfleet.gateway.requests import InvalidRequestError, check_namespace, claim_spec
from sandfleet_proto.gateway.v1 import gateway_service_pb2 as gateway_pb


def spec(**fields: object) -> object:
    request = gateway_pb.ClaimRequest(**({"namespace": "team-a"} | fields))
    return claim_spec(request, caller="alice", default_timeout_s=300.0)


def test_defaults() -> None:
    claim = claim_spec(
        gateway_pb.ClaimRequest(namespace="team-a"), caller="alice", default_timeout_s=300.0
    )
    assert (claim.pool, claim.template, claim.count) == (None, None, 1)
    assert (claim.generate_name, claim.egress, claim.timeout_s) == (
        "sandbox-",
        EgressMode.NONE,
        300,
    )
    assert claim.lifecycle == LifecycleSpec()
    assert claim.caller == "alice"


def test_values_pass_through() -> None:
    request = gateway_pb.ClaimRequest(
        namespace="team-a",
        template="python",
        count=100,
        env={"PATH_EXTRA": "/opt"},
        files=[
            gateway_pb.InputFile(path="a/b.txt", content=b"x"),
            gateway_pb.InputFile(path="/run.sh", content=b"#!/bin/sh", mode=0o755),
        ],
        lifecycle=gateway_pb.Lifecycle(idle_timeout_seconds=60),
        generate_name="rl-",
        egress="Internet",
        timeout_seconds=5.5,
    )
    claim = claim_spec(request, caller="alice", default_timeout_s=300.0)
    assert (claim.template, claim.count, claim.generate_name) == ("python", 100, "rl-")
    assert claim.files == [("a/b.txt", b"x", 0o644), ("/run.sh", b"#!/bin/sh", 0o755)]
    assert claim.lifecycle == LifecycleSpec(idle_timeout_seconds=60)
    assert (claim.egress, claim.timeout_s) == (EgressMode.INTERNET, 5.5)


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"namespace": ""}, "namespace"),
        ({"namespace": "Team_A"}, "namespace"),
        ({"count": 101}, "count"),
        ({"pool": "a", "template": "b"}, "pool, template"),
        ({"template": "-x"}, "template"),
        ({"env": {"A=B": "1"}}, "env['A=B']"),
        (
            {"files": [gateway_pb.InputFile(path="ok"), gateway_pb.InputFile(path="a\0b")]},
            "files[1].path",
        ),
        ({"files": [gateway_pb.InputFile(path="x", mode=0o10000)]}, "files[0].mode"),
        ({"generate_name": "x" * 59}, "generate_name"),
        ({"egress": "none"}, "egress"),
        ({"timeout_seconds": math.nan}, "timeout_seconds"),
    ],
)
def test_refusals_name_the_field(fields: dict[str, object], field: str) -> None:
    with pytest.raises(InvalidRequestError) as refused:
        spec(**fields)
    assert refused.value.field == field
    assert str(refused.value).startswith(f"{field}: ")


def test_a_gateway_serving_some_namespaces_names_them() -> None:
    with pytest.raises(InvalidRequestError, match="serves only namespaces team-a, team-b"):
        check_namespace("team-c", ("team-a", "team-b"))


def test_a_claim_id_passes_through_and_a_malformed_one_is_refused_by_name() -> None:
    assert claim_spec(
        gateway_pb.ClaimRequest(namespace="team-a", claim_id="rollout-7.batch_2"),
        caller="alice", default_timeout_s=300.0,
    ).claim_id == "rollout-7.batch_2"  # fmt: skip
    assert (
        claim_spec(
            gateway_pb.ClaimRequest(namespace="team-a"), caller="alice", default_timeout_s=300.0
        ).claim_id
        == ""
    )
    for bad in ("has space", "x" * 64, "slash/y"):
        with pytest.raises(InvalidRequestError, match="claim_id"):
            spec(claim_id=bad)
