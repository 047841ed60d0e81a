"""`sandfleet eval --backend kubernetes` against the real operator: the shipped example folder,
each problem a managed SandboxSession, the model endpoint behind the concurrency limit, every
session deleted (and so every sandbox reclaimed) when its problem is scored."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.cluster.harness.cluster_access import ClusterUnderTest
from tests.cluster.harness.kube_api import KubeApi
from tests.cluster.harness.operator_harness import SESSIONS, OperatorProcess, wait_no_leftovers
from tests.integration.cli.harness import TaskScripts, cli_environment, read_jsonl, run_cli
from tests.support.example_bench import EXAMPLE, EXAMPLE_SOLUTIONS
from tests.support.scripted_openai import ScriptedOpenAIServer

pytestmark = [pytest.mark.cluster, pytest.mark.slow]

CONCURRENCY = 2


async def test_eval_on_kubernetes_scores_the_example_folder_and_reclaims_every_sandbox(
    operator: OperatorProcess,
    kube: KubeApi,
    namespace: str,
    cluster_under_test: ClusterUnderTest,
    tmp_path: Path,
) -> None:
    out = tmp_path / "out"
    async with ScriptedOpenAIServer(responder=TaskScripts(EXAMPLE_SOLUTIONS)) as model:
        result = await run_cli(
            "eval", str(EXAMPLE), "--backend", "kubernetes",
            "--kubeconfig", str(cluster_under_test.kubeconfig), "-n", namespace,
            "--model", "scripted", "--base-url", model.base_url, "--max-turns", "6",
            "--concurrency", str(CONCURRENCY), "--out", str(out),
            env=cli_environment(tmp_path / "home"), cwd=tmp_path,
        )  # fmt: skip
        max_in_flight = model.max_in_flight
        requests = len(model.chat_requests)

    samples = out / "samples.jsonl"
    records = read_jsonl(samples) if samples.exists() else []
    # A failure names each sample's error: a flake under load must say what failed.
    errors = {r.get("problem_id"): r.get("error") for r in records if r.get("error")}
    assert result.returncode == 0, (result, errors)
    assert sorted(r["problem_id"] for r in records) == sorted(
        ["sum-of-squares", "fibonacci-30", "orders-total", "longest-word"]
    )
    # Computed in the pods from the rows' input files (objects and JSON strings alike).
    by_id = {r["problem_id"]: r for r in records}
    assert by_id["sum-of-squares"]["agent_answer"] == "33090"
    assert by_id["orders-total"]["agent_answer"] == "1371.05"
    assert all(r["score"] == 1.0 and r["error"] is None for r in records), records
    assert all(r["session"] and r["session"].startswith(f"{namespace}/") for r in records)
    assert all(r["turns"] == 2 and r["prompt_tokens"] > 0 for r in records)
    assert requests == 2 * len(records)
    assert max_in_flight <= CONCURRENCY  # the operator's requests stayed behind the limit
    results = json.loads((out / "results.json").read_text())
    assert (results["mean_score"], results["total"], results["num_errors"]) == (1.0, 4, 0)
    assert results["config"]["backend"] == "kubernetes"
    # Every session was deleted as soon as its problem finished; the operator reclaimed its pod.
    await wait_no_leftovers(kube, namespace)
    sessions = SESSIONS.format(ns=namespace)
    await kube.wait_for(sessions, lambda r: r.status == 200 and r.body["items"] == [], 30)
