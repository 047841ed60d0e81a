"""The operator's loop configuration from spec.agent: the sampling knobs and the extra body
reach the model, and sessions with different knobs never share a model client."""

from __future__ import annotations

from pathlib import Path

from sandfleet.api import AgentSpec
from sandfleet.fleet.pod_index import PodIndex
from sandfleet.fleet.resources import PlatformDefaults
from sandfleet.operator.agent_driver import agent_config
from sandfleet.operator.context import OperatorContext
from sandfleet.operator.metrics import OperatorMetrics
from sandfleet.operator.settings import OperatorSettings
from sandfleet.operator.trajectory_store import DirectoryTrajectoryStore


def context(tmp_path: Path) -> OperatorContext:
    # No Kubernetes API is reached: the spec names its endpoint and no key Secret.
    return OperatorContext(
        settings=OperatorSettings(model_endpoints_allowed=["http://vllm:8000/v1"]),
        kube=None,  # type: ignore[arg-type]
        pods=PodIndex(),
        metrics=OperatorMetrics(),
        store=DirectoryTrajectoryStore(tmp_path),
        defaults=PlatformDefaults("img", operator_namespace="sys", operator_pod_labels={"a": "op"}),
        events=lambda *args, **kwargs: None,  # type: ignore[arg-type,return-value]
    )


def spec(**extra: object) -> AgentSpec:
    return AgentSpec.model_validate(
        {"model": "m", "prompt": "p", "baseURL": "http://vllm:8000/v1", **extra}
    )


async def test_top_p_seed_and_extra_body_reach_the_loop_config(tmp_path: Path) -> None:
    config = await agent_config(
        context(tmp_path),
        "ns",
        spec(
            topP="0.95", seed=11, extraBody='{"chat_template_kwargs": {"enable_thinking": false}}'
        ),
    )
    assert (config.top_p, config.seed) == (0.95, 11)
    assert config.extra_body == {"chat_template_kwargs": {"enable_thinking": False}}


async def test_unset_knobs_stay_unset(tmp_path: Path) -> None:
    config = await agent_config(context(tmp_path), "ns", spec())
    assert (config.top_p, config.seed, config.extra_body) == (None, None, None)


async def test_sessions_with_other_knobs_get_their_own_model_client(tmp_path: Path) -> None:
    ctx = context(tmp_path)
    plain = await agent_config(ctx, "ns", spec())
    seeded = await agent_config(ctx, "ns", spec(seed=1))
    thinking = await agent_config(ctx, "ns", spec(extraBody='{"enable_thinking": true}'))
    models = [ctx.model_for(c) for c in (plain, seeded, thinking, plain)]
    try:
        assert models[0] is models[3]
        assert len({id(m) for m in models}) == 3
    finally:
        for model in models[:3]:
            await model.aclose()


async def test_record_tokens_reaches_the_loop_config_and_gets_its_own_model_client(
    tmp_path: Path,
) -> None:
    ctx = context(tmp_path)
    plain = await agent_config(ctx, "ns", spec())
    recording = await agent_config(ctx, "ns", spec(recordTokens=True))
    assert (plain.record_tokens, recording.record_tokens) == (False, True)
    models = [ctx.model_for(plain), ctx.model_for(recording)]
    try:
        # A client built to record asks every request for token ids; a plain one must not,
        # so the two sessions cannot share one.
        assert models[0] is not models[1]
    finally:
        for model in models:
            await model.aclose()
