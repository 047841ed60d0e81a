"""A managed session with `spec.agent.recordTokens: true`: the operator's agent driver runs
the loop against the scripted endpoint (answering token requests as vLLM does) in a REAL
runtime on 127.0.0.1, and the stored trajectory exports as training rows.

No Kubernetes API runs here: the status patches the driver sends in the background go to a
missing client and are dropped with a warning (the driver's contract: progress patches never
end a run); the session's status is not what this test checks."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest

from sandfleet.agent import StopReason, read_trajectory
from sandfleet.agent.training_rows import training_rows
from sandfleet.api import AgentSpec
from sandfleet.fleet.pod_index import PodIndex
from sandfleet.fleet.resources import ObjectRef, PlatformDefaults
from sandfleet.operator.agent_driver import agent_config, drive_agent
from sandfleet.operator.context import OperatorContext
from sandfleet.operator.metrics import OperatorMetrics
from sandfleet.operator.session_status import SessionStatus
from sandfleet.operator.settings import OperatorSettings
from sandfleet.operator.trajectory_store import DirectoryTrajectoryStore
from tests.support.runtime_server import running_runtime
from tests.support.scripted_openai import Reply, ScriptedOpenAIServer, bash, submit

pytestmark = pytest.mark.integration


@pytest.mark.parametrize("record", [True, False], ids=["recordTokens", "default"])
async def test_a_managed_session_with_record_tokens_stores_token_records(
    tmp_path: Path, record: bool
) -> None:
    workdir = tmp_path / "tree"
    workdir.mkdir()
    ctx = OperatorContext(
        settings=OperatorSettings(model_endpoints_allowed=["http://127.0.0.1:*"]),
        kube=None,  # type: ignore[arg-type]
        pods=PodIndex(),
        metrics=OperatorMetrics(),
        store=DirectoryTrajectoryStore(tmp_path / "store"),
        defaults=PlatformDefaults("img", operator_namespace="sys", operator_pod_labels={"a": "op"}),
        events=lambda *args, **kwargs: None,  # type: ignore[arg-type,return-value]
    )
    session = ObjectRef("ns", "managed", "uid-1", "SandboxSession", "sandfleet.dev/v1alpha1")
    status = SessionStatus(
        None,  # type: ignore[arg-type]
        "ns", "managed", generation=1, current={}, metrics=ctx.metrics,
        clock=lambda: dt.datetime.now(dt.UTC),
    )  # fmt: skip
    script = [Reply(tool_calls=[bash("echo hi")]), Reply(text="ok", tool_calls=[submit()])]
    async with (
        ScriptedOpenAIServer(script, tokens="vllm") as server,
        running_runtime(workdir) as (runtime, token),
    ):
        spec = {"model": "m", "prompt": "Say hi.", "baseURL": server.base_url}
        agent = AgentSpec.model_validate({**spec, "recordTokens": True} if record else spec)
        config = await agent_config(ctx, "ns", agent)
        result = await drive_agent(
            ctx, session, agent, config, workdir=str(workdir), address=f"127.0.0.1:{runtime.port}",
            token=token, status=status, resuming=False,
        )  # fmt: skip
        await ctx.model_for(config).aclose()
        asked = [bool(r.body.get("return_token_ids")) for r in server.chat_requests]
    assert result.stop_reason is StopReason.SUBMITTED, result.error
    assert asked == [record, record]
    records = list(read_trajectory(ctx.store.writer_path("ns", "managed", "uid-1")))
    tokens = [r for r in records if r["kind"] == "tokens"]
    if not record:
        assert tokens == []
        return
    assert [r["turn"] for r in tokens] == [1, 2]
    (row,) = training_rows(records, "rows")
    assert row["turns"] == 2 and row["stop_reason"] == "submitted"
    assert 0 in row["response_mask"] and 1 in row["response_mask"]
