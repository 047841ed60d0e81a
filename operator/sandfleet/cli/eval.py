"""`sandfleet eval BENCH_DIR`: a seed-format benchmark folder, scored and resumable."""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.text import Text

from sandfleet.agent import AgentConfig
from sandfleet.cli.consoles import error_console, plural
from sandfleet.cli.eval_html import REPORT_HTML, write_html_report
from sandfleet.cli.eval_runner import EvalRunner, Job
from sandfleet.cli.eval_samples import EvalContext
from sandfleet.cli.execution import agent_config
from sandfleet.cli.exit_codes import ExitCode
from sandfleet.cli.interrupts import run_until_interrupted
from sandfleet.cli.run import add_session_target_arguments
from sandfleet.errors import SandfleetError
from sandfleet.eval.bench_folder import BenchError, Benchmark, load_benchmark
from sandfleet.eval.problems import Problem, problems_from_rows, sandbox_task
from sandfleet.eval.records import SampleLog, SampleRecord, latest
from sandfleet.eval.report import (
    REPORT_FILE,
    RESULTS_FILE,
    RUNS_FOLDER,
    SAMPLES_FILE,
    report_markdown,
    results_document,
    summaries,
    write_report,
    write_results,
)
from sandfleet.eval.user_process import vanilla_prompts
from sandfleet.settings import Settings
from sandfleet.tasks import TaskSpec

DESCRIPTION = """\
Score a benchmark folder in the seed project's format: config.yaml (dataset, data_files,
split, system_prompt/instance_prompt templates, optional working_dir/input_dir/output_dir),
the dataset rows (id, problem_statement, ground_truth, input_files, ...), reward.py
(compute_score(agent_answer, ground_truth, **row)) and optionally vanilla_llm_prompt.py
(create_prompt(row), for --mode llm).

Writes into --out: samples.jsonl (one line per problem and sample, as each finishes; a rerun
skips what is there), runs/<mode>/<sample>/ (trajectories), results.json and report.md.
"""

EPILOG = """\
exit codes: 0 every sample scored; 1 some sample is an error (the run or the reward failed);
2 bad usage, benchmark folder or row (nothing sent to the model); 130 interrupted (rerun
the same command to resume).
"""

DEFAULT_REWARD_TIMEOUT_S = 60.0
_PROMPTS_TIMEOUT_S = 120.0


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("bench_dir", type=Path, metavar="BENCH_DIR", help="the benchmark folder")
    parser.add_argument(
        "--mode", choices=["sandbox", "llm"], default="sandbox",
        help="sandbox: the agent loop in a sandbox (default); llm: one chat completion, no tools",
    )  # fmt: skip
    parser.add_argument(
        "--samples", "-k", type=int, default=1, metavar="K",
        help="samples per problem (default 1); pass@k is reported when K > 1",
    )  # fmt: skip
    parser.add_argument(
        "--out", "-o", type=Path, metavar="DIR",
        help="output folder (default eval-results/<benchmark>); both modes may share one",
    )  # fmt: skip
    parser.add_argument(
        "--concurrency", "-c", dest="concurrency", type=int, metavar="N",
        help=f"samples running at once (default {Settings.model_fields['concurrency'].default}); "
        "also bounds the model requests in flight",
    )  # fmt: skip
    parser.add_argument("--limit", type=int, metavar="N", help="only the first N problems")
    parser.add_argument(
        "--reward-timeout", dest="reward_timeout_s", type=float,
        default=DEFAULT_REWARD_TIMEOUT_S, metavar="SECONDS",
        help=f"bound on one compute_score call (default {DEFAULT_REWARD_TIMEOUT_S:g})",
    )  # fmt: skip
    parser.add_argument(
        "--retry-errors", action="store_true",
        help="on resume, run again the samples recorded as errors",
    )  # fmt: skip
    cluster = parser.add_argument_group(
        "kubernetes backend",
        "--backend kubernetes runs each sandbox-mode sample as a managed SandboxSession (the "
        "operator runs the loop and calls the model; at most --concurrency at once), deleted "
        "as soon as it finished. Input files go inline (UTF-8 text); the model endpoint must "
        "be reachable from the operator. llm mode always runs from here.",
    )
    add_session_target_arguments(cluster, runs="each sample", sandboxes="the sandboxes")


@dataclasses.dataclass(frozen=True, slots=True)
class _Plan:
    """Everything checked before the first model request."""

    benchmark: Benchmark
    problems: list[Problem]
    config: AgentConfig
    out: Path
    prompts: dict[str, str]
    bodies: dict[tuple[str, int], dict[str, Any]] | None


def eval_command(args: argparse.Namespace, settings: Settings, console: Console) -> int:
    errors = error_console()
    try:
        plan = _plan(args, settings)
        sample_log = SampleLog(plan.out / SAMPLES_FILE)
        recorded = latest(sample_log.load())
    except (SandfleetError, OSError) as error:
        errors.print(Text.assemble(("error: ", "red"), str(error)))
        return ExitCode.USAGE
    jobs: list[Job] = [(p, k) for p in plan.problems for k in range(args.samples)]
    skip = {key for key, record in recorded.items() if not (args.retry_errors and record.is_error)}
    todo = [job for job in jobs if (args.mode, job[0].id, job[1]) not in skip]
    console.print(
        f"{plan.benchmark.name}: {plural(len(plan.problems), 'problem')} x "
        f"{plural(args.samples, 'sample')}, "
        f"mode {args.mode}: {len(jobs) - len(todo)} already in {plan.out}, {len(todo)} to run, "
        f"{min(settings.concurrency, max(len(todo), 1))} at a time"
    )
    # --results-dir, when given, moves the per-sample folders out of --out.
    runs = args.results_dir or plan.out / RUNS_FOLDER
    run_settings = settings.model_copy(update={"results_dir": runs / args.mode})
    context = EvalContext(
        benchmark=plan.benchmark,
        config=plan.config,
        settings=run_settings,
        reward_timeout_s=args.reward_timeout_s,
        vanilla_prompts=plan.prompts,
    )
    runner = EvalRunner(
        context=context,
        sample_log=sample_log,
        console=console,
        mode=args.mode,
        concurrency=settings.concurrency,
        session_bodies=plan.bodies,
    )
    interrupted = bool(todo) and run_until_interrupted(_run(runner, todo)) is None
    if interrupted:
        console.print(
            Text(f"interrupted: run the same command again to resume ({plan.out})", "yellow")
        )
    records = list(latest(sample_log.load()).values())
    wanted = {(args.mode, p.id, k) for p, k in jobs}
    mine = [record for record in records if record.key in wanted]
    config = _run_config(args, settings, plan)
    write_results(
        plan.out,
        results_document(records, mode=args.mode, elapsed_s=runner.stats.elapsed_s, config=config),
    )
    missing = len(jobs) - len(mine)
    write_report(plan.out, report_markdown(records, config=config, missing=missing))
    write_html_report(plan.out, records, config=config, missing=missing)
    _print_summary(console, mine, args.mode, plan.out)
    if interrupted or len(mine) < len(jobs):
        return ExitCode.CANCELLED
    return ExitCode.NOT_SUBMITTED if any(r.is_error for r in mine) else ExitCode.OK


async def _run(runner: EvalRunner, todo: Sequence[Job]) -> bool:
    await runner.run(todo)
    return True


def _plan(args: argparse.Namespace, settings: Settings) -> _Plan:
    """Load and check everything (raises SandfleetError for the user, before any request)."""
    if args.samples < 1:
        raise BenchError("--samples must be at least 1")
    if args.limit is not None and args.limit < 1:
        raise BenchError("--limit must be at least 1")
    benchmark = load_benchmark(args.bench_dir)
    problems = problems_from_rows(benchmark)[: args.limit]
    # On the kubernetes backend every sandbox-mode sample is a managed session.
    config = agent_config(settings, loop_here=settings.backend != "kubernetes")
    # Every sample's requests go through one client: the endpoint sees at most N at once.
    config = dataclasses.replace(config, endpoint_concurrency=settings.concurrency)
    out: Path = args.out or Path("eval-results") / benchmark.name
    out.mkdir(parents=True, exist_ok=True)
    prompts: dict[str, str] = {}
    if args.mode == "llm" and benchmark.vanilla_prompt_file is not None:
        rows = [problem.row for problem in problems]
        texts = asyncio.run(
            vanilla_prompts(
                benchmark.vanilla_prompt_file, rows, where=benchmark.source,
                timeout_s=_PROMPTS_TIMEOUT_S,
            )
        )  # fmt: skip
        prompts = {problem.id: text for problem, text in zip(problems, texts, strict=True)}
    bodies = None
    if args.mode == "sandbox" and settings.backend == "kubernetes":
        bodies = _session_bodies(benchmark, problems, args.samples, config, settings)
    return _Plan(benchmark, problems, config, out, prompts, bodies)


def _session_bodies(
    benchmark: Benchmark,
    problems: Sequence[Problem],
    samples: int,
    config: AgentConfig,
    settings: Settings,
) -> dict[tuple[str, int], dict[str, Any]]:
    """Every sample's SandboxSession, built up front so a row that cannot go to the cluster
    (binary or oversized inputs, a layout the backend cannot honour) stops the run early."""
    from sandfleet.cli.cluster_run import session_for_task
    from sandfleet.cli.input_files import read_text_inputs
    from sandfleet.fleet.manifests import ManifestError

    bodies: dict[tuple[str, int], dict[str, Any]] = {}
    for problem in problems:
        for sample in range(samples):
            spec = TaskSpec(task=sandbox_task(problem, sample, benchmark), paths=benchmark.paths)
            try:
                inputs = read_text_inputs(spec.task.files)
                bodies[(problem.id, sample)] = session_for_task(spec, config, settings, inputs)
            except ManifestError as error:
                raise BenchError(f"problem {problem.id!r}: {error}") from error
    return bodies


def _run_config(args: argparse.Namespace, settings: Settings, plan: _Plan) -> dict[str, Any]:
    config = plan.config
    return {
        "benchmark": plan.benchmark.name,
        "bench_dir": str(plan.benchmark.folder),
        "data": plan.benchmark.source,
        "mode": args.mode,
        "backend": settings.backend if args.mode == "sandbox" else "local",
        "model": config.model,
        "base_url": config.base_url,
        "samples": args.samples,
        "concurrency": settings.concurrency,
        "limit": args.limit,
        "max_turns": config.max_turns,
        "max_tokens": config.max_tokens,
        "temperature": config.temperature,
        "top_p": config.top_p,
        "seed": config.seed,
        "extra_body": dict(config.extra_body) if config.extra_body else None,
        "request_timeout_s": config.request_timeout_s,
        "tool_timeout_s": config.tool_timeout_s,
        "reward_timeout_s": args.reward_timeout_s,
        "output_dir": plan.benchmark.paths.output_dir if plan.benchmark.paths else None,
    }


def _print_summary(console: Console, records: Sequence[SampleRecord], mode: str, out: Path) -> None:
    if not records:
        return
    summary = summaries(records)[mode]["all"]
    passes = "  ".join(f"pass@{k} {v:.3f}" for k, v in summary.pass_at.items())
    console.print(
        Text.assemble(
            ("mean score ", "bold"), f"{summary.mean_score:.3f}", f"  {passes}",
            f"  {plural(summary.samples, 'sample')}, {plural(summary.num_errors, 'error')} "
            f"({summary.run_errors} run, {summary.reward_errors} reward), {summary.wrong} wrong",
        )
    )  # fmt: skip
    console.print(
        Text(
            f"results {out / RESULTS_FILE}   report {out / REPORT_FILE} and {out / REPORT_HTML}",
            style="dim",
        )
    )
