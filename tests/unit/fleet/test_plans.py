"""Session plans: spec errors people can read, lifecycle merging, and the three pod sources."""

from __future__ import annotations

import copy
from typing import Any, cast

import pytest

from sandfleet.api import EgressMode, LifecycleSpec, PodTemplate, Reason
from sandfleet.fleet.plans import (
    PlanError,
    SessionPlan,
    merge_lifecycle,
    parse_session_spec,
    plan_session,
)
from sandfleet.kube import KubeClient, NotFoundError

NS = "team-a"
TEMPLATES = f"/apis/sandfleet.dev/v1alpha1/namespaces/{NS}/sandboxtemplates"
POOLS = f"/apis/sandfleet.dev/v1alpha1/namespaces/{NS}/sandboxpools"


class ObjectStore:
    """Stands in for KubeClient.get: the objects by path, a NotFoundError for the rest."""

    def __init__(self, objects: dict[str, dict[str, Any]] | None = None) -> None:
        self.objects = objects or {}
        self.reads: list[str] = []

    async def get(self, path: str) -> dict[str, Any]:
        self.reads.append(path)
        if path not in self.objects:
            body = {"kind": "Status", "code": 404, "reason": "NotFound", "message": "not found"}
            raise NotFoundError(404, "NotFound", "not found", body, method="GET", path=path)
        return copy.deepcopy(self.objects[path])


def template_object(spec: dict[str, Any]) -> dict[str, Any]:
    return {"kind": "SandboxTemplate", "spec": spec}


async def plan(
    raw: dict[str, Any], objects: dict[str, dict[str, Any]] | None = None
) -> SessionPlan:
    store = ObjectStore(objects)
    return await plan_session(cast(KubeClient, store), NS, parse_session_spec(raw))


PYTHON_TEMPLATE = template_object(
    {
        "pod": {"image": "python:3.12", "workdir": "/work"},
        "network": {"egress": "Internet"},
        "lifecycle": {
            "activeDeadlineSeconds": 600,
            "idleTimeoutSeconds": 60,
            "sandboxLostRetries": 2,
        },
    }
)


# --- parse_session_spec --------------------------------------------------------------------
def test_an_empty_spec_is_a_raw_sandbox_with_defaults() -> None:
    spec = parse_session_spec({})

    assert spec.agent is None
    assert spec.lifecycle == LifecycleSpec()
    assert spec.network is None


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (
            {"agent": {"model": "m", "prompt": "p", "maxTurns": 0}},
            "invalid spec: agent.maxTurns: Input should be greater than or equal to 1",
        ),
        ({"agent": {"prompt": "p"}}, "invalid spec: agent.model: Field required"),
        (
            {"env": [{"name": "OK"}, {"name": "1BAD"}]},
            "invalid spec: env.1.name: String should match pattern",
        ),
        (
            {"templateRef": {"name": "a"}, "poolRef": {"name": "b"}},
            "invalid spec: spec: Value error, set at most one of templateRef, template and poolRef",
        ),
        (
            {"files": [{"path": "in.txt"}]},
            "invalid spec: files.0: Value error, file in.txt: exactly one of content, "
            "configMapKeyRef, secretKeyRef",
        ),
    ],
)
def test_an_invalid_spec_names_each_field_by_its_camel_case_path_on_one_line(
    raw: dict[str, Any], message: str
) -> None:
    with pytest.raises(PlanError) as caught:
        parse_session_spec(raw)

    assert caught.value.reason == Reason.INVALID_SPEC
    text = str(caught.value)
    assert text.startswith(message)
    assert "\n" not in text
    assert "pydantic" not in text  # no library internals or links in a condition message


def test_every_problem_of_an_invalid_spec_is_listed() -> None:
    with pytest.raises(PlanError) as caught:
        parse_session_spec({"agent": {"model": "", "prompt": "p", "temperature": "hot"}})

    problems = str(caught.value).removeprefix("invalid spec: ").split("; ")
    assert [p.split(":")[0] for p in problems] == ["agent.model", "agent.temperature"]


# --- merge_lifecycle -----------------------------------------------------------------------
def test_without_a_template_the_sessions_lifecycle_is_used_as_it_is() -> None:
    own = LifecycleSpec(idle_timeout_seconds=30)

    assert merge_lifecycle(None, own) is own


def test_the_session_wins_and_the_template_fills_what_the_session_left_unset() -> None:
    defaults = LifecycleSpec(
        active_deadline_seconds=600, idle_timeout_seconds=60, ttl_seconds_after_finished=300
    )
    own = LifecycleSpec(idle_timeout_seconds=5)

    merged = merge_lifecycle(defaults, own)

    assert merged == LifecycleSpec(
        active_deadline_seconds=600, idle_timeout_seconds=5, ttl_seconds_after_finished=300
    )


def test_a_ttl_of_zero_set_by_the_session_is_kept() -> None:
    merged = merge_lifecycle(
        LifecycleSpec(ttl_seconds_after_finished=300), LifecycleSpec(ttl_seconds_after_finished=0)
    )

    assert merged.ttl_seconds_after_finished == 0


def test_unset_sandbox_lost_retries_take_the_templates_value() -> None:
    own = LifecycleSpec.model_validate({"idleTimeoutSeconds": 5})

    assert merge_lifecycle(LifecycleSpec(sandbox_lost_retries=3), own).sandbox_lost_retries == 3


def test_sandbox_lost_retries_set_by_the_session_win_over_the_templates() -> None:
    own = LifecycleSpec.model_validate({"sandboxLostRetries": 1})

    assert merge_lifecycle(LifecycleSpec(sandbox_lost_retries=3), own).sandbox_lost_retries == 1


def test_sandbox_lost_retries_set_to_zero_by_the_session_turn_the_templates_retries_off() -> None:
    own = LifecycleSpec.model_validate({"sandboxLostRetries": 0})
    assert "sandbox_lost_retries" in own.model_fields_set  # the model does tell them apart

    assert merge_lifecycle(LifecycleSpec(sandbox_lost_retries=3), own).sandbox_lost_retries == 0


# --- plan_session --------------------------------------------------------------------------
async def test_a_session_without_a_source_runs_the_default_pod_without_egress() -> None:
    planned = await plan({"lifecycle": {"idleTimeoutSeconds": 9}})

    assert planned == SessionPlan(
        pod=None,
        egress=EgressMode.NONE,
        lifecycle=LifecycleSpec(idle_timeout_seconds=9),
        pool=None,
    )


async def test_an_inline_template_is_the_pod_and_the_sessions_egress_applies() -> None:
    planned = await plan(
        {"template": {"image": "busybox", "workdir": "/w"}, "network": {"egress": "All"}}
    )

    assert planned.pod == PodTemplate(image="busybox", workdir="/w")
    assert (planned.egress, planned.pool) == (EgressMode.ALL, None)


async def test_an_inline_template_without_a_network_has_no_egress() -> None:
    planned = await plan({"template": {"image": "busybox"}})

    assert planned.egress == EgressMode.NONE


async def test_a_template_ref_gives_the_pod_its_egress_and_its_lifecycle_defaults() -> None:
    store = ObjectStore({f"{TEMPLATES}/python": PYTHON_TEMPLATE})
    spec = parse_session_spec(
        {"templateRef": {"name": "python"}, "lifecycle": {"idleTimeoutSeconds": 5}}
    )

    planned = await plan_session(cast(KubeClient, store), NS, spec)

    assert store.reads == [f"{TEMPLATES}/python"]
    assert planned == SessionPlan(
        pod=PodTemplate(image="python:3.12", workdir="/work"),
        egress=EgressMode.INTERNET,
        lifecycle=LifecycleSpec(
            active_deadline_seconds=600, idle_timeout_seconds=5, sandbox_lost_retries=2
        ),
        pool=None,
    )


async def test_the_sessions_own_egress_wins_over_its_templates() -> None:
    planned = await plan(
        {"templateRef": {"name": "python"}, "network": {"egress": "None"}},
        {f"{TEMPLATES}/python": PYTHON_TEMPLATE},
    )

    assert planned.egress == EgressMode.NONE


async def test_a_template_without_a_network_section_means_no_egress() -> None:
    planned = await plan(
        {"templateRef": {"name": "bare"}}, {f"{TEMPLATES}/bare": template_object({})}
    )

    assert (planned.pod, planned.egress) == (PodTemplate(), EgressMode.NONE)


async def test_a_missing_template_fails_the_plan_with_template_not_found() -> None:
    with pytest.raises(PlanError) as caught:
        await plan({"templateRef": {"name": "nope"}})

    assert caught.value.reason == Reason.TEMPLATE_NOT_FOUND
    assert str(caught.value) == f"SandboxTemplate {NS}/nope not found"


async def test_a_pool_with_a_template_ref_plans_from_that_template() -> None:
    store = ObjectStore(
        {
            f"{POOLS}/warm": {"spec": {"templateRef": {"name": "python"}, "replicas": 3}},
            f"{TEMPLATES}/python": PYTHON_TEMPLATE,
        }
    )
    spec = parse_session_spec({"poolRef": {"name": "warm"}})

    planned = await plan_session(cast(KubeClient, store), NS, spec)

    assert store.reads == [f"{POOLS}/warm", f"{TEMPLATES}/python"]
    assert planned == SessionPlan(
        pod=PodTemplate(image="python:3.12", workdir="/work"),
        egress=EgressMode.INTERNET,
        lifecycle=LifecycleSpec(
            active_deadline_seconds=600, idle_timeout_seconds=60, sandbox_lost_retries=2
        ),
        pool="warm",
    )


async def test_a_pool_with_an_inline_template_gives_its_pod_but_no_defaults() -> None:
    planned = await plan(
        {"poolRef": {"name": "warm"}, "lifecycle": {"activeDeadlineSeconds": 30}},
        {f"{POOLS}/warm": {"spec": {"template": {"image": "busybox"}}}},
    )

    assert planned == SessionPlan(
        pod=PodTemplate(image="busybox"),
        egress=EgressMode.NONE,
        lifecycle=LifecycleSpec(active_deadline_seconds=30),
        pool="warm",
    )


async def test_a_missing_pool_fails_the_plan_with_pool_not_found() -> None:
    with pytest.raises(PlanError) as caught:
        await plan({"poolRef": {"name": "nope"}})

    assert caught.value.reason == Reason.POOL_NOT_FOUND
    assert str(caught.value) == f"SandboxPool {NS}/nope not found"


async def test_a_pool_whose_template_is_missing_fails_with_template_not_found() -> None:
    with pytest.raises(PlanError) as caught:
        await plan(
            {"poolRef": {"name": "warm"}},
            {f"{POOLS}/warm": {"spec": {"templateRef": {"name": "gone"}}}},
        )

    assert caught.value.reason == Reason.TEMPLATE_NOT_FOUND


async def test_an_invalid_pool_fails_the_plan_as_an_invalid_spec() -> None:
    invalid = {"spec": {"template": {"image": "a"}, "templateRef": {"name": "b"}}}

    with pytest.raises(PlanError) as caught:
        await plan({"poolRef": {"name": "warm"}}, {f"{POOLS}/warm": invalid})

    assert caught.value.reason == Reason.INVALID_SPEC
    assert "SandboxPool warm" in str(caught.value)


async def test_an_invalid_template_is_reported_on_one_line_like_an_invalid_session() -> None:
    broken = template_object({"pod": {"workdir": "relative/path"}})

    with pytest.raises(PlanError) as caught:
        await plan({"templateRef": {"name": "broken"}}, {f"{TEMPLATES}/broken": broken})

    assert caught.value.reason == Reason.INVALID_SPEC
    text = str(caught.value)
    assert text.startswith("SandboxTemplate broken: pod.workdir: String should match pattern")
    assert "\n" not in text
    assert "pydantic" not in text
