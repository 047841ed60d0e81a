"""`workdir` is the code's one spelling of the sandbox's working directory (docs/architecture.md,
"Names"); the wire keeps `working_dir`, and the SDK's old attribute still answers, warning."""

from __future__ import annotations

import pytest

from sandfleet.clients.gateway.client import GatewaySandboxInfo
from sandfleet_proto.gateway.v1 import gateway_service_pb2 as gateway_pb


def test_the_wire_field_lands_in_workdir_and_the_old_attribute_warns() -> None:
    message = gateway_pb.ClaimedSandbox(
        namespace="team-a", name="s1", token="t", pod="p", warm=True, working_dir="/workspace"
    )
    info = GatewaySandboxInfo.from_message(message)

    assert info.workdir == "/workspace"
    with pytest.warns(DeprecationWarning, match="working_dir is deprecated: use workdir"):
        assert info.working_dir == "/workspace"
