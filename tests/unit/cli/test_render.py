"""The trace, run summary and batch table as the user reads them (rendered to a string)."""

from __future__ import annotations

import io
from pathlib import Path

from rich.console import Console

from sandfleet.agent import (
    AgentEvent,
    ModelReplied,
    ObservationReceived,
    ToolCalled,
    TurnStarted,
)
from sandfleet.cli.render import (
    TraceRenderer,
    batch_summary_table,
    finished_task_line,
    observation_summary,
    print_run_summary,
)
from sandfleet.runs.outcomes import TaskOutcome


def rendered(draw: object) -> str:
    buffer = io.StringIO()
    console = Console(file=buffer, width=120, color_system=None)
    if callable(draw):
        draw(console)
    else:
        console.print(draw)
    return buffer.getvalue()


def test_observation_summaries_drop_the_seed_headers() -> None:
    bash_ok = "Exit code: 0 Execution output of \\[execute_bash]: \\[STDOUT] 42"
    bash_failed = (
        "Exit code: Error: Exit code 2 Execution output of \\[execute_bash]: \\[STDOUT] "
        "\\[STDERR] ls: cannot access 'x'"
    )
    editor = "Execution output of \\[str_replace_editor]: File created successfully at: /t/a"

    assert observation_summary(bash_ok) == "exit 0 | 42"
    assert observation_summary(bash_failed) == "exit 2 | stderr: ls: cannot access 'x'"
    assert observation_summary(editor) == "File created successfully at: /t/a"
    assert observation_summary("Submitted.") == "Submitted."


def test_the_trace_shows_turns_calls_and_short_observations_verbatim() -> None:
    events: list[AgentEvent] = [
        TurnStarted("t", 1, 30),
        ModelReplied("t", 1, "Let me look at [bold]this[/bold].", 1, 0.5),
        ToolCalled("t", 1, "execute_bash", "cat [input].txt"),
        ObservationReceived("t", 1, "execute_bash", "Exit code: 0 Execution output of "
                            "\\[execute_bash]: \\[STDOUT] " + "x" * 300, 0.25),
        ToolCalled("t", 1, "submit", "{}"),
    ]  # fmt: skip

    def draw(console: Console) -> None:
        renderer = TraceRenderer(console, prefix="[t] ")
        for event in events:
            renderer(event)

    lines = rendered(draw).splitlines()

    assert lines[0] == "[t] turn 1/30"
    assert lines[1] == "[t]   model Let me look at [bold]this[/bold]."
    assert lines[2] == "[t]   → execute_bash cat [input].txt"
    assert lines[3].startswith("[t]     ← 0.25s exit 0 | xxx")
    assert lines[3].endswith("x…")
    assert len(lines[3]) <= 120
    assert lines[4].rstrip() == "[t]   → submit"


def test_the_run_summary_names_the_answer_and_every_path() -> None:
    outcome = TaskOutcome(
        id="t", stop_reason="submitted", answer="east 18998", turns=7, prompt_tokens=10,
        completion_tokens=5, total_time_s=3.25, output_files=("answer.txt",),
        results_dir="/r/t", trajectory="/r/t/trajectory.jsonl",
    )  # fmt: skip

    text = rendered(lambda console: print_run_summary(console, outcome))

    assert "stop reason submitted   turns 7   tokens 10 in / 5 out   3.2s" in text
    assert "east 18998" in text
    assert f"output files  {Path('/r/t/output')} (1)" in text
    assert "trajectory    /r/t/trajectory.jsonl" in text
    assert "result        /r/t/result.json" in text


def test_a_finished_task_line_marks_failures_and_shows_the_error() -> None:
    failed = TaskOutcome(
        id="t9", stop_reason="launch_failed", error="no namespaces", total_time_s=1
    )
    done = TaskOutcome(id="t1", stop_reason="max_turns", turns=30)

    assert rendered(finished_task_line(failed)).startswith("✗ t9 launch_failed  0 turns  1.0s")
    assert "no namespaces" in rendered(finished_task_line(failed))
    assert rendered(finished_task_line(done)).startswith("• t1 max_turns  30 turns")


def test_the_batch_table_counts_stop_reasons_tokens_and_throughput() -> None:
    outcomes = [
        TaskOutcome(id=f"s{n}", stop_reason="submitted", answer="42", turns=4,
                    prompt_tokens=100, completion_tokens=10)
        for n in range(3)
    ] + [
        TaskOutcome(id="e", stop_reason="model_error", turns=1),
        TaskOutcome(id="n", stop_reason="submitted", answer=None, turns=2),
    ]  # fmt: skip

    text = rendered(batch_summary_table(outcomes, ran_now=2, elapsed_s=30.0))

    rows = {line.split("│")[1].strip(): line for line in text.splitlines() if "│" in line}
    assert [cell.strip() for cell in rows["submitted"].split("│")[2:7]] == [
        "3", "60%", "4.0", "300", "30",
    ]  # fmt: skip
    # A submit without an answer is counted apart, never as "submitted".
    assert [cell.strip() for cell in rows["submitted_no_answer"].split("│")[2:4]] == ["1", "20%"]
    assert [cell.strip() for cell in rows["model_error"].split("│")[2:4]] == ["1", "20%"]
    assert [cell.strip() for cell in rows["all"].split("│")[2:5]] == ["5", "100%", "3.0"]
    assert "this session: 2 tasks in 30.0s = 4.0 tasks/min" in text
